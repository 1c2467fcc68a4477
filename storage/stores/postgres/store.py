"""``PostgresChatStorage``: the core and every ability mixin, put together."""

from __future__ import annotations

from storage.stores.postgres.checkpoints import CheckpointMixin
from storage.stores.postgres.derived import DerivedMixin
from storage.stores.postgres.erasure import ErasureMixin
from storage.stores.postgres.records import RecordsMixin
from storage.stores.postgres.replace import ReplaceMixin
from storage.stores.postgres.retention import RetentionMixin
from storage.stores.postgres.search import SearchMixin
from storage.stores.postgres.sequenced import SequencedMixin
from storage.stores.postgres.sessions import SessionsMixin

__all__ = ["PostgresChatStorage"]


class PostgresChatStorage(
    ReplaceMixin,  # before SequencedMixin, which it builds on
    SequencedMixin,
    CheckpointMixin,
    SessionsMixin,
    SearchMixin,
    RecordsMixin,
    RetentionMixin,
    ErasureMixin,
    DerivedMixin,
):
    """Conversations in PostgreSQL (asyncpg pool); every optional ability of
    ``storage.abilities``. Arguments: see :class:`~storage.stores.postgres.core.PostgresCore`
    and the package docstring for the schema, ordering and erasure guarantees.

    Nothing connects in the constructor: the pool is created, and the schema created or
    migrated, on first use; ``await store.open()`` does it up front. ``async with store:``
    closes the pool on exit.
    """
