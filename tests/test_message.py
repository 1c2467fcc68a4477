"""The message model: lossless OpenAI round trip on every shipped message, and its edges."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
DATASETS = sorted(DATA.glob("*.openai.jsonl"))


def test_three_datasets_are_shipped() -> None:
    assert {p.name.split("_")[0] for p in DATASETS} == {"tau", "oasst", "swe"}
    assert (DATA / "README.md").read_text(encoding="utf-8").count("License") >= 3


@pytest.mark.parametrize("path", DATASETS, ids=lambda p: p.name)
def test_every_shipped_message_round_trips(path: Path) -> None:
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        for wire in json.loads(line)["messages"]:
            message = ChatMessage.from_openai(wire)
            assert message.to_openai() == wire
            count += 1
    assert count > 20


def test_absent_and_null_content_stay_distinct() -> None:
    assert ChatMessage.from_openai({"role": "assistant"}).to_openai() == {"role": "assistant"}
    assert ChatMessage.from_openai({"role": "assistant", "content": None}).to_openai() == {
        "role": "assistant",
        "content": None,
    }
    assert ChatMessage.from_openai({"role": "user", "content": "x", "name": None}).to_openai() == {
        "role": "user",
        "content": "x",
        "name": None,
    }
    assert ChatMessage.from_openai(
        {"role": "assistant", "content": "", "tool_calls": []}
    ).to_openai() == {
        "role": "assistant",
        "content": "",
        "tool_calls": [],
    }


def test_arguments_kept_as_exact_string_and_unknown_fields_kept() -> None:
    wire = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "audio": {"id": "a1"},
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{ "a" :1 }'}}
        ],
    }
    message = ChatMessage.from_openai(wire)
    assert message.tool_calls == (ToolCall("c", "f", '{ "a" :1 }'),)
    assert message.to_openai() == wire
    assert dict(message.extra) == {"refusal": None, "audio": {"id": "a1"}}


def test_built_in_code_emits_content() -> None:
    assert ChatMessage("user", "hi").to_openai() == {"role": "user", "content": "hi"}
    assert ChatMessage("assistant", None, (ToolCall("1", "f", "{}"),)).to_openai() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def test_ids_are_unique_and_kept_on_retry() -> None:
    a, b = ChatMessage("user", "x"), ChatMessage("user", "x")
    assert a.id != b.id
    assert len(a.id) == 32
    assert attrs.evolve(a, content="y").id == a.id


def test_content_parts_and_metadata_are_read_only_copies() -> None:
    parts = [{"type": "text", "text": "a"}]
    meta = {"k": [1]}
    message = ChatMessage("user", parts, metadata=meta)
    assert isinstance(message.content, tuple)
    parts[0]["text"] = "b"
    meta["k"].append(2)
    assert message.content[0]["text"] == "a"
    assert message.metadata["k"] == (1,)
    with pytest.raises(TypeError):
        message.content[0]["text"] = "c"  # type: ignore[index]  # read-only, on purpose
    assert message.text == "a"


def test_from_openai_rejects_garbage() -> None:
    with pytest.raises(InvalidMessageError, match="dict"):
        ChatMessage.from_openai(["user", "x"])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="role"):
        ChatMessage.from_openai({"content": "x"})
    with pytest.raises(InvalidMessageError, match="tool call 0 in 'tool_calls' has no 'function'"):
        ChatMessage.from_openai({"role": "assistant", "tool_calls": [{"id": "x"}]})
    no_arguments = {"id": "x", "function": {"name": "find"}}
    ok = {"id": "y", "function": {"name": "find", "arguments": "{}"}}
    with pytest.raises(InvalidMessageError, match="tool call 1 in 'tool_calls' has no 'arguments'"):
        ChatMessage.from_openai({"role": "assistant", "tool_calls": [ok, no_arguments]})
    with pytest.raises(InvalidMessageError, match="tool call 0 in 'tool_calls' is not"):
        ChatMessage.from_openai({"role": "assistant", "tool_calls": ["find()"]})


def test_agent_squad_shape() -> None:
    message = ChatMessage.from_agent_squad({"role": "user", "content": [{"text": "hello"}]})
    assert message.content == "hello"
    assert message.to_agent_squad() == {"role": "user", "content": [{"text": "hello"}]}


def test_summary_marker() -> None:
    assert ChatMessage("system", "s", metadata={"chatlayers": {"summary": True}}).is_summary
    assert not ChatMessage("system", "s").is_summary


def test_key_str_and_equality() -> None:
    assert ChatKey("a", "b", "c") == ChatKey("a", "b", "c")
    assert ChatKey("a:b", "c", "d") != ChatKey("a", "b:c", "d")
    assert "a:b" in str(ChatKey("a:b", "c", "d"))


def test_created_at_kept() -> None:
    when = datetime(2024, 1, 1, tzinfo=UTC)
    assert (
        ChatMessage.from_openai({"role": "user", "content": "x"}, created_at=when).created_at
        == when
    )


def test_developer_role_round_trips_exactly() -> None:
    wire = {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]}
    message = ChatMessage.from_openai(wire)
    assert message.role == "developer"
    assert message.to_openai() == wire
    assert ChatMessage.from_openai({"role": "developer", "content": "x"}).to_openai() == {
        "role": "developer",
        "content": "x",
    }


@pytest.mark.anyio
async def test_developer_message_round_trips_through_every_local_store(tmp_path: Path) -> None:
    from storage.history import validate_message
    from storage.stores.memory import InMemoryChatStorage
    from storage.stores.sqlite import SQLiteChatStorage

    wire = {"role": "developer", "content": "Use metric units.", "name": "ops"}
    key = ChatKey("u", "s", "a")
    for store in (InMemoryChatStorage(), SQLiteChatStorage(tmp_path / "d.db")):
        async with store:
            message = validate_message(ChatMessage.from_openai(wire))
            await store.save(key, message)
            (back,) = await store.fetch(key)
            assert back.to_openai() == wire
            assert back.role == "developer"
