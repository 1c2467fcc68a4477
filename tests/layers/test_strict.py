"""The ``strict`` layer: raw records strict templates refuse (mid-conversation system messages
as OpenAI Agents sessions and Claude-Code-style clients save them, consecutive messages of one
role, an unanswered call at the end) served in the shape every client accepts, the raw record
untouched; and a LangGraph ``create_agent`` run (the agent sends its own system prompt)
through the checkpointer adapter with ``trigger_at=3`` whose every model call passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from storage.abilities import CheckpointStorage, SessionListing, find_ability
from storage.config import open_storage
from storage.layers.strict import StrictViewChatStorage, strict_view
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from tests.clients import refusals

KEY = ChatKey("u", "s", "a")


def claude_code_style() -> list[ChatMessage]:
    call = ToolCall("toolu_1", "read_file", '{"path": "a.py"}')
    return [
        ChatMessage("system", "You are a coding agent."),
        ChatMessage("user", "Fix a.py."),
        ChatMessage("system", "<system-reminder>Todo list is empty.</system-reminder>"),
        ChatMessage("user", "It fails on import."),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", "import os\n", tool_call_id=call.id),
        ChatMessage("assistant", "Found it."),
        ChatMessage("assistant", "Fixing now."),
        ChatMessage("developer", "Be brief."),
        ChatMessage("user", "Go on."),
        ChatMessage("assistant", None, (ToolCall("toolu_2", "edit", "{}"),)),  # interrupted
    ]


@pytest.mark.anyio
async def test_strict_view_of_a_record_strict_templates_refuse() -> None:
    raw = claude_code_style()
    assert {"qwen", "mistral"} <= set(refusals(raw))  # the record as a request: refused
    store = InMemoryChatStorage()
    layer = StrictViewChatStorage(store)
    await layer.save_messages(KEY, raw)
    view = await layer.fetch(KEY)
    assert refusals(view) == {}
    assert [m.role for m in view] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert view[0].text.startswith("You are a coding agent.")  # the prompt first, unchanged
    assert "Todo list is empty." in view[0].text
    assert "Be brief." in view[0].text
    assert view[1].text == "Fix a.py.\n\nIt fails on import."
    assert view[4].text == "Found it.\n\nFixing now."
    assert [m.id for m in await store.fetch(KEY)] == [m.id for m in raw]  # raw untouched
    chats = await layer.fetch_all_chats(KEY.user_id, KEY.session_id)
    assert [e.message.id for e in chats] == [m.id for m in raw]


def test_later_system_messages_as_user_messages_and_a_client_prompt() -> None:
    view = strict_view(claude_code_style(), later_system="user", leading="user")
    assert not any(m.role in ("system", "developer") for m in view)
    assert [m.role for m in view] == ["user", "assistant", "tool", "assistant", "user"]
    assert view[0].text.startswith("You are a coding agent.")
    with_prompt = [ChatMessage("system", "The agent's own prompt."), *view]
    assert refusals(with_prompt) == {}


@pytest.mark.anyio
async def test_strict_from_a_url_and_toml_forwards_only_what_keeps_the_view(tmp_path: Path) -> None:
    stack = open_storage(
        f"strict?later_system=user::summarize?trigger_at=2::sqlite:///{tmp_path / 'x.db'}"
    )
    strict = stack.find(StrictViewChatStorage)
    assert strict is not None
    assert strict.later_system == "user"
    # Abilities that read raw messages would bypass the view: not forwarded.
    assert find_ability(stack.inner, CheckpointStorage) is None
    assert find_ability(stack.inner, SessionListing) is not None
    config = tmp_path / "stack.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path / "y.db"}"\n\n'
        '[[layers]]\ntype = "strict"\nleading = "user"\n\n[[layers]]\ntype = "summarize"\n'
    )
    built = open_storage(config)
    found = built.find(StrictViewChatStorage)
    assert found is not None
    assert found.leading == "user"
    await stack.aclose()
    await built.aclose()


# --- LangGraph create_agent -----------------------------------------------------------------


def test_langgraph_create_agent_every_model_call_passes_the_clients() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.tools import tool
    from pydantic import Field

    from storage.adapters.langchain import to_chat_message
    from storage.adapters.langgraph import ChatlayersCheckpointer
    from storage.sync import SyncChatStorage

    class Recording(GenericFakeChatModel):
        seen: list[list[BaseMessage]] = Field(default_factory=list)

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Recording:
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            self.seen.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    @tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def replies() -> Iterator[AIMessage]:
        for n in range(100):
            if n % 2 == 0:
                yield AIMessage(
                    "",
                    tool_calls=[{"name": "lookup", "args": {"city": f"c{n}"}, "id": f"call-{n}"}],
                )
            else:
                yield AIMessage(f"It is sunny ({n}).")

    # The agent sends its own system prompt: the view's leading summary becomes a user message.
    stack = StrictViewChatStorage(
        SummarizingChatStorage(InMemoryChatStorage(), trigger_at=3, keep_last=1), leading="user"
    )
    with SyncChatStorage(stack) as sync:
        model = Recording(messages=replies())
        agent = create_agent(
            model,
            [lookup],
            system_prompt="You are a weather agent.",
            checkpointer=ChatlayersCheckpointer(sync),
        )
        config: Any = {"configurable": {"thread_id": "t", "user_id": "u"}}
        for n in range(8):
            agent.invoke({"messages": [HumanMessage(f"Weather in city {n}?")]}, config)
        summarizing = stack.inner
        assert isinstance(summarizing, SummarizingChatStorage)
        assert summarizing.summaries_made > 0
    assert len(model.seen) == 16
    refused = {}
    for n, request in enumerate(model.seen):
        view = [to_chat_message(m) for m in request]
        if found := refusals(view):
            refused[n] = found
    assert refused == {}
