"""Summarizing that fits agent traffic: long agent turns compressed by tool-call
groups (13.1), token budgets counted incrementally (13.2), tool-output trimming in the view
(13.3), and options from URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import storage.tokens
import summarizers.tokens
from storage import open_storage
from storage.errors import ConfigError
from storage.history import check_tool_pairs
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.header import FRAME, SEPARATOR
from storage.layers.summarizing.options import Summaries
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer
from summarizers.tokens import count_tokens

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
SYSTEM = ChatMessage("system", "You are an autonomous programmer. Use the tools.")
REQUEST = ChatMessage("user", "The test test_parser fails. Please fix parser.py.")


def group(n: int, output: str | None = None) -> list[ChatMessage]:
    """One tool-call group: an assistant call and its result."""
    call = ToolCall(f"call_{n}", "bash", f'{{"cmd": "grep -n step{n} parser.py"}}')
    return [
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", output or f"parser.py:{n}: step{n} ok", tool_call_id=call.id),
    ]


def agent_turn(groups: int) -> list[ChatMessage]:
    """The SWE-agent shape: a system prompt, one request, then ``groups`` tool calls."""
    return [SYSTEM, REQUEST, *[m for n in range(groups) for m in group(n)]]


class Counting:
    """The extractive summarizer, counting calls; ``stuck`` returns the input unchanged (a
    summarizer that cannot shrink anything)."""

    def __init__(self, *, stuck: bool = False) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0
        self.stuck = stuck

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        self.calls += 1
        if self.stuck:
            return list(buffer)
        return await self.inner(buffer, keep_last)


def assert_group_view(view: list[ChatMessage]) -> None:
    """One leading message (the pinned prompt unchanged, then the summary), then the request
    verbatim, no split group."""
    assert (view[0].id, view[0].role) == (SYSTEM.id, "system")
    assert view[0].is_summary
    assert isinstance(SYSTEM.content, str)
    assert view[0].text.startswith(SYSTEM.content + SEPARATOR)
    assert FRAME in view[0].text
    assert "<conversation_summary>" in view[0].text
    assert (view[1].id, view[1].role, view[1].content) == (REQUEST.id, "user", REQUEST.content)
    assert view[2].role == "assistant"
    assert view[2].tool_calls
    check_tool_pairs(view)


# --- 13.1 long agent turns ------------------------------------------------------------------


MODES = pytest.mark.parametrize("summaries", ["store", "memory"])


@MODES
async def test_the_600_pair_agent_turn_stays_bounded_with_bounded_calls(
    summaries: Summaries,
) -> None:
    """Without group compaction: 1,200 calls, no summary, a buffer of 1,221 messages. Bound (see the
    layer's docstring): at most ``n // (threshold - keep - 1) + 1`` calls (the opener is the
    one message after the header a compaction keeps besides the kept groups). Memory mode
    cuts alike (before, it summarized whole turns only: one turn stayed whole)."""
    summarizer = Counting()
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(base, summarizer, trigger_at=5, summaries=summaries)
    history = agent_turn(600)
    largest = 0
    for message in history:
        await layer.save(KEY, message)
        view = await layer.fetch(KEY)
        largest = max(largest, len(view))
        check_tool_pairs(view)
    assert largest <= 10 + 1  # the budget: trigger_at * 2 messages after the leading one
    assert summarizer.calls <= len(history) // (10 - 2 - 1) + 1
    assert layer.summaries_made == summarizer.calls > 100
    assert_group_view(view)
    assert [m.id for m in view[-2:]] == [m.id for m in history[-2:]]  # newest group verbatim
    assert "step599" not in view[0].text
    assert "bash" in view[0].text
    assert [m.id for m in await base.fetch(KEY)] == [m.id for m in history]  # raw untouched


async def test_group_checkpoints_survive_a_restart_over_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first = SummarizingChatStorage(SQLiteChatStorage(path), Counting(), trigger_at=5)
    history = agent_turn(40)
    for message in history:
        await first.save(KEY, message)
    view = await first.fetch(KEY)
    assert_group_view(view)
    await first.aclose()
    summarizer = Counting()
    second = SummarizingChatStorage(SQLiteChatStorage(path), summarizer, trigger_at=5)
    try:
        assert await second.fetch(KEY) == view  # the checkpoint, verbatim copies included
        assert summarizer.calls == 0
        more = group(40)
        await second.save_messages(KEY, more)
        assert [m.id for m in (await second.fetch(KEY))[-2:]] == [m.id for m in more]
    finally:
        await second.aclose()


async def test_a_new_user_turn_summarizes_the_long_turn_and_drops_its_copy() -> None:
    layer = SummarizingChatStorage(InMemoryChatStorage(), Counting(), trigger_at=5, keep_last=1)
    for message in agent_turn(12):
        await layer.save(KEY, message)
    assert_group_view(await layer.fetch(KEY))
    follow_up = [
        ChatMessage("user", "Now run the whole suite."),
        *group(96),
        *group(97),
        *group(98),
        *group(99),
    ]
    for message in follow_up:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert view[0].id == SYSTEM.id
    assert view[0].is_summary
    assert REQUEST.id not in {m.id for m in view}  # its turn is summarized now
    assert "fix parser.py" in view[0].text.lower()
    assert [m.id for m in view[1:]] == [m.id for m in follow_up]


async def test_a_result_that_cannot_shrink_is_not_retried_on_every_save() -> None:
    stuck = Counting(stuck=True)
    layer = SummarizingChatStorage(InMemoryChatStorage(), stuck, trigger_at=5)
    await layer.save_messages(KEY, agent_turn(4))  # 10 messages: at the trigger
    await layer.fetch(KEY)
    assert stuck.calls == 0
    await layer.save_messages(KEY, group(4))  # 12 > 10: one call, nothing shrunk
    assert stuck.calls == 1
    step = 10 - max(1, 10 // 4)  # the policy's step: trigger - keep budget
    for n in range(5, 5 + step // 2 - 1):  # less new material than the step
        await layer.save_messages(KEY, group(n))
        await layer.fetch(KEY)
    assert stuck.calls == 1
    await layer.save_messages(KEY, group(50) + group(51))  # enough new material: one retry
    assert stuck.calls == 2


# --- 13.2 token budgets ---------------------------------------------------------------------


def long_output(n: int, words: int = 60) -> str:
    return " ".join(f"line{n}_{i}" for i in range(words))


@MODES
async def test_token_budget_keeps_the_view_under_trigger_tokens(summaries: Summaries) -> None:
    layer = SummarizingChatStorage(
        InMemoryChatStorage(),
        Counting(),
        trigger_tokens=1500,
        keep_tokens=400,
        summaries=summaries,
    )
    assert layer.trigger_at is None
    history = [SYSTEM, REQUEST] + [m for n in range(80) for m in group(n, long_output(n))]
    worst = 0
    for message in history:
        await layer.save(KEY, message)
        view = await layer.fetch(KEY)
        worst = max(worst, count_tokens(view))
    assert layer.summaries_made > 5
    assert worst <= 1500 + 3  # the reply primer
    assert_group_view(view)
    assert count_tokens(view[2:]) <= 400 + 200  # the kept groups: about keep_tokens


async def test_a_long_turn_held_over_the_budget_is_cut_again_at_its_next_group(
    tmp_path: Path,
) -> None:
    # A result over the budget on its own holds the key after its cut (the newest group always
    # stays); the next group, though far less than the hold's step, lets it be summarized.
    path = tmp_path / "chats.db"
    counting = Counting()
    layer = SummarizingChatStorage(SQLiteChatStorage(path), counting, trigger_tokens=1500)
    huge = group(1, long_output(1, words=420))
    assert count_tokens(huge) > 1500
    await layer.save_messages(KEY, [SYSTEM, REQUEST, *group(0)])
    await layer.fetch(KEY)
    await layer.save_messages(KEY, huge)
    held = await layer.fetch(KEY)
    assert count_tokens(held) > 1500  # the cut could not get under: the key is held
    assert [m.id for m in held[-2:]] == [m.id for m in huge]
    calls = counting.calls
    small = group(2, long_output(2, words=60))
    assert count_tokens(small) < 1500 - 1500 // 4  # less than the hold's step
    await layer.save_messages(KEY, small)
    view = await layer.fetch(KEY)
    assert counting.calls == calls + 1
    calls_after_first = counting.calls
    assert count_tokens(view) <= 1500 + 3
    assert huge[1].id not in {m.id for m in view}  # summarized: its group is older now
    assert_group_view(view)
    assert [m.id for m in view[-2:]] == [m.id for m in small]
    # Another worker over the same file serves the same view, with no call of its own, and
    # takes the same decision from the stored hold: one more group, one more cut.
    other_calls = Counting()
    other = SummarizingChatStorage(SQLiteChatStorage(path), other_calls, trigger_tokens=1500)
    try:
        assert await other.fetch(KEY) == view
        assert other_calls.calls == 0
        bigger = group(3, long_output(3, words=420))
        await other.save_messages(KEY, bigger)
        await other.fetch(KEY)  # held again: the newest group is over the budget on its own
        calls = other_calls.calls
        await other.save_messages(KEY, group(4))
        last = await other.fetch(KEY)
        assert other_calls.calls == calls + 1
        assert bigger[1].id not in {m.id for m in last}
        assert count_tokens(last) <= 1500 + 3
        assert await layer.fetch(KEY) == last  # the first worker serves it too
        assert counting.calls == calls_after_first  # it made none
    finally:
        await other.aclose()
    await layer.aclose()


async def test_memory_mode_cuts_a_held_long_turn_again_at_its_next_group() -> None:
    # The same hold as above, kept in this process: released by the next tool-call group.
    counting = Counting()
    layer = SummarizingChatStorage(
        InMemoryChatStorage(), counting, trigger_tokens=1500, summaries="memory"
    )
    huge = group(1, long_output(1, words=420))
    await layer.save_messages(KEY, [SYSTEM, REQUEST, *group(0)])
    await layer.fetch(KEY)
    await layer.save_messages(KEY, huge)
    held = await layer.fetch(KEY)
    assert count_tokens(held) > 1500
    assert [m.id for m in held[-2:]] == [m.id for m in huge]
    calls = counting.calls
    small = group(2, long_output(2, words=60))
    await layer.save_messages(KEY, small)
    view = await layer.fetch(KEY)
    assert counting.calls == calls + 1
    assert count_tokens(view) <= 1500 + 3
    assert huge[1].id not in {m.id for m in view}
    assert_group_view(view)
    assert [m.id for m in view[-2:]] == [m.id for m in small]


async def test_tokens_are_counted_once_per_message_never_the_whole_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[str] = []
    real = storage.tokens._message_tokens

    def spy(message: ChatMessage, encode: Any) -> int:
        counted.append(message.id)
        return real(message, encode)

    monkeypatch.setattr(storage.tokens, "_message_tokens", spy)
    layer = SummarizingChatStorage(InMemoryChatStorage(), Counting(), trigger_tokens=100_000)
    saved: list[ChatMessage] = []
    for n in range(60):
        messages = group(n)
        saved += messages
        await layer.save_messages(KEY, messages)
        await layer.fetch(KEY)
    # Each message was measured once, not once per save (60 saves of a growing buffer would
    # measure about 3,600 messages).
    assert len(counted) == len(set(counted)) == len(saved)


def test_trigger_fraction_takes_the_context_window_offline() -> None:
    layer = SummarizingChatStorage(InMemoryChatStorage(), trigger_fraction=0.5, model="gpt-4o")
    assert layer.trigger_tokens == summarizers.tokens.context_window("gpt-4o") // 2
    assert "trigger_tokens=" in layer.describe()
    with pytest.raises(ConfigError, match="context window"):
        SummarizingChatStorage(InMemoryChatStorage(), trigger_fraction=0.5, model="no-such-model")
    with pytest.raises(ConfigError, match="not both"):
        SummarizingChatStorage(InMemoryChatStorage(), trigger_at=3, trigger_tokens=100)
    with pytest.raises(ValueError, match="keep_tokens"):
        SummarizingChatStorage(InMemoryChatStorage(), trigger_tokens=100, keep_tokens=100)


def test_budget_and_agent_options_from_a_url(tmp_path: Path) -> None:
    url = (
        "summarize?trigger_tokens=6000&keep_tokens=1500&model=gpt-4o-mini"
        f"&trim_tool_results=400&trim_keep_turns=1&background=true::sqlite:///{tmp_path / 'x.db'}"
    )
    layer = open_storage(url).find(SummarizingChatStorage)
    assert layer is not None
    assert (layer.trigger_tokens, layer.keep_tokens, layer.model) == (6000, 1500, "gpt-4o-mini")
    assert (layer.trim_tool_results, layer.trim_keep_turns, layer.background) == (400, 1, True)
    fraction = open_storage(f"summarize?trigger_fraction=0.25::sqlite:///{tmp_path / 'y.db'}")
    found = fraction.find(SummarizingChatStorage)
    assert found is not None
    assert found.trigger_tokens == 128_000 // 4


# --- 13.3 trimming --------------------------------------------------------------------------


def chat_turn(n: int, output_chars: int) -> list[ChatMessage]:
    call = ToolCall(f"t{n}", "search", f'{{"q": "flights, question {n}"}}')
    return [
        ChatMessage("user", f"Question {n}: which flights go to Paris?"),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", long_output(n, output_chars // 10), tool_call_id=call.id),
        ChatMessage("assistant", f"Answer {n}: three flights."),
    ]


async def test_trimming_shrinks_old_tool_results_without_a_summarizer_call() -> None:
    summarizer = Counting()
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        base, summarizer, trigger_tokens=3000, trim_tool_results=300, trim_keep_turns=1
    )
    history = [SYSTEM] + [m for n in range(6) for m in chat_turn(n, 2500)]
    for message in history:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert summarizer.calls == 0
    assert layer.trims_made >= 1
    assert count_tokens(view) <= 3000 + 3
    assert [m.id for m in view] == [m.id for m in history]  # same messages, no summary
    trimmed = [m for m in view if "characters of this tool result cut" in m.text]
    assert trimmed
    assert all(m.role == "tool" for m in trimmed)
    assert view[-2].text == history[-2].text  # the last turn's result stays whole
    raw = await base.fetch(KEY)
    assert [m.text for m in raw] == [m.text for m in history]  # the record untouched
    check_tool_pairs(view)


async def test_trimming_first_then_a_summary_when_trimming_is_not_enough() -> None:
    summarizer = Counting()
    layer = SummarizingChatStorage(
        InMemoryChatStorage(), summarizer, trigger_tokens=1200, trim_tool_results=200
    )
    for message in [SYSTEM] + [m for n in range(30) for m in chat_turn(n, 1500)]:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert summarizer.calls >= 1
    assert layer.summaries_made >= 1
    assert view[0].id == SYSTEM.id
    assert view[0].is_summary
    raw = await layer.inner.fetch(KEY)
    # About the budget: the summary's own size is the summarizer's (2,000 characters here).
    assert count_tokens(view) < 1500 < count_tokens(raw) // 10
