"""``redis://HOST:PORT/DB?prefix=P``: conversations in Redis, on one server or a Cluster.

Modules, one concept each: :mod:`.store` (the class: options and hooks), :mod:`.layout` (key
names and the layout table), :mod:`.scripts` (the Lua scripts, one per atomic operation, over
:mod:`.lua`'s helpers), :mod:`.client` (redis-py, loaded lazily), :mod:`.context` (what the
modules share, and the user's session index), :mod:`.writes`, :mod:`.reads`,
:mod:`.checkpoints` (checkpoints and leases), :mod:`.sessions` (session pages),
:mod:`.search` and :mod:`.records`; checkpoint and record JSON is
:mod:`storage.stores.payloads`'s.

**Atomicity and order.** Every write to a session is one Lua script, and every key of a
session shares the hash tag ``{U:S}`` (one Cluster slot): a batch is stored whole or not at
all, contiguous in its key's list, and numbered from the session's counter inside the same
script, so a key's sequence order is its commit order (a reader tailing by sequence never
misses a message committed later with a smaller number). ``fetch`` is one script (an
``LRANGE`` whose entries come back joined in one string); ``head`` one ``HMGET``;
``fetch_since`` one script; ``replace`` one script that compares the key's version first
when given one (compare-and-replace).

**The user's session index** (``P:{U}:x``, a sorted set by last activity) lives in another
slot. On a single server the session scripts update it themselves. On a Cluster a write
registers the session first (so a session holding data is always listed, and
``delete_user``, which reads the index instead of ``KEYS``/``SCAN``, always finds it), then
runs its script, then shows the session's new state in the index; each state carries a
version (the server's clock in µs, kept increasing), and the index takes only newer ones,
so concurrent writers and deleters converge on the newest state. A crash between the steps
can leave an entry for an empty session (skipped by ``list_sessions``) or a session ordered
by its previous activity until its next write, never unlisted data. Costs: a save is one
round trip on a single server and three on a Cluster (register, script, index), and a
Cluster write needs the node of the user's index up as well as the session's.

**Erasure.** ``delete`` removes every key of the conversation (messages, ids, head,
checkpoint, records, lease) and its index entry when the session is empty; ``delete_user``
does so for every session in the user's index. Afterwards no key on the server holds the
erased text. Redis's *files* may still: an RDB snapshot taken before the erasure and the
append-only file until it is rewritten. After an erasure that must reach the disk, run
``BGREWRITEAOF`` (and let the next ``BGSAVE`` replace the old snapshot), and expire old
backups and replicas' files the same way; chatlayers cannot do that for you, since it is a
server-wide operation.

**Search** scans the user's own sessions (found in the index, one atomic read per session,
pipelined on a single server) with :func:`storage.search.scan_search`: its cost grows with
the user's messages, never with other users'.

**Retention.** Redis has no ``retention`` period: its ``ttl`` option expires every key of a
session ``ttl`` after the session's last write, and :meth:`RedisChatStorage.purge` returns 0.

**Durability** is the server's: with ``appendonly yes`` (``appendfsync everysec``) a killed
``redis-server`` loses no acknowledged save; ``appendfsync always`` survives power loss too.
"""

from __future__ import annotations

from storage.stores.redis.store import RedisChatStorage

__all__ = ["RedisChatStorage"]
