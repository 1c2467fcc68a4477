"""Application records on Redis: a hash per key (id → ``"SEQ JSON"``), numbered from the
session's counter (the one messages use, so records interleave with them)."""

from __future__ import annotations

from typing import cast

import attrs

from storage.abilities import ConversationRecord
from storage.message import ChatKey
from storage.stores.payloads import REDIS_RECORD, decode_record, encode_record
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import entry

__all__ = ["fetch", "save"]


async def save(ctx: RedisContext, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
    """Store ``record`` (``created_at`` set) in one script; the stored one when its id is
    stored already."""
    names = ctx.layout.key(key)
    keys = [*names.of(scripts.SAVE_RECORD_KEYS), *ctx.index_keys(key.user_id)]
    await ctx.register(key.user_id, names.member, 0)
    payload = encode_record(record, REDIS_RECORD)
    reply = await ctx.redis.eval(
        scripts.SAVE_RECORD,
        keys,
        [record.id, payload, names.agent, names.member, ctx.ttl, names.base],
    )
    if reply[0] == 1:
        seq, raw = entry(reply[1])
        return decode_record(raw, seq)
    _, seq, version, score = reply
    await ctx.reindex(key.user_id, names.member, int(version), int(score), True)
    return attrs.evolve(record, seq=int(seq))


async def fetch(ctx: RedisContext, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
    """The key's records in sequence order, of ``kind`` or all."""
    names = ctx.layout.key(key)
    client = await ctx.redis.ready()
    raw = cast(dict[bytes, bytes], await client.hgetall(names.records))
    records = []
    for value in raw.values():
        seq, payload = entry(value)
        records.append(decode_record(payload, seq))
    records.sort(key=lambda r: r.seq)
    return [r for r in records if kind is None or r.kind == kind]
