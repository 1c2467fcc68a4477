"""Rewinds on Redis: the view's messages after the kept one move from the key's list to its
rewound list, in one script that first checks the epoch, the checkpoint version and the kept
message's place are as the store read them (:data:`~storage.stores.redis.scripts.REWIND`;
read again and retried when they changed). Messages appended since the read are hidden too,
as a rewind under a lock would: saves racing a rewind never make it fail.

The list stays exactly the view, so ``fetch``, windows and tails read it as before; the ids
set keeps every id (a rewound id saved again is a no-op). The first rewind under a prefix
raises its format version (:mod:`storage.stores.redis.client`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final

import attrs

from storage.abilities import Rewind
from storage.errors import ConflictError, CorruptRecordError
from storage.message import ChatKey
from storage.stores.base import not_in_view
from storage.stores.epochs import new_epoch
from storage.stores.payloads import decode_checkpoint, encode_checkpoint
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.reads import timeline

__all__ = ["rewind"]

_ATTEMPTS: Final = 8


async def rewind(ctx: RedisContext, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
    """Hide the view's messages after message ``to``; how many.

    Raises:
        InvalidArgumentError: ``to`` is not a message of the view (nothing changed).
        ConflictError: the key kept changing under the rewind (nothing changed).
    """
    names = ctx.layout.key(key)
    await ctx.redis.rewound_format()
    for _ in range(_ATTEMPTS):
        found, raw_checkpoint = await timeline(ctx, key)
        hidden = found.hidden_by()
        view = [
            (seq, m) for seq, m in zip(found.seqs, found.messages, strict=True) if seq not in hidden
        ]
        at = next((i for i, (_, m) in enumerate(view) if m.id == to), None)
        if at is None:
            raise not_in_view(key, to)
        if at == len(view) - 1:
            return 0
        head = found.head
        epoch = new_epoch()
        to_seq = view[at][0]
        data = Rewind(to, to_seq, view[-1][0], len(view) - at - 1, now, 0, rewind_id).to_json()
        for taken in ("seq", "through_seq", "hidden"):  # the script's: the list's at the time
            del data[taken]
        kept, version = "", head.checkpoint_version
        if raw_checkpoint:
            try:
                current = decode_checkpoint(raw_checkpoint)
            except CorruptRecordError:
                current = None  # unreadable: left as it is (load_checkpoint reports it)
            if current is not None and current.epoch == head.epoch and current.covers_to <= to_seq:
                version += 1
                kept = encode_checkpoint(attrs.evolve(current, epoch=epoch, version=version))
        reply = await ctx.redis.eval(
            scripts.REWIND,
            names.of(scripts.REWIND_KEYS),
            [
                at,
                to_seq,
                head.epoch,
                head.checkpoint_version,
                epoch,
                json.dumps(data, separators=(",", ":")),
                kept,
                version,
                ctx.ttl,
                names.base,
            ],
        )
        if reply[0] == 0:
            return int(reply[2])
    raise ConflictError(f"rewind: {key} kept changing while it was rewound; nothing changed")
