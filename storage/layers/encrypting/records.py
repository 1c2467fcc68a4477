"""The encrypting layer's record hooks and placeholder vault (a mixin of the layer).

Records (``RecordStorage``, through :class:`storage.layers.payload.PayloadLayer`) keep
``kind``, ``id`` and times clear and seal their data; the vault's own records (:mod:`.vault`)
are records of a reserved kind, hidden from ``fetch_records`` and read only by
:meth:`RecordsAndVault.reveal`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from storage.abilities import ConversationRecord
from storage.errors import ConfigError
from storage.layers.encrypting.datakeys import DataKeys
from storage.layers.encrypting.envelope import (
    RECORD,
    DataKey,
    open_record,
    seal_record,
    token_key_id,
    token_of_record,
)
from storage.layers.encrypting.vault import VAULT_KIND, PlaceholderVault, reveal_in
from storage.layers.payload import SendRecord
from storage.message import ChatKey
from storage.stores.base import check_key

if TYPE_CHECKING:
    from storage.layers.payload import Below

__all__ = ["RecordsAndVault"]

T = TypeVar("T")


class RecordsAndVault:
    """The record hooks (``_down_record``, ``_up_records``) and ``reveal`` of the encrypting
    layer."""

    _below: Below
    _keys: DataKeys
    vault: PlaceholderVault | None

    if TYPE_CHECKING:  # the layer's own

        def _prefix(self, domain: bytes, key: ChatKey) -> bytes: ...

        def _where(self, key: ChatKey) -> str: ...

        async def _write(self, key: ChatKey, write: Callable[[DataKey], Awaitable[T]]) -> T: ...

    async def _down_record(
        self, key: ChatKey, record: ConversationRecord, send: SendRecord
    ) -> ConversationRecord:
        """Encrypt the record's data (``kind``, ``id`` and times stay clear) and store it.

        Raises:
            ConflictError: the user was erased by another process meanwhile (not kept).
        """

        async def write(data_key: DataKey) -> ConversationRecord:
            stored = await send(seal_record(data_key, self._prefix(RECORD, key), record))
            return self._open_record(data_key, key, stored)

        return await self._write(key, write)

    async def _save_record(
        self, data_key: DataKey, key: ChatKey, record: ConversationRecord
    ) -> ConversationRecord:
        prefix = self._prefix(RECORD, key)
        stored = await self._below.save_record(key, seal_record(data_key, prefix, record))
        return self._open_record(data_key, key, stored)

    def _open_record(
        self, data_key: DataKey, key: ChatKey, stored: ConversationRecord
    ) -> ConversationRecord:
        where = self._where(key)
        token = token_of_record(stored, where)
        return open_record(data_key, self._prefix(RECORD, key), stored, token, where)

    async def _up_records(
        self, key: ChatKey, stored: list[ConversationRecord]
    ) -> list[ConversationRecord]:
        """The key's records, decrypted (the placeholder vault's own records are never
        among them; records sealed with a key an erasure destroyed are skipped once the
        user has a new key).

        Raises:
            KeyErasedError, DataKeyMissingError, CorruptRecordError: as ``fetch``.
        """
        stored = [r for r in stored if r.kind != VAULT_KIND]
        if not stored:
            return []
        data_key = await self._keys.live(key.user_id)
        where = self._where(key)
        live = data_key.key_id if data_key is not None else None
        ids = [token_key_id(token_of_record(r, where)) for r in stored]
        if any(key_id != live for key_id in ids):
            first = next(r.id for r, key_id in zip(stored, ids, strict=True) if key_id != live)
            skip = await self._keys.resolve(key, first, set(ids) - {live}, data_key, where)
            stored = [r for r, key_id in zip(stored, ids, strict=True) if key_id not in skip]
        if data_key is None:  # resolve raised unless nothing is left
            return []
        return [self._open_record(data_key, key, record) for record in stored]

    # --- the placeholder vault -----------------------------------------------------------

    async def _flush_vault(self, key: ChatKey, data_key: DataKey) -> None:
        vault = self.vault
        if vault is None:
            return
        for record in vault.pending_records(key):
            await self._save_record(data_key, key, record)
            vault.done(key, record)

    async def reveal(self, key: ChatKey, value: Any) -> Any:
        """``value`` (a text or a ``ChatMessage`` of ``key``) with each PII placeholder
        replaced by the original value the vault keeps, for display to an authorised
        reader. Never called on a save or fetch path: what a model sees keeps placeholders.
        A placeholder the vault does not know (another conversation's, or its user was
        erased) stays as it is. In a text that is a JSON document (a JSON tool result, a
        tool call's arguments), each original is JSON-escaped, so the document stays valid
        JSON and parses back to the original values.

        Raises:
            ConfigError: the layer has no vault (``vault=True``).
        """
        if self.vault is None:
            raise ConfigError("encrypt: reveal needs the placeholder vault (vault=True)")
        check_key(key)
        if self.vault.has_pending(key):

            async def flush(data_key: DataKey) -> None:
                await self._flush_vault(key, data_key)

            await self._write(key, flush)
        stored = await self._below.fetch_records(key, kind=VAULT_KIND)
        originals: dict[str, str] = {}
        if stored:
            data_key = await self._keys.live(key.user_id)
            if data_key is not None:
                for record in stored:
                    if token_key_id(token_of_record(record, self._where(key))) != data_key.key_id:
                        continue  # sealed before an erasure: shredded
                    data = self._open_record(data_key, key, record).data
                    originals[str(data["placeholder"])] = str(data["value"])
        return reveal_in(value, originals)
