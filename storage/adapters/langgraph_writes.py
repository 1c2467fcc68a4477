"""What a LangGraph thread's checkpoints carry of the conversation, kept in the stack.

A step that has not finished (an ``interrupt()``, a failing node, a crash) leaves its tasks'
writes with the checkpoint as *pending writes*, and a persistent ``inner`` saver keeps them to
resume the run. Those writes carry conversation data: whole messages on the messages channel
(a model's answer, a tool's result), the tool calls ``create_agent`` dispatches with ``Send``
(their arguments), interrupt and resume values; a checkpoint's ``__start__`` (the input) and
``__pregel_tasks`` (pending ``Send``) channels carry the same. None of it reaches ``inner`` as
it is: the checkpointer stores it as one :class:`~storage.abilities.ConversationRecord` of
kind ``"langgraph.writes"`` per ``aput_writes`` (or ``aput``) call in the stack, scrubbed and
encrypted by its layers and erased with the conversation, and gives ``inner`` a small
reference per value, ``{"chatlayers.langgraph.write": <record id>, "slot": <write index or
channel>}``. Reads put the values back as the stack returns them (scrubbed text under a
scrubbing layer, as the channel's messages read back).

A value is packed as JSON data the layers can transform: LangChain messages (with the record
codec, :mod:`storage.codec`), ``RemoveMessage``, ``Overwrite``, ``Send`` (without a timeout),
``Interrupt``, lists, tuples, dicts with string keys, strings and JSON scalars, in any nesting.
A value holding anything else, or holding no message and no text, stays in ``inner`` as it is,
and so do the other channels (a graph's own state fields).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from storage.abilities import ConversationRecord, RecordStorage
from storage.codec import decode, encode
from storage.errors import ChatStorageError
from storage.message import ChatKey, thaw, with_created_at

try:
    from langchain_core.messages import BaseMessage, RemoveMessage
    from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
    from langgraph.types import Interrupt, Overwrite, Send

    from storage.adapters.langchain import from_chat_message, to_chat_message
except ImportError as exc:  # pragma: no cover - the langgraph module reports it
    from storage.adapters import missing_extra

    raise missing_extra("langgraph", "langgraph", exc) from exc

__all__ = ["REF", "WRITES_KIND", "Carried"]

WRITES_KIND: Final = "langgraph.writes"
REF: Final = "chatlayers.langgraph.write"
# LangGraph's channel names (stable: they are in every saved checkpoint).
START: Final = "__start__"
TASKS: Final = "__pregel_tasks"
INTERRUPT: Final = "__interrupt__"
RESUME: Final = "__resume__"
VALUE_CHANNELS: Final = (START, TASKS)

# A pending write's messages get their time when the channel is saved; a fixed one here keeps
# the packed value (and so the record id) the same on a retried call.
_NO_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)

log = logging.getLogger(__name__)


class _Unpackable(Exception):
    """A value that is not messages and JSON data."""


def _pack(value: Any, found: list[bool]) -> Any:
    """``value`` as JSON data; ``found[0]`` set when it holds a message or a text."""
    if isinstance(value, RemoveMessage):
        return {"remove": value.id}
    if isinstance(value, BaseMessage):
        found[0] = True
        message = to_chat_message(value)
        if message.created_at is None:
            message = with_created_at(message, _NO_TIME)
        return {"message": json.loads(encode(message))}
    if isinstance(value, Overwrite):
        return {"overwrite": _pack(value.value, found)}
    if isinstance(value, Send) and value.timeout is None:
        return {"send": {"node": value.node, "arg": _pack(value.arg, found)}}
    if isinstance(value, Interrupt) and value.response_schema is None:
        return {"interrupt": {"id": value.id, "value": _pack(value.value, found)}}
    if isinstance(value, str):
        found[0] = True
        return {"text": value}
    if value is None or isinstance(value, bool | int | float):
        return {"json": value}
    if isinstance(value, list):
        return {"list": [_pack(v, found) for v in value]}
    if isinstance(value, tuple):
        return {"tuple": [_pack(v, found) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _pack(v, found) for k, v in value.items()}}
    raise _Unpackable


def _unpack(data: Any) -> Any:
    """The value :func:`_pack` packed (messages as the stack returned them)."""
    if not isinstance(data, Mapping) or len(data) != 1:
        raise ValueError(f"not a packed value: {data!r:.80}")
    ((tag, inner),) = data.items()
    if tag == "message":
        return from_chat_message(decode(json.dumps(thaw(inner))))
    if tag == "remove":
        return RemoveMessage(id=inner)
    if tag == "overwrite":
        return Overwrite(_unpack(inner))
    if tag == "send":
        return Send(inner["node"], _unpack(inner["arg"]))
    if tag == "interrupt":
        return Interrupt(_unpack(inner["value"]), inner["id"])
    if tag in ("text", "json"):
        return thaw(inner)
    if tag == "list":
        return [_unpack(v) for v in inner]
    if tag == "tuple":
        return tuple(_unpack(v) for v in inner)
    if tag == "dict":
        return {k: _unpack(v) for k, v in inner.items()}
    raise ValueError(f"unknown packed value {tag!r}")


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a reference the checkpointer gave ``inner``."""
    return isinstance(value, dict) and len(value) == 2 and isinstance(value.get(REF), str)


