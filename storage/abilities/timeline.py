"""The values of time travel (:class:`~storage.abilities.TimeTravelStorage`): a key's
rewinds, its whole record with them (:class:`Timeline`), and what the model was given for
one reply (:class:`ViewProvenance`).

A rewind never deletes: it records, in the key's sequence, that the messages of the view
after one message are hidden. A message is hidden when some rewind's range
``(to_seq, through_seq]`` holds its sequence number; it stays in the record (listed by
``fetch_all_chats`` with ``metadata["chatlayers"]["rewound"]``, erased by ``delete``).
Everything here is pure: stores read a key's messages and rewinds, these classes apply them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import attrs

from storage.abilities.values import Head
from storage.errors import InvalidArgumentError
from storage.message import ChatMessage, new_message_id

__all__ = [
    "AsOf",
    "Rewind",
    "Timeline",
    "ViewKind",
    "ViewProvenance",
    "check_as_of",
    "mark_rewound",
    "rewound_at",
    "view_kind",
]

#: What ``fetch_as_of`` takes: a store sequence number, a message id or an aware datetime.
AsOf: TypeAlias = "int | str | datetime"
#: What one message of a served view was (:func:`view_kind`).
ViewKind: TypeAlias = Literal["summary", "trimmed", "verbatim"]

REWOUND: Final = "rewound"
"""The key of the marker in ``metadata["chatlayers"]`` of a rewound message."""


def _message_tuple(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    return tuple(messages)


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(values)


def _rewind_tuple(rewinds: Sequence[Rewind]) -> tuple[Rewind, ...]:
    return tuple(rewinds)


@attrs.frozen(slots=True)
class Rewind:
    """One rewind of a key's view (:meth:`TimeTravelStorage.rewind`).

    The messages of the view whose sequence number is in ``(to_seq, through_seq]`` were
    hidden by it; messages saved after it (``seq > through_seq``) are not.

    Attributes:
        to_id: the message the view was rewound to (the newest one kept).
        to_seq: its sequence number.
        through_seq: the key's newest message sequence number when the rewind was made.
        hidden: how many messages it hid (>= 1: a rewind that hides nothing is not kept).
        created_at: when it was made, on the store's clock (UTC).
        seq: its own place in the key's sequence, taken from the message sequence (as a
            record's), so ``fetch_as_of(key, n)`` applies exactly the rewinds with
            ``seq <= n``.
        id: unique id of the rewind.
    """

    to_id: str
    to_seq: int
    through_seq: int
    hidden: int
    created_at: datetime
    seq: int = 0
    id: str = attrs.field(factory=new_message_id)

    def hides(self, seq: int) -> bool:
        """Whether the message with sequence number ``seq`` is in the range it hid."""
        return self.to_seq < seq <= self.through_seq

    def to_json(self) -> dict[str, Any]:
        """JSON-able fields (stores keep rewinds in this shape)."""
        return {
            "id": self.id,
            "seq": self.seq,
            "to_id": self.to_id,
            "to_seq": self.to_seq,
            "through_seq": self.through_seq,
            "hidden": self.hidden,
            "at": self.created_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rewind:
        """The rewind :meth:`to_json` wrote.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a rewind.
        """
        at = datetime.fromisoformat(data["at"])
        if at.tzinfo is None:
            raise ValueError("a rewind's time must be timezone-aware")
        fields = (data["seq"], data["to_seq"], data["through_seq"], data["hidden"])
        if not all(type(n) is int for n in fields) or not isinstance(data["to_id"], str):
            raise TypeError("a rewind field holds the wrong type")
        if not isinstance(data["id"], str):
            raise TypeError("a rewind's id must be a str")
        return cls(data["to_id"], fields[1], fields[2], fields[3], at, fields[0], data["id"])


def rewound_at(message: ChatMessage) -> str | None:
    """The marker ``fetch_all_chats`` puts on a rewound message (the UTC ISO-8601 time of the
    rewind that hid it), or ``None``."""
    marker = message.metadata.get("chatlayers")
    if isinstance(marker, Mapping):
        value = marker.get(REWOUND)
        if isinstance(value, str):
            return value
    return None


def mark_rewound(message: ChatMessage, rewind: Rewind | str) -> ChatMessage:
    """``message`` with ``metadata["chatlayers"]["rewound"]`` set to the time of ``rewind``
    (a :class:`Rewind`, or that time as an ISO string)."""
    when = rewind if isinstance(rewind, str) else rewind.created_at.isoformat()
    if rewound_at(message) == when:
        return message
    marker = message.metadata.get("chatlayers")
    own = dict(marker) if isinstance(marker, Mapping) else {}
    metadata = {**message.metadata, "chatlayers": {**own, REWOUND: when}}
    return attrs.evolve(message, metadata=metadata)


def check_as_of(at: object) -> AsOf:
    """``at`` if ``fetch_as_of`` can take it.

    Raises:
        InvalidArgumentError: not an int >= 0, a non-empty str or a timezone-aware datetime.
    """
    if type(at) is int:
        if at < 0:
            raise InvalidArgumentError(f"as-of sequence number must be >= 0, got {at}")
        return at
    if isinstance(at, str):
        if not at:
            raise InvalidArgumentError("as-of message id must not be empty")
        return at
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidArgumentError(f"as-of datetime must be timezone-aware, got {at!r}")
        return at
    raise InvalidArgumentError(
        "as-of must be a sequence number (int), a message id (str) or a timezone-aware "
        f"datetime, got {type(at).__name__}"
    )


@attrs.frozen(slots=True)
class Timeline:
    """A key's whole record with its rewinds, read in one snapshot
    (:meth:`TimeTravelStorage.fetch_timeline`).

    Attributes:
        head: the key's head at the time of the read.
        seqs: each message's sequence number (same length as ``messages``), increasing.
        messages: every message of the record in store order, rewound ones included (not
            marked: :meth:`marked` marks them).
        rewinds: the key's rewinds, oldest first.
    """

    head: Head
    seqs: tuple[int, ...] = attrs.field(converter=_int_tuple)
    messages: tuple[ChatMessage, ...] = attrs.field(converter=_message_tuple)
    rewinds: tuple[Rewind, ...] = attrs.field(default=(), converter=_rewind_tuple)

    def hidden_by(self, upto: int | None = None) -> dict[int, Rewind]:
        """Sequence number of each hidden message → the rewind that hid it (the earliest
        whose range holds it), counting only rewinds with ``seq <= upto`` when given."""
        out: dict[int, Rewind] = {}
        rewinds = [r for r in self.rewinds if upto is None or r.seq <= upto]
        if not rewinds:
            return out
        for seq in self.seqs:
            for rewind in rewinds:
                if rewind.hides(seq):
                    out[seq] = rewind
                    break
        return out

    def entries(self, upto: int | None = None) -> list[tuple[int, ChatMessage]]:
        """``(seq, message)`` of the view as it stood at sequence number ``upto`` (``None``:
        now): messages with ``seq <= upto``, without those hidden by rewinds with
        ``seq <= upto``."""
        hidden = self.hidden_by(upto)
        return [
            (seq, message)
            for seq, message in zip(self.seqs, self.messages, strict=True)
            if (upto is None or seq <= upto) and seq not in hidden
        ]

    def view(self) -> list[ChatMessage]:
        """The record as ``fetch`` returns it now (rewinds applied)."""
        return [message for _, message in self.entries()]

    def marked(self) -> list[ChatMessage]:
        """Every message in store order, each rewound one marked (:func:`mark_rewound`)."""
        hidden = self.hidden_by()
        return [
            mark_rewound(message, hidden[seq]) if seq in hidden else message
            for seq, message in zip(self.seqs, self.messages, strict=True)
        ]

    def split_call(self, message_id: str) -> str | None:
        """The id of the tool call whose result the view holds right after message
        ``message_id``: a cut there (a rewind to it, a fork at it) would leave that call
        unanswered, a history no model client accepts (OpenAI chat completions: each
        ``tool_calls`` entry is followed by its ``tool`` message). ``None``: no such result
        follows (or no such message in the view)."""
        view = self.view()
        for index, message in enumerate(view[:-1]):
            if message.id == message_id:
                after = view[index + 1]
                return after.tool_call_id or "?" if after.role == "tool" else None
        return None

    def seq_of(self, message_id: str) -> int | None:
        """The sequence number of the message with ``message_id``, or ``None``."""
        for seq, message in zip(self.seqs, self.messages, strict=True):
            if message.id == message_id:
                return seq
        return None

    def cut(self, at: AsOf) -> int:
        """The sequence number ``at`` stands for: itself (an int), the message's (a message
        id), or for a datetime the newest sequence number up to which every message and
        rewind was made at or before it (:meth:`as_of`).

        Raises:
            InvalidArgumentError: ``at`` is not an as-of value (:func:`check_as_of`), or a
                message id the record does not hold.
        """
        at = check_as_of(at)
        if isinstance(at, int):
            return at
        if isinstance(at, str):
            seq = self.seq_of(at)
            if seq is None:
                raise InvalidArgumentError(f"no message {at!r} in this conversation's record")
            return seq
        events = sorted(
            [
                *((seq, m.created_at) for seq, m in zip(self.seqs, self.messages, strict=True)),
                *((r.seq, r.created_at) for r in self.rewinds),
            ],
            key=lambda event: event[0],
        )
        cut = 0
        for seq, when in events:
            if when is not None and when > at:
                break
            cut = seq
        return cut

    def as_of(self, at: AsOf) -> list[ChatMessage]:
        """The record as it stood at ``at``: messages saved later and rewinds made later not
        applied, earlier rewinds applied.

        ``at`` is a sequence number (the record right after it was taken), a message id
        (right after that message was saved) or a timezone-aware datetime: the longest
        prefix of the key's sequence (messages and rewinds) made at or before it. A
        message's time is its ``created_at``, set by the store at save unless the caller
        gave one; with caller-set times that do not follow save order, the prefix ends at
        the first message (in store order) stamped later than ``at``, so an imported history
        stamped in the past is included and a message stamped in the future ends it.

        Raises:
            InvalidArgumentError: a bad ``at`` or an unknown message id.
        """
        return [message for _, message in self.entries(self.cut(at))]


def view_kind(message: ChatMessage) -> ViewKind:
    """What a message of a served view is: ``"summary"`` (a summary, or the leading message
    a summary is merged into), ``"trimmed"`` (a copy of a raw tool result shortened in the
    view, ``metadata["chatlayers"]["trimmed_chars"]``) or ``"verbatim"`` (a raw message, or
    an exact copy of one)."""
    if message.is_summary:
        return "summary"
    marker = message.metadata.get("chatlayers")
    if isinstance(marker, Mapping) and marker.get("trimmed_chars"):
        return "trimmed"
    return "verbatim"


@attrs.frozen(slots=True)
class ViewProvenance:
    """What the model was given for one reply: the view served by the fetch the reply
    answered (:meth:`TimeTravelStorage.provenance`).

    Attributes:
        message_id: the reply.
        messages: the view exactly as that fetch returned it (summary text as it was then).
        served_at: when the view was served (UTC).
        checkpoint_version: the summary checkpoint the view started with (0: none).
        covers_to: the last raw sequence number that checkpoint covers (0: none).
        raw_to: the newest raw sequence number in the record at that fetch; the view's
            verbatim part comes from the raw messages in ``(covers_to, raw_to]``.
        limit: the ``limit`` of that fetch (``None``: the whole view).
        omitted: raw messages of the record at that fetch the view did not show verbatim:
            covered by the summary, or before the ``limit`` window (oldest first).
    """

    message_id: str
    messages: tuple[ChatMessage, ...] = attrs.field(converter=_message_tuple)
    served_at: datetime
    checkpoint_version: int = 0
    covers_to: int = 0
    raw_to: int = 0
    limit: int | None = None
    omitted: tuple[ChatMessage, ...] = attrs.field(default=(), converter=_message_tuple)

    @property
    def kinds(self) -> tuple[ViewKind, ...]:
        """:func:`view_kind` of each message of :attr:`messages`."""
        return tuple(view_kind(m) for m in self.messages)
