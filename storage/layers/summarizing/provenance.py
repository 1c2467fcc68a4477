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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    RecordStorage,
    SummaryCheckpoint,
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

    __slots__ = ("cap", "checkpoints", "noted", "records", "travel")

    def __init__(self, inner: object, cap: int) -> None:
        self.records: RecordStorage | None = find_ability(inner, RecordStorage)
        self.travel: TimeTravelStorage | None = find_ability(inner, TimeTravelStorage)
        self.checkpoints: CheckpointStorage | None = find_ability(inner, CheckpointStorage)
        self.cap = cap
        self.noted: dict[ChatKey, Noted] = {}

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
        """Drop what was noted: the key's, the user's, or everything."""
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
        try:
            await records.save_record(key, ConversationRecord(KIND, data, id=record_id(reply.id)))
        except ChatStorageError:
            log.warning("the provenance of reply %r of %r was not recorded", reply.id, key)

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
        wanted = record_id(message_id)
        found = [r for r in await records.fetch_records(key, kind=KIND) if r.id == wanted]
        if not found:
            return None
        return await _rebuild(key, found[-1].data, travel, self.checkpoints, memory_head)


async def _rebuild(
    key: ChatKey,
    data: Any,
    travel: TimeTravelStorage,
    checkpoints: CheckpointStorage | None,
    memory_head: MemoryHead | None,
) -> ViewProvenance | None:
    try:
        last, n, head_n = str(data["last"]), int(data["n"]), int(data["head"])
        version, compaction = int(data["version"]), int(data["compaction"])
        limit, window = data["limit"], data["window"]
        served_at = datetime.fromisoformat(data["at"])
    except (KeyError, TypeError, ValueError):
        return None  # a record this release did not write
    timeline = await travel.fetch_timeline(key)
    cut = timeline.seq_of(last)
    if cut is None:
        return None  # the record no longer holds the view's last message
    entries = timeline.entries(cut)
    head: list[ChatMessage]
    covers_to = 0
    if version:
        checkpoint = await _made(checkpoints, key, version, timeline.head.checkpoint_version, data)
        if checkpoint is None:
            return None
        version, covers_to = checkpoint.version, checkpoint.covers_to
        head = view_form(checkpoint.messages)
        raw = [m for seq, m in entries if seq > covers_to]
    elif compaction:
        held = memory_head(key, compaction) if memory_head is not None else None
        if held is None:
            return None  # a summary of this process that it no longer holds
        head = view_form(held)
        raw = [m for _, m in entries][len(entries) - (n - head_n) :] if n > head_n else []
    else:
        head = []
        raw = start_right([m for _, m in entries])  # as a view without a summary starts
    view = [*head, *raw]
    if len(view) != n or len(head) != head_n or not view or view[-1].id != last:
        return None
    served = serve(view, limit, window)
    if len(served) != int(data["served"]):
        return None
    shown = {m.id for m in served}
    omitted = [m for _, m in entries if m.id not in shown]
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


async def _made(
    checkpoints: CheckpointStorage | None, key: ChatKey, version: int, newest: int, data: Any
) -> SummaryCheckpoint | None:
    """The checkpoint version the view started with: ``version`` when it is the one made at
    ``data["made"]``, else the newest version made then (a copy numbers versions its own
    way), else ``None``."""
    if checkpoints is None:
        return None
    made = data.get("made")
    if not isinstance(made, str) or not made:
        return None
    load: Callable[..., Awaitable[SummaryCheckpoint | None]] = checkpoints.load_checkpoint
    tried = [version, *(v for v in range(max(newest, version), 0, -1) if v != version)]
    for number in tried:
        found = await load(key, version=number)
        if found is not None and found.created_at.isoformat() == made:
            return found
    return None
