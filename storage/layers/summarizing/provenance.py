"""View provenance: what the model was given for each reply, recorded cheaply and rebuilt
exactly.

Each fetch notes, per key, what it served (in memory: the time, ``limit``, the newest window,
the view's length and last message id, the checkpoint it started with; no copy). The next
assistant message saved through the same instance after it is linked to that view by one
application record, kind :data:`KIND`, id ``"chatlayers.provenance:<reply id>"``, kept with
the conversation like any record (erased with it, through every layer below: encrypted under
``encrypt::``, never rewritten by a scrubber: it holds no text)::

    {"reply": "<id>", "at": "2025-...", "limit": null, "window": null, "n": 14, "head": 1,
     "served": 14, "last": "<id of the view's last message>", "version": 3,
     "made": "2025-...", "covers_to": 812, "compaction": 0}

:func:`rebuild` makes the view again: the record as it stood at the view's last message
(:meth:`~storage.abilities.Timeline.entries`), checkpoint ``version`` as it was stored then
(stores keep every version), projected and windowed as the fetch did; any mismatch with what
was noted (the view's length, its last message) means it cannot be known: ``None``. The
checkpoint is recognised by when it was made (``made``, its ``created_at``), not by the
store's epoch or sequence numbers: a copy of the key in another store (``chatlayers
migrate``) numbers its record and versions its own way, and when version ``version`` there is
not that checkpoint, the one made then is looked for among the key's versions. In memory
mode a summary lives in this process only, so a view that held one is rebuilt while this
instance still holds that compaction (``compaction``), else ``None``.

A rebuild reads the key's provenance records, its timeline and the checkpoint versions it
tries, each of them proportional to the conversation; inside :meth:`Recorder.reading` the
rebuilds of one key share one such read (:class:`_Read`), so rebuilding every reply of a
conversation (``chatlayers verify --views``) reads it once instead of once per reply.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    RecordStorage,
    SummaryCheckpoint,
    Timeline,
    TimeTravelStorage,
    ViewProvenance,
    find_ability,
)
from storage.errors import ChatStorageError
from storage.layers.summarizing.cutting import view_form
from storage.layers.summarizing.projection import serve, start_right
from storage.message import ChatKey, ChatMessage
from storage.stores.base import check_key, check_message_id

__all__ = ["KIND", "Recorder", "record_id"]

log = logging.getLogger("storage.layers.summarizing")

KIND: Final = "chatlayers.provenance"
"""The record kind of a reply's provenance."""

# (time, limit, window, view length, head length, served length, last id, checkpoint,
# compaction): what one fetch served, noted on the hot path (a tuple: no object to build).
Noted = tuple[float, int | None, int | None, int, int, int, str, SummaryCheckpoint | None, int]
# The head of a memory-mode view with compaction ``n`` while this instance holds it.
MemoryHead = Callable[[ChatKey, int], Sequence[ChatMessage] | None]
# A view's sequence numbers and messages, and each id's index (``None``: ids repeat).
_View = tuple[list[int], list[ChatMessage], dict[str, int] | None]


def record_id(reply_id: str) -> str:
    """The id of the provenance record of the reply ``reply_id``."""
    return f"{KIND}:{reply_id}"


