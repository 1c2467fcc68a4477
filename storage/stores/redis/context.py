"""What the Redis store's modules share: the client, the key layout, the TTL, the derived-
record report, and the user's session index (see :mod:`storage.stores.redis`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from storage.stores.redis import scripts
from storage.stores.redis.client import ScriptClient
from storage.stores.redis.layout import Layout, known_part

__all__ = ["RedisContext", "Unusable"]

Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it


class RedisContext:
    """One store's connection to its data.

    Attributes:
        redis: the script client.
        layout: the key names under the store's prefix.
        cluster: whether the server is a Redis Cluster (the index is then a second step).
        ttl: milliseconds after a session's last write at which its keys expire (0: never).
        unusable: reports a derived record that cannot be used (``BaseStore``'s).
    """

    def __init__(
        self, redis: ScriptClient, layout: Layout, *, cluster: bool, ttl: int, unusable: Unusable
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.cluster = cluster
        self.ttl = ttl
        self.unusable = unusable

    def index_keys(self, user_id: str) -> list[str]:
        """The index keys a session script updates itself: on a single server only."""
        return [] if self.cluster else list(self.layout.index(user_id))

    async def register(self, user_id: str, member: str, score: int) -> None:
        """Before a Cluster write that may create a session: list it if it is not (a crash
        after this leaves an entry for an empty session, never unlisted data)."""
        if self.cluster:
            await self.redis.eval(
                scripts.INDEX, self.layout.index(user_id), [member, 0, score, 1, self.ttl]
            )

    async def reindex(
        self, user_id: str, member: str, version: int, score: int, exists: bool
    ) -> None:
        """After a Cluster write: show the session's state of ``version`` unless the index
        shows a newer one already (so updates arriving in any order converge)."""
        if self.cluster and version:
            await self.redis.eval(
                scripts.INDEX,
                self.layout.index(user_id),
                [member, version, score, 1 if exists else 0, self.ttl],
            )

    async def members(self, user_id: str) -> list[str]:
        """The encoded session ids in the user's index (a member this store did not write is
        skipped and reported)."""
        client = await self.redis.ready()
        x, _ = self.layout.index(user_id)
        raw = cast(list[bytes], await client.zrange(x, 0, -1))
        members = []
        for m in raw:
            if known_part(m) is None:
                self.unusable("session index", f"user {user_id!r}", f"member {m!r}")
                continue
            members.append(m.decode("ascii"))
        return members
