"""Erasure racing a save (SQLite and JSONL, keyrings of both kinds): a save whose write lands
after ``delete_user`` destroyed its key is undone and refused, never acknowledged; writes and
erasures of one instance never interleave; an erased user who comes back gets a conversation
that reads. Two instances, tasks of one instance, and two processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import pytest

from storage.errors import ConflictError, StorageUnavailableError
from storage.layers.encrypting import (
    EncryptingChatStorage,
    SQLiteKeyring,
    WrappedKey,
    new_master_key,
)
from storage.layers.encrypting.cipher import token_key_id
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorageWrapper
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
ADA = ChatKey("ada", "s", "a")
KINDS = ["sqlite", "jsonl"]


def _held(base: type[Any]) -> type[Any]:
    class Held(base):  # type: ignore[misc]  # a base only known at run time
        """A store whose next write waits until the test lets it land."""

        hold: anyio.Event | None = None
        entered: anyio.Event | None = None
        # Run once, after the first read that follows the held write: another writer
        # landing between the layer's read of the record and what it does with it.
        after_read: Callable[[], Awaitable[None]] | None = None
        phase = "after"  # or "before": just before that read

        async def save_messages(
            self, key: ChatKey, messages: Sequence[ChatMessage]
        ) -> list[ChatMessage]:
            hold, self.hold = self.hold, None
            if hold is not None:
                assert self.entered is not None
                self.entered.set()
                await hold.wait()
            stored: list[ChatMessage] = await super().save_messages(key, messages)
            self._armed = hold is not None
            return stored

        async def fetch(self, key: ChatKey, **options: Any) -> list[ChatMessage]:
            await self._interleave("before")
            found: list[ChatMessage] = await super().fetch(key, **options)
            await self._interleave("after")
            return found

        async def fetch_since(self, key: ChatKey, after: int) -> Any:
            await self._interleave("before")
            found = await super().fetch_since(key, after)
            await self._interleave("after")
            return found

        async def _interleave(self, phase: str) -> None:
            armed = getattr(self, "_armed", False) and phase == self.phase
            if armed and self.after_read is not None:
                self._armed = False
                await self.after_read()

    return Held


@runtime_checkable
class Holding(Protocol):
    """What a ``Held`` store adds: the events a test holds its next write with."""

    hold: anyio.Event | None
    entered: anyio.Event | None
    after_read: Callable[[], Awaitable[None]] | None
    phase: str


def holding(stack: EncryptingChatStorage) -> Holding:
    """The held store under ``stack`` (built with ``layer(..., held=True)``)."""
    inner = stack.inner
    while isinstance(inner, Plain):
        inner = inner.inner
    assert isinstance(inner, Holding)
    return inner


class Plain(ChatStorageWrapper):
    """A layer offering only the protocol and listing: no head, no compare-and-replace."""


async def erase_during_a_save(
    saver: EncryptingChatStorage, eraser: EncryptingChatStorage
) -> list[ConflictError]:
    """The saver's next save sealed, its write held until the eraser erased ada, then let
    land: the refusals it got."""
    held = holding(saver)
    hold = held.hold = anyio.Event()
    entered = held.entered = anyio.Event()
    refused: list[ConflictError] = []

    async def racing_save() -> None:
        try:
            await saver.save(ADA, ChatMessage("user", "sealed under the key being destroyed"))
        except ConflictError as exc:
            refused.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(racing_save)
        await entered.wait()  # sealed, its write not landed yet
        await eraser.delete_user("ada")
        hold.set()
    return refused


HeldSQLite = _held(SQLiteChatStorage)
HeldJsonl = _held(JsonlChatStorage)


def ring(tmp: Path, kind: str) -> str:
    return str(tmp / "ring" / "keys.db") if kind == "sqlite" else f"jsonl://{tmp / 'ring'}"


def data_url(tmp: Path, kind: str) -> str:
    return f"sqlite:///{tmp / 'c.db'}" if kind == "sqlite" else f"jsonl://{tmp / 'data'}"


def store(tmp: Path, kind: str, *, held: bool = False) -> Any:
    if kind == "sqlite":
        return (HeldSQLite if held else SQLiteChatStorage)(tmp / "c.db")
    return (HeldJsonl if held else JsonlChatStorage)(tmp / "data")


def layer(
    tmp: Path, kind: str, *, held: bool = False, plain: bool = False
) -> EncryptingChatStorage:
    below = store(tmp, kind, held=held)
    return EncryptingChatStorage(
        Plain(below) if plain else below,
        keys=MASTER,
        keyring=ring(tmp, kind),
        create_keyring=True,
    )


async def texts(stack: Any, key: ChatKey) -> list[str]:
    return [m.text for m in await stack.fetch(key)]


@pytest.mark.parametrize("plain", [False, True], ids=["store", "plain-layer"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_save_landing_after_another_instance_erased_its_user_is_refused(
    tmp_path: Path, kind: str, plain: bool
) -> None:
    """Also over a layer without compare-and-replace (the undo deletes while the user has no
    live key)."""
    saver = layer(tmp_path, kind, held=True, plain=plain)
    eraser = layer(tmp_path, kind)
    await saver.save(ADA, ChatMessage("user", "before"))
    outcome = await erase_during_a_save(saver, eraser)
    assert len(outcome) == 1, "the save was acknowledged under a destroyed key"
    assert "erased while this write ran" in str(outcome[0])
    assert await eraser.fetch(ADA) == []
    assert await eraser.inner.fetch(ADA) == []  # nothing left in the store either
    await saver.save(ADA, ChatMessage("user", "back"))  # the user comes back
    assert await texts(eraser, ADA) == ["back"]
    assert await texts(saver, ADA) == ["back"]
    await saver.aclose()
    await eraser.aclose()


@pytest.mark.parametrize("phase", ["before", "after"])
@pytest.mark.parametrize("kind", KINDS)
async def test_undoing_a_refused_write_never_deletes_a_returning_users_save(
    tmp_path: Path, kind: str, phase: str
) -> None:
    """Three instances: the saver's write lands after the eraser destroyed the key; while the
    saver undoes it (just before or just after its read of the record), a third instance
    saves the returning user's first message under a new key. That message was
    acknowledged: it stays, and every instance reads it."""
    saver, eraser, returning = (
        layer(tmp_path, kind, held=True),
        layer(tmp_path, kind),
        layer(tmp_path, kind),
    )
    await saver.save(ADA, ChatMessage("user", "before"))
    acknowledged: list[str] = []

    async def return_meanwhile() -> None:
        stored = await returning.save(ADA, ChatMessage("user", "back"))
        acknowledged.append(stored[0].id)

    held = holding(saver)
    held.after_read, held.phase = return_meanwhile, phase
    refused = await erase_during_a_save(saver, eraser)
    assert len(refused) == 1  # the undo ran
    assert len(acknowledged) == 1  # the return landed meanwhile
    for stack in (saver, eraser, returning):
        assert [m.id for m in await stack.fetch(ADA)] == acknowledged
    assert await texts(eraser, ADA) == ["back"]
    for stack in (saver, eraser, returning):
        await stack.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_erasure_waits_for_the_saves_of_its_user_in_flight(
    tmp_path: Path, kind: str
) -> None:
    stack = layer(tmp_path, kind, held=True)
    other = ChatKey("bob", "s", "a")
    await stack.save(ADA, ChatMessage("user", "before"))
    await stack.save(other, ChatMessage("user", "bob's"))
    hold = holding(stack).hold = anyio.Event()
    entered = holding(stack).entered = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stack.save, ADA, ChatMessage("user", "in flight"))
        await entered.wait()
        tg.start_soon(stack.delete_user, "ada")
        await anyio.wait_all_tasks_blocked()
        # The erasure waits: the key the save sealed under is still there.
        assert await stack.keyring.get("ada") is not None
        assert await texts(stack, other) == ["bob's"]  # other users are not held up
        hold.set()
    assert await stack.keyring.get("ada") is None
    assert await stack.inner.fetch(ADA) == []  # the save landed first, then was erased
    await stack.save(ADA, ChatMessage("user", "back"))
    assert await texts(stack, ADA) == ["back"]
    await stack.aclose()


SAVER = """
import sys, anyio
from pathlib import Path
from storage import open_storage
from storage.errors import ConflictError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage

