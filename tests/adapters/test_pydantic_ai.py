"""PydanticAIHistory against real pydantic-ai: runs with its TestModel and FunctionModel (no
network), every message part compared with pydantic-ai's own JSON round trip, idempotent
saves, scrubbing, and a restart over SQLite."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from storage.adapters.pydantic_ai import PydanticAIHistory, from_chat_messages, to_chat_messages
from storage.config import open_storage
from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

KEY = ChatKey("user-1", "session-1", "assistant")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # pydantic-ai runs on asyncio only


T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def native(messages: list[ModelMessage]) -> bytes:
    """pydantic-ai's own persistence format (what its docs say to store)."""
    return ModelMessagesTypeAdapter.dump_json(messages)


def weather_agent(model: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, system_prompt="Answer briefly.")

    @agent.tool_plain
    def weather(city: str) -> dict[str, str]:
        """The weather in a city."""
        return {"sky": f"sunny in {city}"}

    return agent


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # RetryPromptPart is deprecated; old histories hold it
    OLD_RETRIES = [
        RetryPromptPart("noop takes no call", tool_name="noop", tool_call_id="c3", timestamp=T0),
        RetryPromptPart("please answer in one word", timestamp=T0),
    ]

EVERY_PART: list[ModelMessage] = [
    ModelRequest(
        parts=[
            SystemPromptPart("Be terse.", timestamp=T0),
            UserPromptPart(
                ["What is on", ImageUrl("https://x.test/cat.png"), "this picture?"], timestamp=T0
            ),
        ],
        instructions="Reply in English.",
        timestamp=T0,
    ),
    ModelResponse(
        parts=[
            ThinkingPart("the user wants a description", signature="sig"),
            TextPart("A cat."),
            TextPart("Probably."),
            ToolCallPart("lookup", '{"q": "cat"}', tool_call_id="c1"),
            ToolCallPart("zoom", {"factor": 2}, tool_call_id="c2"),
            ToolCallPart("noop", None, tool_call_id="c3"),
        ],
        usage=RequestUsage(input_tokens=10, output_tokens=4),
        model_name="gpt-test",
        timestamp=T0,
        provider_response_id="resp-1",
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("lookup", "a small cat", tool_call_id="c1", timestamp=T0),
            ToolReturnPart("zoom", {"pixels": [1, 2]}, tool_call_id="c2", timestamp=T0),
            OLD_RETRIES[0],
        ],
        timestamp=T0,
    ),
    ModelRequest(
        parts=[
            UserPromptPart([BinaryContent(b"\x89PNG", media_type="image/png")], timestamp=T0),
            OLD_RETRIES[1],
        ],
        timestamp=T0,
    ),
    ModelResponse(parts=[TextPart("Cat.")], timestamp=T0),
]


def test_every_part_kind_round_trips_as_pydantic_ai_json() -> None:
    restored = from_chat_messages(to_chat_messages(EVERY_PART))
    # Item by item with pydantic-ai's own JSON round trip (which also upgrades the deprecated
    # RetryPromptPart on load, as ours does).
    theirs = ModelMessagesTypeAdapter.validate_json(native(EVERY_PART))
    assert native(restored) == native(theirs)
    assert len(restored) == len(theirs)
    for ours_message, their_message in zip(restored, theirs, strict=True):
        assert ours_message == their_message


def test_texts_calls_and_results_live_in_the_message_fields() -> None:
    chat = to_chat_messages(EVERY_PART)
    roles = [m.role for m in chat]
    # The image-only prompt has no text: it rides with the retry prompt after it.
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "user", "assistant"]
    assert chat[6].text == "please answer in one word"
    assert chat[1].text == "What is on\nthis picture?"
    assert chat[2].text == "A cat.\nProbably."
    assert [(c.id, c.name, c.arguments) for c in chat[2].tool_calls] == [
        ("c1", "lookup", '{"q": "cat"}'),
        ("c2", "zoom", '{"factor": 2}'),
        ("c3", "noop", ""),
    ]
    assert (chat[4].tool_call_id, chat[4].content) == ("c2", '{"pixels": [1, 2]}')
    assert chat[5].content == "noop takes no call"
    # The same messages convert to the same ids (a retried save stores nothing new).
    assert [m.id for m in to_chat_messages(EVERY_PART)] == [m.id for m in chat]
    with pytest.raises(InvalidMessageError, match="pydantic-ai"):
        to_chat_messages(["hello"])  # type: ignore[list-item]


