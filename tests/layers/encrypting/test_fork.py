"""A fork through the encrypting layer: messages and the carried checkpoint are opened with
the source key and sealed again with the fork's, and a checkpoint made after the fork read the
record (another worker's turn and summary) is never carried."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from storage.abilities import SummaryCheckpoint
from storage.abilities.forking import fork_by_copy
from storage.layers.encrypting import EncryptingChatStorage, new_master_key
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("ada", "trip", "a")
FORK = ChatKey("ada", "trip-2", "a")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def turns(n: int, prefix: str) -> list[ChatMessage]:
    return [
        ChatMessage("user" if i % 2 == 0 else "assistant", f"{prefix} {i}", id=f"{prefix}{i}")
        for i in range(n)
    ]


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


async def checkpoint(layer: EncryptingChatStorage, text: str, index: int, expected: int) -> int:
    tail = await layer.fetch_since(KEY, 0)
    made = SummaryCheckpoint((summary(text),), tail.seqs[index], tail.head.epoch, "t", T0)
    stored = await layer.save_checkpoint(KEY, made, expected_version=expected)
    assert stored is not None
    return stored.version


async def test_a_fork_carries_only_a_checkpoint_of_what_it_copied(tmp_path: Path) -> None:
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"),
        keys=new_master_key(),
        keyring=tmp_path / "k.db",
        create_keyring=True,
    )
    await layer.save_messages(KEY, turns(6, "m"))
    first = await checkpoint(layer, "up to m3", 3, 0)

    class Racing:
        """The layer, with another worker's turn and summary landing after the read."""

        def __getattr__(self, name: str) -> Any:
            return getattr(layer, name)

        async def fetch_timeline(self, key: ChatKey) -> Any:
            read = await layer.fetch_timeline(key)
            await layer.save_messages(KEY, turns(2, "late"))
            await checkpoint(layer, "up to late1", -1, first)
            return read

    assert await fork_by_copy(Racing(), KEY, FORK, None) == 6
    assert [m.text for m in await layer.fetch(FORK)] == [f"m {i}" for i in range(6)]
    carried = await layer.load_checkpoint(FORK)
    assert carried is not None
    assert carried.messages[0].text == "up to m3"  # opened with the fork's key
    assert [m.id for m in (await layer.fetch_since(FORK, carried.covers_to)).messages] == [
        "m4",
        "m5",
    ]
    raw = (await layer.inner.fetch(FORK))[0].content
    assert isinstance(raw, str)
    assert raw.startswith("ce1:")  # sealed in the store
    await layer.aclose()