class Carried:
    """Moves the conversation data of a thread's checkpoints to the stack's records and
    back (see the module).

    Args:
        records: the stack's records (``None``: nothing moves).
        channel: the messages channel.
    """

    def __init__(self, records: RecordStorage | None, channel: str) -> None:
        self.records = records
        self.write_channels = frozenset({channel, START, TASKS, INTERRUPT, RESUME})

    async def _move(
        self, key: ChatKey, where: Sequence[str], values: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store the packable ``values`` (slot → value) as one record; return the
        reference of each slot stored. Its id derives from ``key``, ``where`` (namespace,
        checkpoint id, task) and the packed values, so a retried call stores nothing new.

        Raises:
            InvalidMessageError: a message cannot be converted.
        """
        if self.records is None:
            return {}
        packed: dict[str, Any] = {}
        for slot, value in values.items():
            found = [False]
            try:
                data = _pack(value, found)
            except _Unpackable:
                continue
            if found[0]:
                packed[slot] = data
        if not packed:
            return {}
        text = json.dumps(
            [key.user_id, key.session_id, key.agent_id, list(where), packed], sort_keys=True
        )
        record_id = hashlib.sha256(text.encode()).hexdigest()[:32]
        await self.records.save_record(
            key, ConversationRecord(WRITES_KIND, {"values": packed}, id=record_id)
        )
        return {slot: {REF: record_id, "slot": slot} for slot in packed}

    async def put_writes(
        self, key: ChatKey, where: Sequence[str], writes: Sequence[tuple[str, Any]]
    ) -> list[tuple[str, Any]]:
        """``writes`` with a reference in place of each value moved to the stack."""
        moving = {str(n): v for n, (c, v) in enumerate(writes) if c in self.write_channels}
        refs = await self._move(key, where, moving) if moving else {}
        return [(c, refs.get(str(n), v)) for n, (c, v) in enumerate(writes)]

    async def put_values(
        self, key: ChatKey, where: Sequence[str], values: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A checkpoint's channel values with a reference in place of its ``__start__`` and
        ``__pregel_tasks`` values when they moved to the stack."""
        moving = {c: values[c] for c in VALUE_CHANNELS if values.get(c) is not None}
        refs = await self._move(key, where, moving) if moving else {}
        return {**values, **refs} if refs else dict(values)

    async def read(
        self,
        key: ChatKey,
        tup: CheckpointTuple,
        cache: dict[ChatKey, dict[str, ConversationRecord]] | None = None,
    ) -> CheckpointTuple:
        """``tup`` with every reference in its channel values and pending writes replaced by
        the value read back from the stack; a value whose record is gone (erased) or cannot
        be read is left out, with a warning. ``cache`` keeps each thread's records across
        calls (one read for a whole ``alist``)."""
        values = tup.checkpoint["channel_values"]
        pending = tup.pending_writes or []
        if self.records is None or not (
            any(is_ref(v) for v in values.values()) or any(is_ref(v) for _, _, v in pending)
        ):
            return tup
        wanted = {v[REF] for v in values.values() if is_ref(v)}
        wanted.update(v[REF] for _, _, v in pending if is_ref(v))
        by_id = None if cache is None else cache.get(key)
        if by_id is None or not wanted <= by_id.keys():  # none cached, or stored since
            found = await self.records.fetch_records(key, kind=WRITES_KIND)
            by_id = {r.id: r for r in found}
            if cache is not None:
                cache[key] = by_id
        missing = object()

        def back(ref: dict[str, Any]) -> Any:
            record = by_id.get(ref[REF])
            try:
                if record is None:
                    raise LookupError("no such record")
                return _unpack(record.data["values"][str(ref["slot"])])
            except (LookupError, ValueError, TypeError, ChatStorageError) as exc:
                log.warning(
                    "a value of thread %r left out: its record %s cannot be read (%s)",
                    key.session_id,
                    ref[REF],
                    exc,
                )
                return missing

        restored: dict[str, Any] = {}
        for channel, value in values.items():
            got = back(value) if is_ref(value) else value
            if got is not missing:
                restored[channel] = got
        writes: list[tuple[str, str, Any]] = []
        for task_id, channel, value in pending:
            got = back(value) if is_ref(value) else value
            if got is not missing:
                writes.append((task_id, channel, got))
        checkpoint: Checkpoint = {**tup.checkpoint, "channel_values": restored}
        return tup._replace(checkpoint=checkpoint, pending_writes=writes)
