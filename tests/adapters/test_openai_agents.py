"""OpenAIAgentsSession against the real OpenAI Agents SDK: item round trips, the Session
protocol's semantics, and a tool-calling ``Runner`` run resumed in a new process."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.paths import REPO

pytest.importorskip("agents")

from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Runner,
    TResponseInputItem,
    Usage,
    function_tool,
)
from agents.memory import Session
from agents.memory.session_settings import SessionSettings
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from storage.adapters.openai_agents import (
    OpenAIAgentsSession,
    items_to_messages,
    message_to_items,
)
from storage.errors import ConflictError, InvalidMessageError
from storage.message import ChatKey
from storage.protocol import ChatStorageWrapper
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

KEY = ChatKey("user-1", "session-1", "assistant")


# --- a scripted model: the SDK's own tests use the same pattern (tests/fake_model.py) -------


class ScriptedModel(Model):
    """Returns the next canned output on every call and records the input it was given."""

    def __init__(self, turns: list[list[Any]]) -> None:
        self.turns = list(turns)
        self.inputs: list[Any] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def text_message(text: str, id: str = "msg_1") -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def function_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=arguments, call_id=call_id, id=f"fc_{call_id}"
    )


def reasoning(text: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(
        id="rs_1",
        type="reasoning",
        summary=[Summary(type="summary_text", text=text)],
        encrypted_content="gAAAA-opaque",
    )


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def weather_agent(model: Model) -> Agent[Any]:
    return Agent(name="assistant", instructions="Help.", model=model, tools=[get_weather])


NO_TRACING = RunConfig(tracing_disabled=True)


# --- item shapes -----------------------------------------------------------------------------

REAL_SHAPES: list[dict[str, Any]] = [
    {"content": "What's the weather?", "role": "user"},
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Use metric units."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "https://example.org/a.png", "detail": "auto"},
        ],
    },
    reasoning("The user wants weather.").model_dump(exclude_unset=True),
    text_message("Let me check.").model_dump(exclude_unset=True),
    function_call("get_weather", '{"city": "Paris"}', "call_1").model_dump(exclude_unset=True),
    function_call("get_weather", '{"city":"Rome" }', "call_2").model_dump(exclude_unset=True),
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Paris"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "rainy in Rome"}],
    },
    text_message("Paris is sunny, Rome rainy.", id="msg_2").model_dump(exclude_unset=True),
    {"role": "assistant", "content": "plain assistant text"},
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    },
    {"type": "item_reference", "id": "msg_1"},
    {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c9", "output": ""},
]


def as_items(items: list[dict[str, Any]]) -> list[TResponseInputItem]:
    """The SDK's item type for dicts in its shapes (built above from its own models)."""
    return cast("list[TResponseInputItem]", items)


def as_dicts(items: list[TResponseInputItem]) -> list[dict[str, Any]]:
    """Items read back, as plain dicts a test indexes by the keys it knows they have."""
    return cast("list[dict[str, Any]]", items)


def roundtrip(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for m in items_to_messages(items) for i in message_to_items(m)]


def test_real_shapes_round_trip_exactly() -> None:
    assert roundtrip(REAL_SHAPES) == REAL_SHAPES


def test_one_assistant_step_becomes_one_chat_turn() -> None:
    step = [
        reasoning("think").model_dump(exclude_unset=True),
        text_message("Checking both.").model_dump(exclude_unset=True),
        function_call("get_weather", '{"city": "Paris"}', "call_1").model_dump(exclude_unset=True),
        function_call("get_weather", '{"city": "Rome"}', "call_2").model_dump(exclude_unset=True),
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "rainy"},
    ]
    messages = items_to_messages(step)
    assert [m.role for m in messages] == ["assistant", "tool", "tool"]
    assistant = messages[0]
    assert assistant.text == "Checking both."
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("call_1", "get_weather", '{"city": "Paris"}'),
        ("call_2", "get_weather", '{"city": "Rome"}'),
    ]
    assert [m.tool_call_id for m in messages[1:]] == ["call_1", "call_2"]
    assert [m.content for m in messages[1:]] == ["sunny", "rainy"]
    # The reasoning item has no chat field: it rides in metadata, whole.
    kept = assistant.metadata["openai_agents"]["items"][0]
    assert kept["k"] == "o"
    assert kept["i"]["encrypted_content"] == "gAAAA-opaque"
    assert roundtrip(step) == step


def test_default_shapes_carry_no_metadata() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    messages = items_to_messages(items)
    assert [dict(m.metadata) for m in messages] == [{}, {}, {}, {}]
    assert roundtrip(items) == items


def test_messages_from_other_writers_get_default_items() -> None:
    from storage.message import ChatMessage, ToolCall

    assistant = ChatMessage("assistant", None, [ToolCall("c1", "f", '{"a": 1}')])
    tool = ChatMessage("tool", "r", tool_call_id="c1")
    summary = ChatMessage("system", "Summary: ...", metadata={"chatlayers": {"summary": True}})
    assert message_to_items(summary) == [{"role": "system", "content": "Summary: ..."}]
    assert message_to_items(assistant) == [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'}
    ]
    assert message_to_items(tool) == [
        {"type": "function_call_output", "call_id": "c1", "output": "r"}
    ]


