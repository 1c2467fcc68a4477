"""The ``mirror`` layer: write to two stores while moving from one to the other.

``mirror?secondary=URL::sqlite:///chats.db`` (TOML: ``[[layers]] type = "mirror"``,
``secondary = "postgresql://..."``) sends every write to the inner (primary) stack first,
then the same write, as the primary stored it, to the secondary; every read goes to the
primary. A cut-over: mirror (new writes reach both), ``chatlayers migrate`` (the history
before), ``chatlayers verify`` (the same, key by key), then make the secondary the primary.

A secondary failure (down, slow beyond ``timeout``, refusing) never fails the caller: the
write is marked as missed, durably (:mod:`storage.migrate.journal`; by default in the
primary's base store, shared by every worker and kept across restarts), logged once per
conversation and counted (``secondary_failures``, ``skipped``, ``missed``, ``repairs``).
The next write to that conversation repairs it (the secondary's copy is made the primary's:
messages, checkpoint, records), and so do ``chatlayers migrate --from PRIMARY --to
SECONDARY`` and :meth:`MirrorChatStorage.repair`. After a failure the secondary rests for
``retry_after`` seconds (writes meanwhile are only marked), so an unreachable one does not
slow every call by its timeout.

In a URL chain, percent-encode a secondary URL that holds ``&``, ``+``, ``%``, ``#`` or
``::`` (``urllib.parse.quote(url, safe="")``), or give it as ``secondary_env=VARIABLE``.
"""

from __future__ import annotations

from storage.layers.mirroring.layer import MirrorChatStorage

__all__ = ["MirrorChatStorage"]
