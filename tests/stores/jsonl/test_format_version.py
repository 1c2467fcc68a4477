"""A JSONL file of a newer format version (a header or a line written by a newer
chatlayers, or edited to say so) is refused with ``SchemaVersionError`` by every read and
every write, and its bytes stay exactly as they were."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from storage.abilities import SummaryCheckpoint
from storage.errors import SchemaVersionError
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def _edit(root: Path, old: bytes, new: bytes) -> None:
    (data,) = root.rglob("*.jsonl")
    assert old in data.read_bytes()
    data.write_bytes(data.read_bytes().replace(old, new))


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [(b'"v":1,', b'"v":99,'), (b'{"hdr":1,', b'{"hdr":3,')],
    ids=["line", "header"],
)
async def test_a_newer_file_is_refused_and_left_untouched(
    tmp_path: Path, old: bytes, new: bytes
) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(KEY, [ChatMessage("user", "q"), ChatMessage("assistant", "a")])
    _edit(tmp_path, old, new)
    before = _files(tmp_path)
    async with JsonlChatStorage(tmp_path) as store:
        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: store.fetch(KEY),
            lambda: store.head(KEY),
            lambda: store.fetch_since(KEY, 0),
            lambda: store.fetch_all_chats("u", "s"),
            lambda: store.search("u", "q"),
        ]
        for read in reads:
            with pytest.raises(SchemaVersionError, match="newer"):
                await read()
        if old == b'"v":1,':  # a tail read reads lines only (the header is the head's)
            with pytest.raises(SchemaVersionError):
                await store.fetch(KEY, limit=1)
        with pytest.raises(SchemaVersionError):
            await store.save(KEY, ChatMessage("user", "never appended"))
        with pytest.raises(SchemaVersionError):
            await store.replace(KEY, [ChatMessage("user", "never rewritten")])
        summary = ChatMessage("system", "s", metadata={"chatlayers": {"summary": True}})
        checkpoint = SummaryCheckpoint((summary,), 1, "e", "m", datetime.now(UTC))
        with pytest.raises(SchemaVersionError):
            await store.save_checkpoint(KEY, checkpoint, expected_version=0)
    assert _files(tmp_path) == before
