"""A write cancelled while the secondary has it in flight (a client that went away, a worker
shut down): the primary holds it, the secondary may not. Its mark must reach the journal, so
another instance over the same primary (a restarted worker) repairs it; before, the mark was
kept in the cancelled instance's memory only and was lost when it closed."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from storage.layers.mirroring import MirrorChatStorage
from storage.message import ChatKey, ChatMessage
from storage.migrate import verify
from storage.stores.sqlite import SQLiteChatStorage
from tests.layers.mirroring.test_mirror import Outage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
OTHER = ChatKey("u", "s2", "a")


def over(tmp_path: Path, secondary: Outage) -> MirrorChatStorage:
    primary = SQLiteChatStorage(str(tmp_path / "primary.db"))
    return MirrorChatStorage(primary, secondary=secondary, timeout=30, recheck=0)


async def test_a_write_cancelled_on_the_secondary_is_journaled_for_other_instances(
    tmp_path: Path,
) -> None:
    secondary = Outage()
    a = over(tmp_path, secondary)
    await a.save(KEY, ChatMessage("user", "first"))
    secondary.hanging = True
    with anyio.move_on_after(0.2):  # the client gives up while the secondary hangs
        await a.save(KEY, ChatMessage("assistant", "second"))
    secondary.hanging = False
    assert [m.text for m in await a.fetch(KEY)] == ["first", "second"]  # the primary has it
    assert [m.text for m in await secondary.fetch(KEY)] == ["first"]
    # Another worker over the same primary knows of the miss at once (the worker that was
    # cancelled may be killed before it writes or closes again), ...
    b = over(tmp_path, secondary)
    try:
        await b.save(OTHER, ChatMessage("user", "elsewhere"))  # reads the journal
        assert b.missed == 1
    finally:
        await b.aclose()
    await a.aclose()  # ... and so does one started after it stopped
    b = over(tmp_path, secondary)
    try:
        await b.repair()
        assert b.repairs == 1
        assert b.missed == 0
        assert [m.text for m in await secondary.fetch(KEY)] == ["first", "second"]
        assert (await verify(b.inner, secondary)).equal
    finally:
        await b.aclose()
