"""``verify(source, target)``: compare two stacks conversation by conversation.

Both are read through their record parts (:func:`~storage.migrate.sides.record_side`): the
keys, then per key the messages (ids, order, every field), the summary checkpoint
(summarizer, time, the message it covers by id, since sequence numbers are each store's own,
and its summary messages), the rewinds and every checkpoint version (by the same marks:
:meth:`~storage.migrate.sides.Snapshot.rewind_marks`, ``version_marks``) and the records
(ids, order, kind, data, time, and place among the messages). The walk stops at the first
difference and names it. With ``views``, it also fetches each conversation through both
whole stacks (a ``summarize::`` layer serves checkpoint + tail) and compares what the model
would see, and the view each reply with a provenance record answered. Verifying writes
nothing: for the run, every summarizing layer of both stacks is ``serve_only`` (the stored
summaries served as they are, none made, whatever budget the stacks name), so a second run
finds what the first did.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from storage.abilities import ConversationRecord, SummaryCheckpoint, TimeTravelStorage, find_ability
from storage.config.stack import components
from storage.layers.summarizing.provenance import KIND as PROVENANCE
from storage.message import ChatKey, ChatMessage
from storage.migrate.sides import Side, Snapshot, key_order, read_snapshot, record_side
from storage.protocol import ChatStorage

__all__ = ["Difference", "VerifyReport", "compare_messages", "verify"]

_FIELDS = (
    "id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "created_at",
    "metadata",
    "extra",
)
_RECORD_FIELDS = ("id", "kind", "data", "created_at")


@attrs.frozen
class Difference:
    """The first difference found: ``key`` and ``what`` differs (one sentence)."""

    key: ChatKey
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


@attrs.define
class VerifyReport:
    """What a comparison read, and the first difference (``None``: equal).

    Attributes:
        keys, messages, checkpoints, records: compared (of the source).
        views: conversations whose model views were compared (``views=True``).
        summarized_views: of those, views that began with a stored summary (the same in
            both, or they would differ).
        difference: the first difference, or ``None``.
        seconds: wall time of the run.
    """

    keys: int = 0
    messages: int = 0
    checkpoints: int = 0
    records: int = 0
    views: int = 0
    summarized_views: int = 0
    difference: Difference | None = None
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return self.difference is None

    def as_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, filter=lambda a, _: a.name != "difference")
        out["equal"] = self.equal
        if self.difference is not None:
            key = self.difference.key
            out["difference"] = {
                "user_id": key.user_id,
                "session_id": key.session_id,
                "agent_id": key.agent_id,
                "what": self.difference.what,
            }
        return out


def compare_messages(
    ours: Sequence[ChatMessage], theirs: Sequence[ChatMessage], what: str = "message"
) -> str | None:
    """The first difference between two message lists (``None``: equal): a count, an id
    or a field, named with the position and the id."""
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a.id != b.id:
            return f"{what} {index}: id {a.id!r} in the source, {b.id!r} in the target"
        for name in _FIELDS[1:]:
            if getattr(a, name) != getattr(b, name):
                return f"{what} {index} (id {a.id!r}): {name} differs"
    if len(ours) != len(theirs):
        extra = ours[len(theirs)] if len(ours) > len(theirs) else theirs[len(ours)]
        where = "source" if len(ours) > len(theirs) else "target"
        return (
            f"{len(ours)} {what}s in the source, {len(theirs)} in the target "
            f"(first only in the {where}: {what} {min(len(ours), len(theirs))}, "
            f"id {extra.id!r})"
        )
    return None


def _compare_records(
    ours: Sequence[ConversationRecord], theirs: Sequence[ConversationRecord]
) -> str | None:
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        for name in _RECORD_FIELDS:
            if getattr(a, name) != getattr(b, name):
                return f"record {index} (id {a.id!r}): {name} differs"
    if len(ours) != len(theirs):
        return f"{len(ours)} records in the source, {len(theirs)} in the target"
    return None


def _compare_checkpoints(src: Snapshot, tgt: Snapshot) -> str | None:
    a: SummaryCheckpoint | None = src.checkpoint
    b: SummaryCheckpoint | None = tgt.checkpoint
    if a is None and b is None:
        return None
    if a is None or b is None:
        return f"a summary checkpoint only in the {'source' if b is None else 'target'}"
    if src.covered_id() != tgt.covered_id():
        return (
            f"the summary covers up to message {src.covered_id()!r} in the source, "
            f"{tgt.covered_id()!r} in the target"
        )
    if a.summarizer != b.summarizer:
        return f"summary made by {a.summarizer!r} in the source, {b.summarizer!r} in the target"
    if a.created_at != b.created_at:
        return "the summary checkpoints were made at different times"
    return compare_messages(a.messages, b.messages, "summary message")


def _compare_rewinds(src: Snapshot, tgt: Snapshot) -> str | None:
    """Rewinds, by what they name: the message, how many they hid, where they were made
    (checkpoint versions: by summarizer, time, covered message and summary ids)."""
    ours, theirs = src.rewind_marks(), tgt.rewind_marks()
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return (
                f"rewind {index}: to {a[0]!r} hiding {a[1]} after message {a[2]} in the "
                f"source, to {b[0]!r} hiding {b[1]} after message {b[2]} in the target"
            )
    if len(ours) != len(theirs):
        return f"{len(ours)} rewinds in the source, {len(theirs)} in the target"
    return None


def _compare_versions(src: Snapshot, tgt: Snapshot) -> str | None:
    versions, others = src.version_marks(), tgt.version_marks()
    for index, (c, d) in enumerate(zip(versions, others, strict=False)):
        if c != d:
            return f"checkpoint version {index + 1} of the source differs in the target"
    if len(versions) != len(others):
        return f"{len(versions)} checkpoint versions in the source, {len(others)} in the target"
    return None


def compare_snapshots(src: Snapshot, tgt: Snapshot, *, history: bool = True) -> str | None:
    """The first difference between one conversation's two snapshots (``None``: equal);
    ``history``: rewinds and checkpoint versions too (both sides have time travel)."""
    return (
        compare_messages(src.messages, tgt.messages)
        or (_compare_rewinds(src, tgt) if history else None)
        or _compare_checkpoints(src, tgt)
        or (_compare_versions(src, tgt) if history else None)
        or _compare_records(src.records, tgt.records)
        or _compare_places(src, tgt)
    )


def _compare_places(src: Snapshot, tgt: Snapshot) -> str | None:
    """Where the records stand among the messages (records and messages being equal)."""
    ours, theirs = src.record_places(), tgt.record_places()
    if ours is None or theirs is None:
        return None
    for index, ((record_id, a), (_, b)) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            return (
                f"record {index} (id {record_id!r}) comes after {a} messages in the source, "
                f"{b} in the target"
            )
    return None


async def _compare_provenance(
    source: ChatStorage, target: ChatStorage, key: ChatKey, src: Snapshot
) -> str | None:
    """The view each reply answered, rebuilt by both whole stacks (replies with a
    provenance record)."""
    ours = find_ability(source, TimeTravelStorage)
    theirs = find_ability(target, TimeTravelStorage)
    if ours is None or theirs is None:
        return None
    with _reading_once(source, target):
        for record in src.records:
            if record.kind != PROVENANCE or not isinstance(record.data.get("reply"), str):
                continue
            reply = record.data["reply"]
            a, b = await ours.provenance(key, reply), await theirs.provenance(key, reply)
            if (a is None) != (b is None):
                where = "source" if b is None else "target"
                return f"the view reply {reply!r} answered is known only in the {where}"
            if a is not None and b is not None:
                what = compare_messages(
                    a.messages, b.messages, f"message of the view {reply!r} answered"
                )
                if what is not None:
                    return what
    return None


def _reading_once(*stacks: object) -> contextlib.ExitStack:
    """Every summarizing layer of ``stacks`` rebuilds the key's replies from one read of the
    key (``reading_provenance``) until the block ends: read once per reply, the key's
    records and timeline made verifying a conversation quadratic in its length."""
    from storage.layers.summarizing import SummarizingChatStorage

    exits = contextlib.ExitStack()
    for stack in stacks:
        for component in components(stack):
            if isinstance(component, SummarizingChatStorage):
                exits.enter_context(component.reading_provenance())
    return exits


async def _compare_key(
    source: ChatStorage,
    target: ChatStorage,
    src: Side,
    tgt: Side,
    key: ChatKey,
    report: VerifyReport,
    views: bool,
) -> Difference | None:
    a = await read_snapshot(src, key)
    b = await read_snapshot(tgt, key)
    report.keys += 1
    report.messages += len(a.messages)
    report.checkpoints += a.checkpoint is not None
    report.records += len(a.records)
    if b.empty and not a.empty:
        return Difference(key, "not in the target")
    what = compare_snapshots(a, b, history=src.travel is not None and tgt.travel is not None)
    if what is None and views:
        report.views += 1
        ours = await source.fetch(key)
        what = compare_messages(ours, await target.fetch(key), "view message")
        what = what or await _compare_provenance(source, target, key, a)
        report.summarized_views += what is None and bool(ours) and ours[0].is_summary
    return None if what is None else Difference(key, what)


@contextlib.contextmanager
def _serving_only(*stacks: object) -> Iterator[None]:
    """Every summarizing layer of ``stacks`` makes no summary (writes no checkpoint) while
    the block runs; each is set back as it was."""
    from storage.layers.summarizing import SummarizingChatStorage

    layers = [
        c for stack in stacks for c in components(stack) if isinstance(c, SummarizingChatStorage)
    ]
    was = [layer.serve_only for layer in layers]
    for layer in layers:
        layer.serve_only = True
    try:
        yield
    finally:
        for layer, before in zip(layers, was, strict=True):
            layer.serve_only = before


async def verify(
    source: ChatStorage,
    target: ChatStorage,
    *,
    views: bool = False,
    on_key: Callable[[], None] | None = None,
    on_keys: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Compare ``source`` and ``target`` key by key (see the module); stop at the first
    difference. Writes nothing to either: their summarizing layers are ``serve_only`` for
    the run.

    Raises:
        ConfigError: a side cannot list its conversations.
        ChatStorageError: from either store.
    """
    started = time.perf_counter()
    src, tgt = record_side(source), record_side(target)
    report = VerifyReport()
    ours, theirs = await src.keys(), await tgt.keys()
    if on_keys is not None:
        on_keys(len(ours))
    listed = set(ours)
    with _serving_only(source, target):
        for key in sorted(listed | set(theirs), key=key_order):
            if key not in listed:
                report.difference = Difference(key, "only in the target")
                break
            report.difference = await _compare_key(source, target, src, tgt, key, report, views)
            if on_key is not None:
                on_key()
            if report.difference is not None:
                break
    report.seconds = time.perf_counter() - started
    return report
