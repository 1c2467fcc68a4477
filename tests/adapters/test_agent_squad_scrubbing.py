"""AgentSquadChatStorage on the path agent-squad users take: string content as agent-squad's
own storages accept it, and tool results (``{"json": ...}`` and ``{"text": ...}`` blocks)
saved through the adapter over ``scrub::sqlite``, checked in the database file's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("agent_squad")

from agent_squad.storage import InMemoryChatStorage as SquadInMemoryChatStorage  # type: ignore[import-untyped]  # agent-squad ships no type hints
from agent_squad.types import ConversationMessage  # type: ignore[import-untyped]  # agent-squad ships no type hints

from storage.adapters.agent_squad import AgentSquadChatStorage
from storage.config import open_storage
from storage.stores.memory import InMemoryChatStorage

SECRET = "test-secret-0123456789abcdef"
EMAIL, PHONE, CARD, IBAN = (
    "ada.lovelace@example.com",
    "+44 20 7946 0958",
    4111111111111111,
    ("GB82 WEST 1234 5698 7654 32"),
)


@pytest.mark.anyio
async def test_string_content_is_kept_as_agent_squads_storage_keeps_it() -> None:
    ours = AgentSquadChatStorage(InMemoryChatStorage())
    theirs = SquadInMemoryChatStorage()
    for storage in (ours, theirs):
        await storage.save_chat_message("u", "s", "a", ConversationMessage("user", "Hello"))
        await storage.save_chat_message(
            "u", "s", "a", ConversationMessage("assistant", [{"text": "Hi!"}])
        )
    got = await ours.fetch_chat("u", "s", "a")
    expected = await theirs.fetch_chat("u", "s", "a")
    assert [(m.role, m.content) for m in got] == [(m.role, m.content) for m in expected]
    assert got[0].content == "Hello"


def tool_turn() -> list[ConversationMessage]:
    return [
        ConversationMessage("user", [{"text": "Look up my account, please."}]),
        ConversationMessage(
            "assistant",
            [{"toolUse": {"toolUseId": "t1", "name": "account", "input": {"id": "acct-7"}}}],
        ),
        ConversationMessage(
            "user",
            [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "content": [
                            {"json": {"email": EMAIL, "phone": PHONE, "card": CARD, "plan": "pro"}},
                            {"text": f"IBAN on file: {IBAN}"},
                        ],
                    }
                }
            ],
        ),
        ConversationMessage("assistant", [{"text": "Your plan is pro."}]),
    ]


def written_bytes(folder: Path) -> bytes:
    """Every byte the store wrote (database, WAL, anything beside it)."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


@pytest.mark.anyio
async def test_tool_results_saved_through_the_adapter_reach_the_store_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    db = tmp_path / "chats.db"
    async with open_storage(f"scrub::sqlite:///{db}") as stack:
        storage = AgentSquadChatStorage(stack)
        await storage.save_chat_messages("u", "s", "support", tool_turn())
        history = await storage.fetch_chat("u", "s", "support")
    written = written_bytes(tmp_path)
    assert written
    for value in (EMAIL, PHONE, str(CARD), IBAN, "7946", "1234 5698"):
        assert value.encode() not in written, value
    assert b"<EMAIL_ADDRESS_" in written
    # What agent-squad reads back is a well-formed toolResult: JSON values scrubbed, keys kept.
    result = history[2].content[0]["toolResult"]
    data = result["content"][0]["json"]
    assert set(data) == {"email", "phone", "card", "plan"}
    assert data["plan"] == "pro"
    assert data["email"].startswith("<EMAIL_ADDRESS_")
    assert "<IBAN_CODE_" in result["content"][1]["text"]
    json.dumps(data)  # still JSON data