def test_non_dict_item_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="item 1"):
        items_to_messages([{"role": "user", "content": "hi"}, "oops"])  # type: ignore[list-item]


# Hypothesis: arbitrary sequences of the SDK's shapes with arbitrary text round-trip exactly.
texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)
ids = st.text("abcdef0123456789_", min_size=1, max_size=8)


@st.composite
def items_strategy(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "user",
                "easy",
                "system",
                "developer",
                "output",
                "call",
                "result",
                "result_parts",
                "reasoning",
                "web",
                "ref",
            ]
        )
    )
    text = draw(texts)
    if kind == "user":
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
    if kind == "easy":
        return {"role": draw(st.sampled_from(["user", "assistant"])), "content": text}
    if kind in ("system", "developer"):
        return {"role": kind, "content": text}
    if kind == "output":
        return text_message(text, id="msg_" + draw(ids)).model_dump(exclude_unset=True)
    if kind == "call":
        arguments = draw(st.one_of(texts, st.just(json.dumps({"q": text}))))
        item = {
            "type": "function_call",
            "call_id": draw(ids),
            "name": draw(ids),
            "arguments": arguments,
        }
        if draw(st.booleans()):
            item["id"] = "fc_" + draw(ids)
            item["status"] = draw(st.sampled_from(["completed", "in_progress"]))
        return item
    if kind == "result":
        return {"type": "function_call_output", "call_id": draw(ids), "output": text}
    if kind == "result_parts":
        return {
            "type": "function_call_output",
            "call_id": draw(ids),
            "output": [{"type": "input_text", "text": text}],
        }
    if kind == "reasoning":
        return reasoning(text).model_dump(exclude_unset=True)
    if kind == "web":
        return {
            "type": "web_search_call",
            "id": "ws_" + draw(ids),
            "status": "completed",
            "action": {"type": "search", "query": text},
        }
    return {"type": "item_reference", "id": draw(ids)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(items_strategy(), max_size=12))
def test_any_item_sequence_round_trips(items: list[dict[str, Any]]) -> None:
    assert roundtrip(items) == items


# --- the Session protocol on a real store --------------------------------------------------


@pytest.mark.anyio
async def test_session_protocol_on_sqlite(tmp_path: Path) -> None:
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:
        session = OpenAIAgentsSession(store, KEY)
        assert isinstance(session, Session)
        assert session.session_id == "session-1"
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items(as_items(REAL_SHAPES[:9]))
        await session.add_items(as_items(REAL_SHAPES[9:]))
        assert await session.get_items() == REAL_SHAPES
        for limit in range(len(REAL_SHAPES) + 2):
            assert await session.get_items(limit) == (REAL_SHAPES[-limit:] if limit else []), limit
        assert await session.get_items(-1) == REAL_SHAPES
        # Another agent of the same session stays apart.
        other = OpenAIAgentsSession(store, ChatKey("user-1", "session-1", "other"))
        await other.add_items([{"role": "user", "content": "elsewhere"}])
        await session.clear_session()
        assert await session.get_items() == []
        assert await other.get_items() == [{"role": "user", "content": "elsewhere"}]


@pytest.mark.anyio
async def test_pop_item_removes_newest_items_one_by_one() -> None:
    store = InMemoryChatStorage()
    session = OpenAIAgentsSession(store, KEY)
    await session.add_items(as_items(REAL_SHAPES))
    remaining = list(REAL_SHAPES)
    while remaining:
        assert await session.pop_item() == remaining.pop()
        assert await session.get_items() == remaining
    assert await session.pop_item() is None
    # The other agents of the session are untouched by a pop.
    other = ChatKey("user-1", "session-1", "other")
    await store.save_messages(other, items_to_messages([{"role": "user", "content": "x"}]))
    await session.add_items(as_items(REAL_SHAPES[:3]))
    await session.pop_item()
    assert len(await store.fetch(other)) == 1


@pytest.mark.anyio
async def test_session_settings_limit_is_the_default() -> None:
    session = OpenAIAgentsSession(
        InMemoryChatStorage(), KEY, session_settings=SessionSettings(limit=2)
    )
    await session.add_items(as_items(REAL_SHAPES))
    assert await session.get_items() == REAL_SHAPES[-2:]
    assert await session.get_items(3) == REAL_SHAPES[-3:]


@pytest.mark.anyio
async def test_a_bad_batch_stores_nothing() -> None:
    session = OpenAIAgentsSession(InMemoryChatStorage(), KEY)
    await session.add_items([{"role": "user", "content": "kept"}])
    bad = [{"role": "user", "content": "a"}, {"type": "x", "v": b"bytes"}]  # not an SDK item
    with pytest.raises(InvalidMessageError):
        await session.add_items(bad)  # type: ignore[arg-type]
    assert await session.get_items() == [{"role": "user", "content": "kept"}]


