"""What the data store remembers of its keyring, so an older or another keyring is refused.

The encrypting layer writes two kinds of records into the data store (plain: they hold no
secret, only keyring ids and numbers), under a reserved key no user can have (user id
``"\\x1fchatlayers"``, which the layer refuses for data):

- ``(…, keyring, ids)``: one record per keyring that wrote to this store (its id);
- ``(…, keyring, g<n>)``: one record per keyring generation the data depends on, in shards
  of 256 generations (``g0`` holds 0-255, ``g1`` 256-511, ...), so a check reads one or two
  shards whatever the store's age.

Every new data key and every erasure raises the keyring's generation and records it here
before anything is sealed under the new key (or after the key is destroyed). A keyring whose
generation is below the newest record is older than the data (restored from a backup): the
users created since would read as lost and be given new keys, and users erased since would
come back. A keyring whose id is not among the ids is another keyring. Both are refused
(:class:`~.errors.KeyringMismatchError`) until the right keyring is back, or an operator
accepts this one (``chatlayers keys accept``).

Records are kept by the store's retention (only messages are purged) and are never listed as
conversations. A store without records (``RecordStorage``) gets no such check; reads and saves
still tell a lost data key from an erased one, user by user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from storage.abilities import ConversationRecord, RecordStorage, find_ability
from storage.errors import CorruptRecordError
from storage.layers.encrypting.errors import KeyringMismatchError
from storage.layers.encrypting.keyring_base import KeyringState
from storage.message import ChatKey

__all__ = ["RESERVED_USER", "Ledger"]

#: The user id of the ledger's records (refused as a user id by the encrypting layer).
RESERVED_USER: Final = "\x1fchatlayers"
_SESSION: Final = "keyring"
_IDS: Final = ChatKey(RESERVED_USER, _SESSION, "ids")
_SHARD: Final = 256
_ID_KIND: Final = "chatlayers.keyring"
_MARK_KIND: Final = "chatlayers.keyring-generation"


def _shard(generation: int) -> ChatKey:
    return ChatKey(RESERVED_USER, _SESSION, f"g{generation // _SHARD}")


class Ledger:
    """The keyring's records in one data store.

    Args:
        store: the store below the encrypting layer.
        keyring_location: the keyring's location, for messages.
    """

    def __init__(self, store: Any, keyring_location: str) -> None:
        self._store: RecordStorage | None = find_ability(store, RecordStorage)
        self._location = keyring_location
        self._registered: str | None = None

    @property
    def available(self) -> bool:
        """Whether the store keeps records (else nothing is recorded or checked)."""
        return self._store is not None

    async def keyring_ids(self) -> set[str]:
        """The ids of every keyring that wrote to this store."""
        if self._store is None:
            return set()
        return {str(r.data.get("keyring")) for r in await self._store.fetch_records(_IDS)}

    async def newest(self, since: int, *, first_above: bool = False) -> tuple[int, str] | None:
        """The highest generation recorded from the shard of ``since`` on, with its keyring
        id (``None``: none recorded there); with ``first_above``, the first shard's best
        once it is above ``since`` (enough to refuse, without reading every later shard)."""
        if self._store is None:
            return None
        best: tuple[int, str] | None = None
        shard = since // _SHARD
        while True:
            records = await self._store.fetch_records(_shard(shard * _SHARD), kind=_MARK_KIND)
            for record in records:
                try:
                    mark = (int(record.data["generation"]), str(record.data["keyring"]))
                except (KeyError, TypeError, ValueError):
                    raise CorruptRecordError(
                        f"encrypt: keyring record {record.id!r} of the data store is malformed"
                    ) from None
                if best is None or mark > best:
                    best = mark
            if (not records and shard > since // _SHARD) or (
                first_above and best is not None and best[0] > since
            ):
                return best
            shard += 1

    async def check(
        self, state: KeyringState, again: Callable[[], Awaitable[KeyringState]]
    ) -> None:
        """Refuse a keyring the data was not last written with. ``again`` reads the
        keyring's state anew: a newer record may have been written meanwhile by a live
        keyring's users (a record is written only once the keyring has that generation, so
        the keyring read after the records is never behind them unless it is older).

        Raises:
            KeyringMismatchError: another keyring wrote here and this one never did, or the
                data records a newer generation than the keyring has (an older copy).
        """
        ids = await self.keyring_ids()
        if ids and state.keyring_id not in ids:
            raise KeyringMismatchError(
                f"encrypt: the keyring {self._location} (id {state.keyring_id}) is not the one "
                f"this data store was written with (id {', '.join(sorted(ids))}): its data "
                "keys are elsewhere. Mount or restore that keyring; if it is lost for good, "
                "`chatlayers keys accept --url '<stack URL>'` makes this one the store's "
                "keyring (what was sealed with the lost one stays unreadable)"
            )
        newest = await self.newest(state.generation, first_above=True)
        if newest is not None and newest[0] > state.generation:
            state = await again()
        if newest is not None and newest[0] > state.generation:
            raise KeyringMismatchError(
                f"encrypt: the keyring {self._location} is older than the data: it is at "
                f"generation {state.generation}, and the data store recorded generation "
                f"{newest[0]} (a keyring restored from an older backup?). Users created "
                "since would read as lost and users erased since would come back. Mount or "
                "restore the newest copy of the keyring; if none exists, `chatlayers keys "
                "accept --url '<stack URL>'` accepts this copy (data keys created after it "
                "was backed up are lost, with their users' messages)"
            )

    async def record(self, state: KeyringState) -> None:
        """Record ``state``'s keyring id (once) and generation in the store."""
        if self._store is None:
            return
        if self._registered != state.keyring_id:
            await self._store.save_record(
                _IDS,
                ConversationRecord(
                    _ID_KIND, {"keyring": state.keyring_id}, id=f"keyring-{state.keyring_id}"
                ),
            )
            self._registered = state.keyring_id
        mark = {"keyring": state.keyring_id, "generation": state.generation}
        await self._store.save_record(
            _shard(state.generation),
            ConversationRecord(_MARK_KIND, mark, id=f"g{state.generation}-{state.keyring_id}"),
        )
