"""Encryption fault scenarios of the conformance kit: the store under test below ``encrypt::``.

The encrypting layer keeps its keyring apart from the data, but it leans on the data store to
tell a lost keyring from an erasure (records of the keyring's id and generation), to undo a
write that raced an erasure (``delete`` of one conversation, ``list_keys``, tails) and to
erase (``delete_user``). These scenarios hold any store to that, with the keyring in a SQLite
file of the test's own:

- a missing keyring is an error (``KeyringMissingError``), never a new empty one, even for a
  stack that asks to create keyrings, and nothing is lost once it is back;
- a keyring restored from an older backup is refused (``KeyringMismatchError``); accepted on
  purpose, a key it lacks reads as lost (``DataKeyMissingError``), never as erased;
- a save whose write lands after another instance erased its user is refused and leaves
  nothing; an erased user who comes back reads their new conversation;
- with a URL: erasures in this process racing saves in another never leave a conversation
  unreadable nor keep a refused message.

They need the ``encrypt`` extra (``cryptography``) and are skipped without it, and for a
harness whose store already encrypts (the layer is not stacked twice). Each runs on one anyio
backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.errors import ConflictError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.harness import StoreHarness, open_store
from storage.testing.reliability_tests import one_backend

__all__ = ["EncryptionFaultTests"]

# A fixed test master key (32 bytes, urlsafe base64); never a real deployment's.
_MASTER = "q1TzQb0c3kq5X0n0J8yE0m4r8U6W1yq2pZc7o9s3H4A="
ADA = ChatKey("kit-ada", "s", "a")
BOB = ChatKey("kit-bob", "s", "a")


class _HeldWrites:
    """The store under test, whose next ``save_messages`` waits until the test lets it land
    (everything else is the store's own)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.hold: anyio.Event | None = None
        self.entered = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        hold, self.hold = self.hold, None
        if hold is not None:
            self.entered.set()
            await hold.wait()
        stored: list[ChatMessage] = await self._store.save_messages(key, messages)
        return stored


class _Kit:
    """The layers of one scenario over the harness's store (one shared instance when the
    store does not persist across instances)."""

    def __init__(self, harness: StoreHarness, tmp: Path, opened: list[ChatStorage]) -> None:
        self.harness = harness
        self.ring = tmp / "kit-keyring" / "keys.db"
        self.opened = opened
        self.keyrings: list[Any] = []
        self._shared: Any = None

    async def base(self) -> Any:
        if not self.harness.persistent:
            if self._shared is None:
                self._shared = await open_store(self.harness.open)
                self.opened.append(self._shared)
            return self._shared
        store = await open_store(self.harness.open)
        self.opened.append(store)
        return store

    async def layer(self, base: Any = None, **options: Any) -> Any:
        from storage.layers.encrypting import EncryptingChatStorage

        inner = base if base is not None else await self.base()
        if isinstance(inner, EncryptingChatStorage):
            pytest.skip("the store under test encrypts already")
        layer = EncryptingChatStorage(inner, keys=_MASTER, keyring=self.ring, **options)
        self.keyrings.append(layer.keyring)  # closed at the end (the store with the others)
        return layer


async def _texts(store: Any, key: ChatKey) -> list[str]:
    return [m.text for m in await store.fetch(key)]


class EncryptionFaultTests:
    """Faults of ``encrypt::`` over the store under test (see the module's docstring)."""

    @pytest.fixture
    async def kit(
        self, harness: StoreHarness, tmp_path: Path, opened_stores: list[ChatStorage]
    ) -> AsyncIterator[_Kit]:
        pytest.importorskip("cryptography")
        kit = _Kit(harness, tmp_path, opened_stores)
        try:
            yield kit
        finally:
            for keyring in kit.keyrings:
                await keyring.aclose()

    @one_backend
    async def test_encrypt_missing_keyring_is_an_error_never_a_new_one(self, kit: _Kit) -> None:
        from storage.layers.encrypting import KeyringMissingError

        first = await kit.layer(create_keyring=True)
        await first.save(ADA, ChatMessage("user", "hello"))
        kit.ring.parent.rename(kit.ring.parent.with_name("kit-keyring-away"))
        kit.ring.parent.mkdir()  # the volume is gone, its mount point left
        for options in ({}, {"create_keyring": True}):
            second = await kit.layer(**options)
            with pytest.raises(KeyringMissingError) as caught:
                await second.fetch(ADA)
            assert isinstance(caught.value, StorageUnavailableError)
            assert str(kit.ring) in str(caught.value)
            with pytest.raises(KeyringMissingError):
                await second.save(BOB, ChatMessage("user", "would be sealed under a new keyring"))
            assert list(kit.ring.parent.iterdir()) == []
        shutil.rmtree(kit.ring.parent)
        kit.ring.parent.with_name("kit-keyring-away").rename(kit.ring.parent)
        assert await _texts(await kit.layer(), ADA) == ["hello"]

    @one_backend
    async def test_encrypt_restored_older_keyring_is_refused_and_lost_keys_are_not_erasures(
        self, kit: _Kit
    ) -> None:
        from storage.layers.encrypting import (
            DataKeyMissingError,
            KeyErasedError,
            KeyringMismatchError,
        )

        carol = ChatKey("kit-carol", "s", "a")
        first = await kit.layer(create_keyring=True)
        await first.save(ADA, ChatMessage("user", "before the backup"))
        await first.save(carol, ChatMessage("user", "erased before the backup"))
        carols_rows = await first.inner.fetch(carol)
        await first.delete_user(carol.user_id)
        await first.keyring.aclose()
        backup = kit.ring.read_bytes()
        second = await kit.layer()
        await second.save(BOB, ChatMessage("user", "made after the backup"))
        await second.keyring.aclose()
        newest = kit.ring.read_bytes()
        kit.ring.write_bytes(backup)  # restored from the older backup
        restored = await kit.layer()
        with pytest.raises(KeyringMismatchError, match="older than the data"):
            await restored.fetch(BOB)
        with pytest.raises(KeyringMismatchError):
            await restored.save(BOB, ChatMessage("user", "would get a new key"))
        await restored.keyring.aclose()
        kit.ring.write_bytes(newest)  # the newest copy back: everything reads
        assert await _texts(await kit.layer(), BOB) == ["made after the backup"]
        kit.ring.write_bytes(backup)
        accepted = await kit.layer()
        await accepted.accept_keyring()  # the newest copy lost for good
        assert await _texts(accepted, ADA) == ["before the backup"]
        with pytest.raises(DataKeyMissingError):
            await accepted.fetch(BOB)
        with pytest.raises(DataKeyMissingError):
            await accepted.save(BOB, ChatMessage("user", "would sit beside unreadable ones"))
        await accepted.inner.save_messages(carol, carols_rows)  # a restored copy of the data
        with pytest.raises(KeyErasedError):
            await accepted.fetch(carol)
        await accepted.delete_user(BOB.user_id)
        await accepted.save(BOB, ChatMessage("user", "again"))
        assert await _texts(accepted, BOB) == ["again"]

    @one_backend
    async def test_encrypt_save_racing_an_erasure_is_refused_and_the_user_can_come_back(
        self, kit: _Kit
    ) -> None:
        held = _HeldWrites(await kit.base())
        saver = await kit.layer(held, create_keyring=True)
        eraser = await kit.layer()
        await saver.save(ADA, ChatMessage("user", "before"))
        hold = held.hold = anyio.Event()
        refused: list[ConflictError] = []

        async def racing_save() -> None:
            try:
                await saver.save(ADA, ChatMessage("user", "sealed under a key being destroyed"))
            except ConflictError as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(racing_save)
            await held.entered.wait()
            await eraser.delete_user(ADA.user_id)
            hold.set()
        assert refused, "a save was acknowledged under a destroyed data key"
        assert await eraser.fetch(ADA) == []
        assert await eraser.inner.fetch(ADA) == []
        # What a crash between such a write and its undo leaves is skipped once the user is
        # back: their new conversation reads.
        await saver.save(ADA, ChatMessage("user", "old"))
        leftover = await eraser.inner.fetch(ADA)
        await eraser.delete_user(ADA.user_id)
        await eraser.inner.save_messages(ADA, leftover)
        await saver.save(ADA, ChatMessage("user", "back"))
        assert await _texts(eraser, ADA) == ["back"]
        assert await _texts(saver, ADA) == ["back"]

    @one_backend
    async def test_encrypt_erasures_racing_saves_of_another_process(
        self, kit: _Kit, harness: StoreHarness
    ) -> None:
        if harness.url is None or not harness.persistent:
            pytest.skip("no URL another process can open")
        eraser = await kit.layer(create_keyring=True)
        await eraser.save(ADA, ChatMessage("user", "first"))
        url = f"encrypt?key_env=CHATLAYERS_KIT_KEYS&keyring={kit.ring}::{harness.url}"
        env = {**os.environ, "CHATLAYERS_KIT_KEYS": _MASTER}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        stop = kit.ring.parent / "stop"
        output = b""
        async with await anyio.open_process(
            [
                sys.executable,
                "-c",
                _SAVER,
                url,
                str(stop),
                ADA.user_id,
                ADA.session_id,
                ADA.agent_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        ) as child:
            assert child.stdout is not None
            assert child.stderr is not None
            async for chunk in child.stdout:
                output += chunk
                if output.count(b"\n") >= 3:
                    break
            for _ in range(40):
                try:
                    await eraser.delete_user(ADA.user_id)
                except StorageUnavailableError:  # a store may ask for a retry: "call again"
                    continue
                async for chunk in child.stdout:  # at least one more save in between
                    output += chunk
                    break
            stop.touch()
            async for chunk in child.stdout:
                output += chunk
            errors = b"".join([chunk async for chunk in child.stderr])
            assert await child.wait() == 0, errors.decode(errors="replace")[-3000:]
        acked = [line.split()[1] for line in output.decode().splitlines() if line[:3] == "ack"]
        kept = [m.id for m in await eraser.fetch(ADA)]
        assert kept, "the last save is missing"
        assert kept[-1] == acked[-1]
        assert set(kept) <= set(acked), "a refused save was kept"


_SAVER = """
import sys, anyio
from pathlib import Path
from storage import open_storage
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage

async def main(url, stop, *key):
    async with open_storage(url) as stack:
        n = 0
        while True:
            last = Path(stop).exists()
            message = ChatMessage("user", f"m{n}", id=f"m{n}")
            try:
                await stack.save(ChatKey(*key), message)
                print("ack", message.id, flush=True)
            except ConflictError:
                print("refused", message.id, flush=True)
                if last:
                    continue
            n += 1
            if last:
                return

anyio.run(main, *sys.argv[1:])
"""