# --- the SDK's Runner, persisted and resumed in a new process ------------------------------

RESUME_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from agents import Runner
    from storage.adapters.openai_agents import OpenAIAgentsSession
    from storage.message import ChatKey
    from storage.stores.sqlite import SQLiteChatStorage
    from tests.adapters.test_openai_agents import (
        NO_TRACING, ScriptedModel, text_message, weather_agent,
    )

    async def main():
        async with SQLiteChatStorage(sys.argv[1]) as store:
            session = OpenAIAgentsSession(store, ChatKey("user-1", "session-1", "assistant"))
            model = ScriptedModel([[text_message("Tomorrow too.", id="msg_3")]])
            result = await Runner.run(
                weather_agent(model), "And tomorrow?", session=session, run_config=NO_TRACING
            )
            print(json.dumps({"output": result.final_output, "input": model.inputs[0]}))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner is asyncio-only
@pytest.mark.anyio
async def test_runner_tool_run_persists_and_resumes_in_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    model = ScriptedModel(
        [
            [reasoning("needs a tool"), function_call("get_weather", '{"city":"Paris"}', "call_1")],
            [text_message("It is sunny in Paris.", id="msg_2")],
        ]
    )
    async with SQLiteChatStorage(path) as store:
        session = OpenAIAgentsSession(store, KEY)
        result = await Runner.run(
            weather_agent(model), "Weather in Paris?", session=session, run_config=NO_TRACING
        )
        assert result.final_output == "It is sunny in Paris."
        items = as_dicts(await session.get_items())
        # The second model call saw the tool call and its output.
        assert {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "sunny in Paris",
        }.items() <= model.inputs[1][-1].items()
    assert [i.get("type", "message") for i in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[0] == {"content": "Weather in Paris?", "role": "user"}
    assert items[2]["call_id"] == "call_1"
    assert items[2]["arguments"] == '{"city":"Paris"}'
    assert items[3]["output"] == "sunny in Paris"
    assert items[4]["content"][0]["text"] == "It is sunny in Paris."

    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = await anyio.run_process(
        [sys.executable, "-c", RESUME_SCRIPT, str(path)], cwd=REPO, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    resumed = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert resumed["output"] == "Tomorrow too."
    # The new process's model input is the whole earlier run, then the new question.
    assert resumed["input"][:5] == json.loads(json.dumps(items))
    assert resumed["input"][5] == {"content": "And tomorrow?", "role": "user"}

    async with SQLiteChatStorage(path) as store:
        final = as_dicts(await OpenAIAgentsSession(store, KEY).get_items())
    assert final[:5] == items
    assert len(final) == 7
    assert final[6]["content"][0]["text"] == "Tomorrow too."


class _ReplaceSpy(InMemoryChatStorage):
    """A memory store with an atomic ``replace`` whose ``delete`` must not be used by a pop."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced: list[int] = []

    async def replace(
        self, key: ChatKey, messages: Any, *, expected_version: str | None = None
    ) -> list[Any]:
        batch = list(messages)
        if expected_version is not None and (await self.head(key)).version != expected_version:
            raise ConflictError(f"{key} changed since {expected_version}")
        await InMemoryChatStorage.delete(self, key)
        stored = await InMemoryChatStorage.save_messages(self, key, batch)
        self.replaced.append(len(batch))
        return stored

    async def save_messages_if(self, key: ChatKey, messages: Any, *, expected_version: str) -> Any:
        raise NotImplementedError

    async def delete(self, key: ChatKey) -> None:
        raise AssertionError("pop_item deleted instead of replacing")


@pytest.mark.anyio
async def test_pop_item_uses_replace_when_the_stack_has_it() -> None:
    store = _ReplaceSpy()
    session = OpenAIAgentsSession(store, KEY)
    await session.add_items(as_items(REAL_SHAPES))
    assert await session.pop_item() == REAL_SHAPES[-1]
    assert await session.get_items() == REAL_SHAPES[:-1]
    assert store.replaced, "pop_item did not call replace"


class _CrashingSave(ChatStorageWrapper):
    """A layer without ``replace``: the fallback is delete then save; a failing save loses
    the key."""

    fail = False

    async def save_messages(self, key: ChatKey, messages: Any) -> Any:
        if self.fail:
            raise OSError("disk full")
        return await super().save_messages(key, messages)


@pytest.mark.anyio
async def test_pop_item_falls_back_to_delete_and_save_without_replace() -> None:
    store = _CrashingSave(InMemoryChatStorage())
    session = OpenAIAgentsSession(store, KEY)
    await session.add_items(as_items(REAL_SHAPES[:3]))
    assert await session.pop_item() == REAL_SHAPES[2]
    assert await session.get_items() == REAL_SHAPES[:2]
    # The documented risk of the fallback: a failure between the two steps.
    store.fail = True
    with pytest.raises(OSError, match="disk full"):
        await session.pop_item()
    assert await session.get_items() == []