class Recorder:
    """Notes what each fetch served and links it to the next reply (see the module).

    Args:
        inner: the layer's inner stack: its ``RecordStorage`` keeps the links (without it
            nothing is recorded), its ``TimeTravelStorage`` and ``CheckpointStorage`` give
            the record and the checkpoint versions back.
        cap: the most keys whose last served view is noted (the oldest noted go first).
    """

    __slots__ = ("cap", "checkpoints", "keeping", "kept", "noted", "records", "travel")

    def __init__(self, inner: object, cap: int) -> None:
        self.records: RecordStorage | None = find_ability(inner, RecordStorage)
        self.travel: TimeTravelStorage | None = find_ability(inner, TimeTravelStorage)
        self.checkpoints: CheckpointStorage | None = find_ability(inner, CheckpointStorage)
        self.cap = cap
        self.noted: dict[ChatKey, Noted] = {}
        self.keeping = False
        self.kept: _Read | None = None  # one key's read, while keeping (one: memory bounded)

    def note(
        self,
        key: ChatKey,
        view: Sequence[ChatMessage],
        head: int,
        limit: int | None,
        window: int | None,
        served: int,
        checkpoint: SummaryCheckpoint | None = None,
        compaction: int = 0,
    ) -> None:
        """A fetch of ``key`` served ``served`` messages of ``view`` (its first ``head`` the
        summary part: the projection of ``checkpoint`` in store mode)."""
        if self.records is None or not view:
            return
        noted = self.noted
        noted[key] = (
            time.time(),
            limit,
            window,
            len(view),
            head,
            served,
            view[-1].id,
            checkpoint,
            compaction,
        )
        if len(noted) > self.cap:
            del noted[next(iter(noted))]

    def forget(self, key: ChatKey | None = None, *, user_id: str | None = None) -> None:
        """Drop what was noted: the key's, the user's, or everything (and a kept read)."""
        self.kept = None
        if key is not None:
            self.noted.pop(key, None)
        elif user_id is not None:
            for known in [k for k in self.noted if k.user_id == user_id]:
                del self.noted[known]
        else:
            self.noted.clear()

    async def link(self, key: ChatKey, stored: Sequence[ChatMessage]) -> None:
        """Link the first assistant message of ``stored`` (just saved) to the view the last
        fetch of ``key`` served, once. A failed write is logged: the reply is stored, only
        its provenance is not known."""
        noted = self.noted.get(key)
        records = self.records
        if noted is None or records is None:
            return
        reply = next((m for m in stored if m.role == "assistant"), None)
        if reply is None:
            return
        del self.noted[key]
        at, limit, window, n, head, served, last, checkpoint, compaction = noted
        data: dict[str, Any] = {
            "reply": reply.id,
            "at": datetime.fromtimestamp(at, UTC).isoformat(),
            "limit": limit,
            "window": window,
            "n": n,
            "head": head,
            "served": served,
            "last": last,
            "version": checkpoint.version if checkpoint is not None else 0,
            "made": checkpoint.created_at.isoformat() if checkpoint is not None else "",
            "covers_to": checkpoint.covers_to if checkpoint is not None else 0,
            "compaction": compaction,
        }
        self.kept = None  # a kept read would lack this record
        try:
            await records.save_record(key, ConversationRecord(KIND, data, id=record_id(reply.id)))
        except ChatStorageError:
            log.warning("the provenance of reply %r of %r was not recorded", reply.id, key)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While the block runs, the rebuilds of a key share one read of it (:class:`_Read`:
        its records, its timeline, each checkpoint version): for a caller that rebuilds many
        replies and writes nothing meanwhile (``verify``). Dropped when the block ends."""
        was, self.keeping = self.keeping, True
        try:
            yield
        finally:
            self.keeping, self.kept = was, None

    async def rebuild(
        self, key: ChatKey, message_id: str, memory_head: MemoryHead | None = None
    ) -> ViewProvenance | None:
        """The view the reply ``message_id`` answered, or ``None`` when it cannot be known.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``message_id`` is not a non-empty str.
        """
        check_key(key)
        check_message_id(message_id, "provenance: message_id")
        records, travel = self.records, self.travel
        if records is None or travel is None:
            return None
        read = self.kept
        if read is None or read.key != key:
            read = _Read(key, records, travel, self.checkpoints)
            if self.keeping:
                self.kept = read
        data = await read.linked(record_id(message_id))
        if data is None:
            return None
        return await _rebuild(key, data, read, memory_head)


@attrs.define
class _Read:
    """What rebuilding the replies of ``key`` reads, each part once, when first needed: the
    provenance records (by id), the timeline and each checkpoint version (and its head)."""

    key: ChatKey
    records: RecordStorage
    travel: TimeTravelStorage
    checkpoints: CheckpointStorage | None
    _linked: dict[str, Any] | None = None
    _timeline: Timeline | None = None
    _seqs: dict[str, int] | None = None
    _views: dict[tuple[bool, ...], _View] = attrs.Factory(dict)
    _versions: dict[int, SummaryCheckpoint | None] = attrs.Factory(dict)
    _heads: dict[int, list[ChatMessage]] = attrs.Factory(dict)

    async def linked(self, wanted: str) -> Any | None:
        """The data of the record ``wanted`` (the last of that id), or ``None``."""
        if self._linked is None:
            found = await self.records.fetch_records(self.key, kind=KIND)
            self._linked = {r.id: r.data for r in found}
        return self._linked.get(wanted)

    async def timeline(self) -> Timeline:
        if self._timeline is None:
            self._timeline = await self.travel.fetch_timeline(self.key)
        return self._timeline

    def seq_of(self, timeline: Timeline, message_id: str) -> int | None:
        """``timeline.seq_of`` (the first message of that id), by a map made once."""
        if self._seqs is None:
            pairs = zip(reversed(timeline.messages), reversed(timeline.seqs), strict=True)
            self._seqs = {m.id: seq for m, seq in pairs}  # reversed: the first one wins
        return self._seqs.get(message_id)

    def entries(self, timeline: Timeline, cut: int) -> _View:
        """``timeline.entries(cut)`` as its sequence numbers and its messages (and the
        places of the view they begin): a prefix (seqs increase) of the view under the
        rewinds made by ``cut``, made once for those rewinds and sliced, not filtered again
        for every reply."""
        applied = tuple(rewind.seq <= cut for rewind in timeline.rewinds)
        made = self._views.get(applied)
        if made is None:
            hidden = timeline.hidden_by(cut)
            pairs = zip(timeline.seqs, timeline.messages, strict=True)
            kept = [(seq, m) for seq, m in pairs if seq not in hidden]
            index = {m.id: i for i, (_, m) in enumerate(kept)}
            unique = index if len(index) == len(kept) else None
            made = self._views[applied] = ([seq for seq, _ in kept], [m for _, m in kept], unique)
        seqs, messages, places = made
        end = bisect.bisect_right(seqs, cut)
        return seqs[:end], messages[:end], places

    async def load(self, version: int) -> SummaryCheckpoint | None:
        if version not in self._versions:
            checkpoints = self.checkpoints
            found = (
                None
                if checkpoints is None
                else await checkpoints.load_checkpoint(self.key, version=version)
            )
            self._versions[version] = found
        return self._versions[version]

    def head(self, checkpoint: SummaryCheckpoint) -> list[ChatMessage]:
        """``view_form`` of the checkpoint's messages (the same list for every reply: the
        callers copy it)."""
        head = self._heads.get(checkpoint.version)
        if head is None:
            head = self._heads[checkpoint.version] = view_form(checkpoint.messages)
        return head


async def _rebuild(
    key: ChatKey, data: Any, read: _Read, memory_head: MemoryHead | None
) -> ViewProvenance | None:
    try:
        last, n, head_n = str(data["last"]), int(data["n"]), int(data["head"])
        version, compaction = int(data["version"]), int(data["compaction"])
        limit, window = data["limit"], data["window"]
        served_at = datetime.fromisoformat(data["at"])
    except (KeyError, TypeError, ValueError):
        return None  # a record this release did not write
    timeline = await read.timeline()
    cut = read.seq_of(timeline, last)
    if cut is None:
        return None  # the record no longer holds the view's last message
    seqs, entries, places = read.entries(timeline, cut)
    head: list[ChatMessage]
    covers_to = 0
    if version:
        checkpoint = await _made(read, version, timeline.head.checkpoint_version, data)
        if checkpoint is None:
            return None
        version, covers_to = checkpoint.version, checkpoint.covers_to
        head = read.head(checkpoint)
        raw = entries[bisect.bisect_right(seqs, covers_to) :]
    elif compaction:
        held = memory_head(key, compaction) if memory_head is not None else None
        if held is None:
            return None  # a summary of this process that it no longer holds
        head = view_form(held)
        raw = entries[len(entries) - (n - head_n) :] if n > head_n else []
    else:
        head = []
        raw = start_right(entries)  # as a view without a summary starts
    view = [*head, *raw]
    if len(view) != n or len(head) != head_n or not view or view[-1].id != last:
        return None
    served = serve(view, limit, window)
    if len(served) != int(data["served"]):
        return None
    shown = {m.id for m in served}
    omitted = _omitted(entries, places, shown)
    return ViewProvenance(
        str(data["reply"]),
        served,
        served_at,
        checkpoint_version=version,
        covers_to=covers_to,
        raw_to=cut,
        limit=limit,
        omitted=omitted,
    )


def _omitted(
    entries: list[ChatMessage], places: dict[str, int] | None, shown: set[str]
) -> list[ChatMessage]:
    """``[m for m in entries if m.id not in shown]``; with ``places`` (each id's index in a
    view ``entries`` begins, ids unique) by the slices between the shown messages: a view
    shows few of a long conversation's messages."""
    if places is None:
        return [m for m in entries if m.id not in shown]
    end = len(entries)
    found = (places.get(message_id) for message_id in shown)
    out: list[ChatMessage] = []
    start = 0
    for index in sorted(i for i in found if i is not None and i < end):
        out += entries[start:index]
        start = index + 1
    out += entries[start:]
    return out


async def _made(read: _Read, version: int, newest: int, data: Any) -> SummaryCheckpoint | None:
    """The checkpoint version the view started with: ``version`` when it is the one made at
    ``data["made"]``, else the newest version made then (a copy numbers versions its own
    way), else ``None``."""
    if read.checkpoints is None:
        return None
    made = data.get("made")
    if not isinstance(made, str) or not made:
        return None
    tried = [version, *(v for v in range(max(newest, version), 0, -1) if v != version)]
    for number in tried:
        found = await read.load(number)
        if found is not None and found.created_at.isoformat() == made:
            return found
    return None