async def main(url, stop):
    async with open_storage(url) as stack:
        n = 0
        while True:
            last = Path(stop).exists()
            message = ChatMessage("user", f"m{n}", id=f"m{n}")
            try:
                await stack.save(ChatKey("ada", "s", "a"), message)
                print("ack", message.id, flush=True)
            except ConflictError:
                print("refused", message.id, flush=True)
                if last:
                    continue  # the last save must land: try again under the new key
            n += 1
            if last:
                return

anyio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", KINDS)
async def test_erasures_in_one_process_racing_saves_in_another(tmp_path: Path, kind: str) -> None:
    """A process saving without pause while another erases the user again and again: no
    refused message is kept, the conversation always reads, the last save is there."""
    eraser = layer(tmp_path, kind)
    await eraser.save(ADA, ChatMessage("user", "first"))  # the keyring exists
    url = f"encrypt?keyring={ring(tmp_path, kind)}::{data_url(tmp_path, kind)}"
    env = {**os.environ, "CHATLAYERS_MASTER_KEYS": MASTER}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    stop = tmp_path / "stop"
    async with await anyio.open_process(
        [sys.executable, "-c", SAVER, url, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        output = b""
        async for chunk in child.stdout:  # the child is saving
            output += chunk
            if output.count(b"\n") >= 5:
                break
        erasures = 0
        while erasures < 150:
            try:
                await eraser.delete_user("ada")
            except StorageUnavailableError:  # the SQLite store's WAL kept busy: call again
                continue
            erasures += 1
            async for chunk in child.stdout:  # let at least one more save through
                output += chunk
                break
        stop.touch()
        async for chunk in child.stdout:
            output += chunk
        errors = b"".join([chunk async for chunk in child.stderr])
        assert await child.wait() == 0, errors.decode(errors="replace")[-3000:]
    lines = [line.split() for line in output.decode().splitlines()]
    acked = [name for verdict, name in lines if verdict == "ack"]
    assert acked, errors
    kept = [m.id for m in await eraser.fetch(ADA)]  # never KeyErasedError
    assert kept[-1] == acked[-1]  # the last acknowledged save reads
    assert set(kept) <= set(acked)  # nothing refused was kept
    assert [m.message.id for m in await eraser.fetch_all_chats("ada", "s")] == kept
    await eraser.aclose()


class LateKeyring(SQLiteKeyring):
    """A keyring whose first read of a user comes back before another writer's key landed."""

    stale = True

    async def get(self, user_id: str) -> WrappedKey | None:
        if self.stale:
            self.stale = False
            return None
        return await super().get(user_id)


async def test_two_writers_making_a_users_first_key_at_once_agree_on_it(tmp_path: Path) -> None:
    """Worker B reads the keyring just before worker A's first save of the user made the key,
    then finds A's message sealed with it: B uses A's key (no refusal, no second key)."""
    data = SQLiteChatStorage(tmp_path / "c.db")
    first = EncryptingChatStorage(data, keys=MASTER, keyring=tmp_path / "k.db", create_keyring=True)
    await first.save(ADA, ChatMessage("user", "from A"))
    late = LateKeyring(tmp_path / "k.db")
    second = EncryptingChatStorage(SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=late)
    await second.save(ADA, ChatMessage("assistant", "from B"))
    assert not late.stale
    for layer in (first, second):
        assert [m.text for m in await layer.fetch(ADA)] == ["from A", "from B"]
    entry = await first.keyring.get("ada")
    assert entry is not None
    assert {token_key_id(str(m.content)) for m in await data.fetch(ADA)} == {entry.key_id}
    await first.aclose()
    await second.aclose()
