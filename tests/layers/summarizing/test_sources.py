"""Grounded summaries through the layer: the summary's ``metadata["chatlayers"]["sources"]``
(the raw messages it covers, the message each fact came from) survives into the stored
checkpoint and the view's one leading message, through scrub and encrypt, across a restart,
in store and memory mode; never in the model's text, never in clear below ``encrypt``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from storage.config import open_storage
from storage.layers.encrypting import new_master_key
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
EMAIL = "mia.li@example.com"
MASTER = new_master_key()


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MK", MASTER)


def conversation() -> list[ChatMessage]:
    call = ToolCall("call_1", "get_reservation_details", '{"reservation_id": "H9ZU1C"}')
    result = {"reservation_id": "H9ZU1C", "email": EMAIL, "flights": [{"date": "2024-05-17"}]}
    out = [
        ChatMessage("system", "You are a travel agent."),
        ChatMessage("user", f"I am {EMAIL}; show reservation H9ZU1C, I paid $255."),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", json.dumps(result), tool_call_id=call.id),
        ChatMessage("assistant", "It flies on 2024-05-17."),
    ]
    for n in range(4):
        out += [ChatMessage("user", f"Question {n}?"), ChatMessage("assistant", f"Answer {n}.")]
    return out


def sources_of(message: ChatMessage) -> Mapping[str, Any]:
    sources = message.metadata["chatlayers"]["sources"]
    assert isinstance(sources, Mapping)
    return sources


def check_grounded(view: list[ChatMessage], raw: list[ChatMessage]) -> Mapping[str, Any]:
    header = view[0]
    assert header.is_summary
    assert header.role == "system"  # merged into the pinned prompt: one leading message
    sources = sources_of(header)
    ids = [m.id for m in raw]
    assert sources["covers"]
    assert set(sources["covers"]) <= set(ids)
    facts = sources["facts"]
    assert "H9ZU1C" in facts
    assert all(origin in ids for origin in facts.values())
    assert all(fact in header.text for fact in facts)  # facts as the model reads them...
    assert "covers" not in header.text  # ...and the grounding is metadata only
    return sources


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_the_view_header_and_the_checkpoint_keep_the_sources_through_scrub(
    tmp_path: Path, summaries: str
) -> None:
    store = f"sqlite:///{tmp_path}/c.db"
    url = f"summarize?trigger_at=3&summaries={summaries}::scrub?secret=s::{store}"
    async with open_storage(url) as stack:
        for message in conversation():
            await stack.save(KEY, message)
        view = await stack.fetch(KEY)
        raw = [a.message for a in await stack.fetch_all_chats("u", "s")]
        sources = check_grounded(view, raw)
        checkpoint = await SQLiteChatStorage(tmp_path / "c.db").load_checkpoint(KEY)
        if summaries == "store":
            # The stored summary holds the same sources; the scrubber left them alone,
            # and they name the scrubbed text (a placeholder, never the address).
            assert checkpoint is not None
            (summary,) = [m for m in checkpoint.messages if "sources" in m.metadata["chatlayers"]]
            assert sources_of(summary) == sources
            assert EMAIL not in repr(checkpoint)
            assert any(fact.startswith("<EMAIL_ADDRESS_") for fact in sources["facts"])
        else:
            assert checkpoint is None
    if summaries == "store":
        async with open_storage(url) as restarted:  # a restart: the stored checkpoint
            assert await restarted.fetch(KEY) == view


async def test_encryption_seals_the_sources_and_the_stack_reads_them_back(tmp_path: Path) -> None:
    data = f"sqlite:///{tmp_path}/data.db"
    url = (
        f"summarize?trigger_at=3::encrypt?create_keyring=true&key_env=MK"
        f"&keyring=sqlite:///{tmp_path}/keys/k.db::{data}"
    )
    (tmp_path / "keys").mkdir()
    async with open_storage(url) as stack:
        for message in conversation():
            await stack.save(KEY, message)
        view = await stack.fetch(KEY)
        raw = [a.message for a in await stack.fetch_all_chats("u", "s")]
        sources = check_grounded(view, raw)
    checkpoint = await SQLiteChatStorage(tmp_path / "data.db").load_checkpoint(KEY)
    assert checkpoint is not None
    stored = repr(checkpoint)
    assert "sources" not in stored  # sealed with the rest of the message
    assert all(fact not in stored for fact in sources["facts"])
    assert all(m.metadata == {"chatlayers": {"summary": True}} for m in checkpoint.messages)
    async with open_storage(url) as restarted:
        assert sources_of((await restarted.fetch(KEY))[0]) == sources