@pytest.mark.anyio
async def test_a_tool_run_saved_and_resumed_matches_all_messages() -> None:
    history = PydanticAIHistory(InMemoryChatStorage(), KEY)
    agent = weather_agent(TestModel())
    first = await agent.run("Weather in Oslo?", message_history=await history.load())
    await history.save(first.new_messages())
    await history.save(first.new_messages())  # a retry stores nothing new
    loaded = await history.load()
    assert native(loaded) == native(first.all_messages())
    second = await agent.run("And tomorrow?", message_history=loaded)
    await history.save(second.new_messages())
    assert native(await history.load()) == native(second.all_messages())
    stored = await history.stack.fetch(KEY)
    assert len(stored) == len(to_chat_messages(second.all_messages()))


@pytest.mark.anyio
async def test_the_model_receives_the_loaded_history() -> None:
    seen: list[list[ModelMessage]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(f"turn {len(seen)}")])

    agent: Agent[None, str] = Agent(FunctionModel(reply), system_prompt="Be kind.")
    history = PydanticAIHistory(InMemoryChatStorage(), KEY)
    for prompt in ("one", "two", "three"):
        result = await agent.run(prompt, message_history=await history.load())
        await history.save(result.new_messages())
    # The third call saw both earlier turns, system prompt once, in order.
    texts = [
        part.content
        for message in seen[-1]
        for part in message.parts
        if isinstance(part, SystemPromptPart | UserPromptPart | TextPart)
    ]
    assert texts == ["Be kind.", "one", "turn 1", "two", "turn 2", "three"]


@pytest.mark.anyio
async def test_a_scrubbing_stack_stores_and_loads_scrubbed_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "test-secret-0123456789abcdef")
    async with open_storage("scrub::memory://") as stack:
        history = PydanticAIHistory(stack, KEY)
        result = await weather_agent(TestModel()).run("I am ada@example.com")
        await history.save(result.new_messages())
        dumped = native(await history.load()).decode()
        assert "ada@example.com" not in dumped
        assert "<EMAIL_ADDRESS_" in dumped


@pytest.mark.anyio
async def test_messages_written_by_other_code_load_in_default_shapes() -> None:
    store = InMemoryChatStorage()
    await store.save_messages(
        KEY,
        [
            ChatMessage("system", "summary so far"),
            ChatMessage.from_openai(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "k",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            ),
            ChatMessage("tool", "42", tool_call_id="k"),
            ChatMessage("user", "thanks"),
        ],
    )
    loaded = await PydanticAIHistory(store, KEY).load()
    assert [m.kind for m in loaded] == ["request", "response", "request"]
    assert isinstance(loaded[0].parts[0], SystemPromptPart)
    tool_return = loaded[2].parts[0]
    assert isinstance(tool_return, ToolReturnPart)
    assert (tool_return.tool_name, tool_return.content) == ("f", "42")
    # A model run accepts it as message_history.
    result = await weather_agent(TestModel(call_tools=[])).run("go on", message_history=loaded)
    assert result.output


@pytest.mark.anyio
async def test_history_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    async with SQLiteChatStorage(db) as store:
        result = await weather_agent(TestModel()).run("Weather in Rome?")
        await PydanticAIHistory(store, KEY).save(result.new_messages())
    async with SQLiteChatStorage(db) as store:
        assert native(await PydanticAIHistory(store, KEY).load()) == native(result.all_messages())


@pytest.mark.anyio
async def test_saving_all_messages_of_a_summarized_view_stores_only_the_new_ones(
    tmp_path: Path,
) -> None:
    # Two workers over one SQLite file take turns; each saves result.all_messages(), as
    # pydantic-ai's docs store a history: the loaded summary and the turns it came with
    # (merged by pydantic-ai into one request) are not stored again.
    url = f"summarize?trigger_at=2&keep_last=1::sqlite:///{tmp_path / 'chats.db'}"
    async with open_storage(url) as one, open_storage(url) as two:
        histories = [PydanticAIHistory(one, KEY), PydanticAIHistory(two, KEY)]
        agent = weather_agent(TestModel())
        new = 0
        firsts: list[Any] = []
        for turn in range(6):
            history = histories[turn % 2]
            loaded = await history.load()
            firsts.append(loaded[0].parts[0] if loaded else None)
            result = await agent.run(f"Weather on day {turn}?", message_history=loaded)
            await history.save(result.all_messages())
            new += len(to_chat_messages(result.new_messages()))
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:
        raw = (await store.fetch_since(KEY, 0)).messages
    assert len(raw) == new
    assert len({m.id for m in raw}) == new
    assert [m.text for m in raw if m.is_summary or m.role == "system"] == ["Answer briefly."]
    summary = firsts[-1]  # the view's summary loads as a marked system-prompt part
    assert isinstance(summary, SystemPromptPart)
    assert summary.metadata == {"chatlayers": {"summary": True}}
