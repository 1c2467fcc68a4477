"""No leak: the shipped tau-bench conversations replayed through ``scrub::sqlite`` and
``scrub::jsonl`` leave none of their e-mail addresses in the stored bytes."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.pii import PIIScrubber
from storage.protocol import ChatStorage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.paths import REPO

ROOT = REPO
NAME = "tau_bench_airline_gpt4o_trial0.openai.jsonl"
# Deliberately looser than the scrubber's own rules, so the test can catch what it misses.
LOOSE_EMAIL = re.compile(r"[\w.+%'-]+@[\w-]+(?:\.[\w-]+)+")


def conversations() -> list[dict[str, object]]:
    path = ROOT / "examples" / "data" / NAME
    if not path.exists():
        path = ROOT.parent / "shared" / "data" / NAME
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def emails_in(records: list[dict[str, object]]) -> set[str]:
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.update(LOOSE_EMAIL.findall(value))
            if value[:1] in "{[":
                with contextlib.suppress(ValueError):
                    walk(json.loads(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for record in records:
        walk(record["messages"])
    return found


def stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def messages_of(record: dict[str, object]) -> list[Any]:
    messages = record["messages"]
    assert isinstance(messages, list)
    return messages


async def replay(store: ChatStorage, records: list[dict[str, object]]) -> int:
    saved = 0
    for record in records:
        metadata = record.get("metadata") or {}
        user = str(metadata.get("user_id") or "user") if isinstance(metadata, dict) else "user"
        key = ChatKey(user, str(record["id"]), "airline-agent")
        for data in messages_of(record):  # turn by turn, as an agent saves them
            saved += len(await store.save(key, ChatMessage.from_openai(data)))
    return saved


STORES: dict[str, Callable[[Path], ChatStorage]] = {
    "sqlite": lambda root: SQLiteChatStorage(root / "chats.db"),
    "jsonl": lambda root: JsonlChatStorage(root / "jsonl"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("store_name", list(STORES))
async def test_no_input_email_reaches_the_store(tmp_path: Path, store_name: str) -> None:
    records = conversations()
    emails = emails_in(records)
    assert len(records) == 50
    assert len(emails) >= 20  # the data does hold addresses (in tool results and arguments)
    scrubber = PIIScrubber(secret="no-leak-test")
    root = tmp_path / store_name
    root.mkdir()
    store = TransformingChatStorage(STORES[store_name](root), scrubber)
    saved = await replay(store, records)
    assert saved == sum(len(messages_of(r)) for r in records)
    assert scrubber.counts["EMAIL_ADDRESS"] >= len(emails)

    while_open = stored_bytes(root)  # the SQLite WAL holds the writes until a checkpoint
    await store.aclose()
    after_close = stored_bytes(root)
    assert len(after_close) > 100_000
    for data in (while_open, after_close):
        leaked = sorted(e for e in emails if e.encode() in data)
        assert leaked == []
    # the scrubbed conversations are still there, with placeholders in place of addresses
    assert b"<EMAIL_ADDRESS_" in after_close
