"""A tool result whose call was never saved (an orphaned result in the raw record) stays in the
record but never reaches the view: it would make every client refuse the request and the
summarizer's result invalid. Both modes; cold, active, read back from another instance and
after a restart; checked by the clients' own rules (:mod:`tests.clients`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer
from tests.clients import refusals

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
Mode = Literal["store", "memory"]
MODES: list[Mode] = ["store", "memory"]
NEXT = ChatMessage("user", "Anything else?")


def layer_over(store: ChatStorage, summaries: Mode, **options: Any) -> SummarizingChatStorage:
    options.setdefault("trigger_at", 2)
    return SummarizingChatStorage(
        store, ExtractiveSummarizer(), keep_last=1, summaries=summaries, **options
    )


def turn(n: int, *, orphan: str | None = None, late: bool = False) -> list[ChatMessage]:
    """A user turn with one tool call; ``orphan``: a result answering a call never saved,
    right after the user message; ``late``: the turn's own result again after the answer."""
    call = ToolCall(f"c{n}", "get_order", f'{{"order_id": "W{n:04d}"}}')
    messages = [ChatMessage("user", f"Where is order W{n:04d}?")]
    if orphan is not None:
        messages.append(ChatMessage("tool", f'{{"order": "{orphan}"}}', tool_call_id=orphan))
    messages += [
        ChatMessage("assistant", None, (call,)),
        ChatMessage(
            "tool", f'{{"order_id": "W{n:04d}", "status": "shipped"}}', tool_call_id=call.id
        ),
        ChatMessage("assistant", f"Order W{n:04d} has shipped."),
    ]
    if late:
        messages.append(ChatMessage("tool", '{"status": "late"}', tool_call_id=call.id))
    return messages


def assert_accepted(view: list[ChatMessage]) -> None:
    """The request a client sends with ``view`` (and the user's next message, when the view
    ends with an answer) is accepted everywhere."""
    ends = view[-1].role == "assistant" and not view[-1].tool_calls
    assert refusals([*view, NEXT] if ends else view) == {}
    assert not {"ghost0", "ghost4", "ghost7"} & {m.tool_call_id for m in view}


async def save_and_check(layer: ChatStorage, messages: list[ChatMessage]) -> None:
    for message in messages:
        await layer.save(KEY, message)  # never a SummarizerError
        if message.role in ("user", "tool"):
            assert_accepted(await layer.fetch(KEY))
            assert_accepted(await layer.fetch(KEY, limit=3))


@pytest.mark.parametrize("summaries", MODES)
async def test_an_orphaned_result_is_in_the_record_never_in_the_view(summaries: Mode) -> None:
    inner = InMemoryChatStorage()
    layer = layer_over(inner, summaries)
    history = [ChatMessage("system", "You are a shop agent.")]
    history += turn(0, orphan="ghost0")  # while the key is cold, under its budget
    history += turn(1) + turn(2) + turn(3)
    history += turn(4, orphan="ghost4", late=True)  # while the view is summarized
    history += turn(5) + turn(6)
    await save_and_check(layer, history)
    assert layer.summarizer_calls > 0
    assert layer.summary_failures == 0
    # The raw record keeps every message.
    raw = await inner.fetch(KEY)
    assert [m.id for m in raw] == [m.id for m in history]
    listed = await layer.fetch_all_chats("u", "s")
    assert {"ghost0", "ghost4"} <= {a.message.tool_call_id for a in listed}
    assert sum(1 for a in listed if a.message.tool_call_id == "c4") == 2


@pytest.mark.parametrize("trigger_at", [2, 20])  # summarized at once / served as it is
@pytest.mark.parametrize("summaries", MODES)
async def test_an_orphaned_result_is_left_out_of_a_cold_view(
    summaries: Mode, trigger_at: int
) -> None:
    inner = InMemoryChatStorage()
    await inner.save_messages(KEY, turn(0) + turn(1, orphan="ghost0"))  # before the layer
    layer = layer_over(inner, summaries, trigger_at=trigger_at)
    view = await layer.fetch(KEY)
    assert_accepted(view)
    if trigger_at == 20:
        assert [m.id for m in view] == [
            m.id for m in await inner.fetch(KEY) if m.tool_call_id != "ghost0"
        ]
    await save_and_check(layer, turn(2))


async def test_another_instance_and_a_restart_leave_the_orphan_out(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    one = layer_over(SQLiteChatStorage(path), "store")
    two = layer_over(SQLiteChatStorage(path), "store")
    async with one, two:
        await save_and_check(one, turn(0) + turn(1) + turn(2))
        assert_accepted(await two.fetch(KEY))  # cached in both
        await save_and_check(one, turn(3) + turn(4, orphan="ghost4") + turn(5))
        await save_and_check(two, turn(6, orphan="ghost7"))  # read back by one
        assert_accepted(await one.fetch(KEY))
        assert one.summary_failures == two.summary_failures == 0
    async with layer_over(SQLiteChatStorage(path), "store") as restarted:
        view = await restarted.fetch(KEY)
        assert_accepted(view)
        assert view == await one_more_instance(path)


async def one_more_instance(path: Path) -> list[ChatMessage]:
    async with layer_over(SQLiteChatStorage(path), "store") as layer:
        return await layer.fetch(KEY)
