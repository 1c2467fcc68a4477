"""SummarizingChatStorage in ``summaries="memory"`` mode: one test per rule of the layer's
contract (docs/summarizing.md), and a reference-model property. Store-mode tests (checkpoints,
coherence, fleets) are in the other modules of this folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import SummarizerError
from storage.history import check_tool_pairs, last_turns_start, turn_window
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.header import header_messages
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


class FakeSummarizer:
    """Deterministic: one summary naming how many messages it replaced, then the kept turns.

    ``gate`` (an Event) makes calls wait; ``fail`` makes them raise; ``bad`` returns a result
    that breaks rule 7.
    """

    def __init__(self) -> None:
        self.calls: list[list[ChatMessage]] = []
        self.gate: anyio.Event | None = None
        self.started = anyio.Event()
        self.fail: BaseException | None = None
        self.bad: str | None = None

    async def __call__(self, history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        self.calls.append(list(history))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        start = last_turns_start(history, keep_last)
        result = [summary(f"summary of {start} messages"), *history[start:]]
        if self.bad == "orphan":
            result.insert(1, ChatMessage("tool", "orphan", tool_call_id="nowhere"))
        elif self.bad == "dropped-turn":
            result = result[:1]
        elif self.bad == "role":
            result[0] = ChatMessage("narrator", "x")
        return result


def turn(n: int) -> list[ChatMessage]:
    return [ChatMessage("user", f"q{n}"), ChatMessage("assistant", f"a{n}")]


def pairs(count: int, start: int = 0) -> list[ChatMessage]:
    return [m for n in range(start, start + count) for m in turn(n)]


def stack(
    summarizer: FakeSummarizer, trigger_at: int = 2, keep_last: int = 1, **kw: Any
) -> tuple[SummarizingChatStorage, InMemoryChatStorage]:
    raw = InMemoryChatStorage()
    kw.setdefault("summaries", "memory")
    return SummarizingChatStorage(
        raw, summarizer, trigger_at=trigger_at, keep_last=keep_last, **kw
    ), raw


# Rule 1 -------------------------------------------------------------------------------------


async def test_rule1_cold_key_is_pure_delegation() -> None:
    fake = FakeSummarizer()
    layer, raw = stack(fake, trigger_at=3)
    stored = await layer.save_messages(KEY, pairs(3))  # 6 messages: not more than 6
    assert await layer.fetch(KEY) == stored == await raw.fetch(KEY)
    # A window of the view starts at a turn boundary (the base store's starts at a1).
    assert await layer.fetch(KEY, limit=3) == turn_window(await raw.fetch(KEY), 3) == stored[-2:]
    assert fake.calls == []
    assert not layer.is_active(KEY)


# Rule 2 -------------------------------------------------------------------------------------


async def test_rule2_activation_on_first_long_fetch_and_raw_untouched() -> None:
    fake = FakeSummarizer()
    layer, raw = stack(fake)
    stored = await layer.save_messages(KEY, pairs(3))  # 6 > 4
    view = await layer.fetch(KEY)
    assert len(fake.calls) == 1
    assert fake.calls[0] == stored
    assert view[0].is_summary
    assert view[1:] == stored[-2:]
    assert await raw.fetch(KEY) == stored  # the inner store is never written by summarizing
    assert layer.summaries_made == 1


async def test_rule2_concurrent_cold_fetches_call_summarizer_once() -> None:
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    layer, _ = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    views: list[list[ChatMessage]] = []

    async def fetch() -> None:
        views.append(await layer.fetch(KEY))

    async with anyio.create_task_group() as tg:
        tg.start_soon(fetch)
        tg.start_soon(fetch)
        await fake.started.wait()
        await anyio.sleep(0.01)
        fake.gate.set()
    assert len(fake.calls) == 1
    assert views[0] == views[1]
    assert views[0][0].is_summary


async def test_rule2_failed_activation_stays_cold_and_retries() -> None:
    fake = FakeSummarizer()
    fake.fail = RuntimeError("LLM down")
    layer, raw = stack(fake)
    stored = await layer.save_messages(KEY, pairs(3))
    with pytest.raises(SummarizerError):
        await layer.fetch(KEY)
    assert not layer.is_active(KEY)
    fake.fail = None
    view = await layer.fetch(KEY)
    assert len(fake.calls) == 2
    assert view[0].is_summary
    assert await raw.fetch(KEY) == stored


# Rule 3 -------------------------------------------------------------------------------------


async def test_rule3_active_save_appends_and_resummarizes() -> None:
    fake = FakeSummarizer()
    layer, raw = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)  # active: [summary, q2, a2]
    new = await layer.save(KEY, ChatMessage("user", "q3"))
    assert (await layer.fetch(KEY))[-1] == new[0]
    assert len(fake.calls) == 1
    await layer.save(KEY, ChatMessage("assistant", "a3"))  # 4 after the leading summary
    assert len(fake.calls) == 1
    await layer.save(KEY, ChatMessage("user", "q4"))  # 5 > 4: summarize at once
    assert len(fake.calls) == 2
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    assert [m.text for m in view[1:]] == ["q4"]
    assert fake.calls[1][0].is_summary  # the prior summary is passed on
    assert len(await raw.fetch(KEY)) == 9
    window = await layer.fetch(KEY, limit=1)  # the leading summary, then the newest turn
    assert window[0].is_summary
    assert [m.text for m in window[1:]] == ["q4"]


async def test_rule3_buffer_holds_what_inner_returned() -> None:
    fake = FakeSummarizer()

    def upper(message: ChatMessage, key: ChatKey) -> ChatMessage:
        return ChatMessage(message.role, str(message.content).upper(), id=message.id)

    raw = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        TransformingChatStorage(raw, upper), fake, trigger_at=2, keep_last=1, summaries="memory"
    )
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    await layer.save(KEY, ChatMessage("user", "secret lower"))
    assert (await layer.fetch(KEY))[-1].text == "SECRET LOWER"
    assert all(m.text == m.text.upper() for h in fake.calls for m in h if not m.is_summary)


# Rule 4 -------------------------------------------------------------------------------------


async def test_rule4_fetch_all_chats_reads_raw_and_delete_drops_buffers() -> None:
    fake = FakeSummarizer()
    layer, _raw = stack(fake)
    stored = await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    merged = await layer.fetch_all_chats("u", "s")
    assert [m.message for m in merged] == stored
    await layer.delete(KEY)
    assert not layer.is_active(KEY)
    assert await layer.fetch(KEY) == []
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    await layer.delete_user("u")
    assert not layer.is_active(KEY)
    assert await layer.fetch(KEY) == []


# Rule 5 -------------------------------------------------------------------------------------


async def test_rule5_saves_during_slow_summarizer_all_kept() -> None:
    fake = FakeSummarizer()
    layer, raw = stack(fake, trigger_at=2, keep_last=1)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)  # active, 3 messages in the buffer
    fake.gate = anyio.Event()
    fake.started = anyio.Event()
    late: list[ChatMessage] = []

    async def trigger() -> None:
        # 2 + 4 messages after the leading summary > 4: summarizes, waits on the gate
        await layer.save_messages(KEY, pairs(2, start=10))

    async with anyio.create_task_group() as tg:
        tg.start_soon(trigger)
        await fake.started.wait()
        for n in range(20, 23):
            late += await layer.save(KEY, ChatMessage("user", f"late {n}"))
        # the buffer already shows them while the summarizer runs
        assert (await layer.fetch(KEY))[-3:] == late
        fake.gate.set()
    view = await layer.fetch(KEY)
    assert view[-3:] == late
    assert len(fake.calls) >= 2
    assert len(await raw.fetch(KEY)) == 6 + 4 + 3


async def test_rule5_saves_during_slow_activation_kept() -> None:
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    layer, _ = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    late: list[ChatMessage] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(layer.fetch, KEY)
        await fake.started.wait()
        late += await layer.save(KEY, ChatMessage("user", "during activation"))
        fake.gate.set()
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    assert view[-1] == late[0]


# Rule 6 -------------------------------------------------------------------------------------


async def test_rule6_failing_summarizer_loses_nothing_and_retries() -> None:
    fake = FakeSummarizer()
    layer, raw = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    before = await layer.fetch(KEY)
    fake.fail = ConnectionError("rate limited")
    with pytest.raises(SummarizerError) as info:
        await layer.save_messages(KEY, pairs(2, start=7))  # 6 after the summary > 4
    assert isinstance(info.value.__cause__, ConnectionError)
    view = await layer.fetch(KEY)
    assert view[: len(before)] == before
    assert [m.text for m in view[len(before) :]] == ["q7", "a7", "q8", "a8"]
    assert [m.text for m in await raw.fetch(KEY)][-4:] == ["q7", "a7", "q8", "a8"]
    fake.fail = None
    await layer.save(KEY, ChatMessage("user", "q9"))  # the next trigger retries
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    assert [m.text for m in view[1:]] == ["q9"]
    assert layer.summary_failures == 1


async def test_rule6_timeout_is_a_failure() -> None:
    fake = FakeSummarizer()
    fake.gate = anyio.Event()  # never set
    layer, raw = stack(fake, timeout=0.05)
    stored = await layer.save_messages(KEY, pairs(3))
    with pytest.raises(SummarizerError, match="timed out"):
        await layer.fetch(KEY)
    assert not layer.is_active(KEY)
    assert await raw.fetch(KEY) == stored


# Rule 7 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["orphan", "dropped-turn", "role"])
async def test_rule7_bad_result_refused_buffer_unchanged(bad: str) -> None:
    fake = FakeSummarizer()
    layer, _ = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    await layer.save_messages(KEY, [ChatMessage("user", "q5"), ChatMessage("assistant", "a5")])
    before = await layer.fetch(KEY)  # 4 after the leading summary: at the trigger
    fake.bad = bad
    with pytest.raises(SummarizerError):
        await layer.save(KEY, ChatMessage("user", "q6"))
    assert await layer.fetch(KEY) == [*before, (await layer.fetch(KEY))[-1]]
    assert (await layer.fetch(KEY))[-1].text == "q6"


async def test_rule7_activation_with_bad_result_stays_cold() -> None:
    fake = FakeSummarizer()
    fake.bad = "orphan"
    layer, _raw = stack(fake)
    await layer.save_messages(KEY, pairs(3))
    with pytest.raises(SummarizerError, match="tool result"):
        await layer.fetch(KEY)
    assert not layer.is_active(KEY)


# Rule 8 -------------------------------------------------------------------------------------


async def test_rule8_buffers_bounded_lru_and_restart_is_cold(tmp_path: Path) -> None:
    fake = FakeSummarizer()
    raw = SQLiteChatStorage(tmp_path / "db.sqlite")
    layer = SummarizingChatStorage(
        raw, fake, trigger_at=2, keep_last=1, max_buffers=2, summaries="memory"
    )
    keys = [ChatKey("u", "s", f"agent{n}") for n in range(3)]
    for key in keys:
        await layer.save_messages(key, pairs(3))
        await layer.fetch(key)
    assert [layer.is_active(k) for k in keys] == [False, True, True]
    calls = len(fake.calls)
    view = await layer.fetch(keys[0])  # cold again: summarizes once more
    assert view[0].is_summary
    assert len(fake.calls) == calls + 1
    # a new instance (a restart) starts cold and summarizes once on the first long fetch
    restarted = SummarizingChatStorage(raw, fake, trigger_at=2, keep_last=1, summaries="memory")
    assert not restarted.is_active(keys[1])
    await restarted.fetch(keys[1])
    await restarted.fetch(keys[1])
    assert len(fake.calls) == calls + 2
    await raw.aclose()


async def test_tool_turns_never_split_by_summary() -> None:
    fake = FakeSummarizer()
    layer, _ = stack(fake, trigger_at=2, keep_last=1)
    messages = [
        *pairs(2),
        ChatMessage("user", "book"),
        ChatMessage("assistant", None, (ToolCall("c1", "book", "{}"),)),
        ChatMessage("tool", "ok", tool_call_id="c1"),
        ChatMessage("assistant", "booked"),
    ]
    await layer.save_messages(KEY, messages)
    view = await layer.fetch(KEY)
    assert [m.role for m in view] == ["system", "user", "assistant", "tool", "assistant"]
    # The leading summary, then the turn's request and its newest group that fit in 2.
    assert [m.role for m in await layer.fetch(KEY, limit=2)] == ["system", "user", "assistant"]


def test_bad_parameters_refused() -> None:
    with pytest.raises(ValueError, match="trigger_at"):
        SummarizingChatStorage(InMemoryChatStorage(), FakeSummarizer(), trigger_at=0)
    with pytest.raises(ValueError, match="keep_last"):
        SummarizingChatStorage(InMemoryChatStorage(), FakeSummarizer(), keep_last=-1)


# Property: the stack behaves like a small reference model ---------------------------------


class Reference:
    """What the summarizing stack must show: the raw log, and a buffer summarized like Fake."""

    def __init__(self, trigger_at: int, keep_last: int) -> None:
        self.raw: list[ChatMessage] = []
        self.buffer: list[ChatMessage] | None = None
        self.threshold = trigger_at * 2
        self.keep_last = keep_last
        # A summary that leaves the view over the trigger holds the key until this much more
        # arrived (no retry on every save), or a new turn started in its tail.
        self.step = max(1, self.threshold - max(1, self.threshold // 4))
        self.hold = 0
        self.hold_turns = 0
        # Set once a compaction met a newest turn over the trigger on its own (two groups or
        # more): it cuts between tool-call groups, which this model does not follow; the
        # layer is then checked against store mode only.
        self.long_turn = False

    @staticmethod
    def turns(buffer: list[ChatMessage]) -> int:
        return sum(1 for m in buffer if m.role == "user" and not m.is_summary)

    @staticmethod
    def size(buffer: list[ChatMessage]) -> int:
        """Pairs count the messages after the leading summary."""
        return len(buffer) - 1 if buffer and buffer[0].role == "system" else len(buffer)

    def summarize(self, history: list[ChatMessage]) -> list[ChatMessage]:
        items = [m for m in history if not m.is_summary]
        users = [i for i, m in enumerate(items) if m.role == "user"]
        newest = items[users[-1] if users else 0 :]
        if len(newest) > self.threshold and sum(m.role == "assistant" for m in newest) >= 2:
            self.long_turn = True
        if self.keep_last and (len(users) < self.keep_last or users[-self.keep_last] == 0):
            return list(history)  # the kept turns are all there is: nothing to cut
        start = last_turns_start(history, self.keep_last)
        result = [summary(f"summary of {start} messages"), *history[start:]]
        over = self.size(result) > self.threshold
        self.hold = self.size(result) + self.step if over else 0
        self.hold_turns = self.turns(result)
        return result

    def save(self, stored: list[ChatMessage]) -> None:
        self.raw += stored
        if self.buffer is not None:
            self.buffer += stored
            if self.size(self.buffer) > self.threshold and (
                self.size(self.buffer) >= self.hold or self.turns(self.buffer) > self.hold_turns
            ):
                self.buffer = self.summarize(self.buffer)

    def fetch(self, limit: int | None) -> list[ChatMessage]:
        """The view: the summary framed as the view shows it, the window by turns."""
        if self.buffer is None:
            if len(self.raw) <= self.threshold:
                return turn_window(self.raw, limit)
            self.buffer = self.summarize(self.raw)
        view = list(self.buffer)
        made = next((n for n, m in enumerate(view) if not m.is_summary), len(view))
        if made:  # every leading summary in the one leading message
            view[:made] = header_messages(None, view[:made])
        return turn_window(view, limit)


operation = st.one_of(
    st.tuples(
        st.just("save"),
        st.lists(st.sampled_from(["user", "assistant", "tool-turn"]), min_size=1, max_size=3),
    ),
    st.tuples(st.just("fetch"), st.none() | st.integers(0, 8)),
)


def texts(messages: list[ChatMessage]) -> list[object]:
    return [(m.role, m.content if not m.is_summary else "SUMMARY:" + m.text) for m in messages]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(operation, max_size=25), trigger_at=st.integers(1, 4), keep_last=st.integers(0, 2)
)
def test_property_matches_reference_model(
    ops: list[tuple[str, object]], trigger_at: int, keep_last: int
) -> None:
    async def run() -> None:
        fake = FakeSummarizer()
        raw = InMemoryChatStorage()
        layer = SummarizingChatStorage(
            raw, fake, trigger_at=trigger_at, keep_last=keep_last, summaries="memory"
        )
        model = Reference(trigger_at, keep_last)
        counter = 0
        for op, arg in ops:
            if op == "save":
                batch: list[ChatMessage] = []
                assert isinstance(arg, list)
                for kind in arg:
                    counter += 1
                    if kind == "tool-turn":
                        cid = f"call{counter % 3}"  # ids reused across turns, as in real data
                        batch += [
                            ChatMessage("assistant", None, (ToolCall(cid, "f", "{}"),)),
                            ChatMessage("tool", f"r{counter}", tool_call_id=cid),
                        ]
                    else:
                        batch.append(ChatMessage(str(kind), f"m{counter}"))
                stored = await layer.save_messages(KEY, batch)
                assert [m.id for m in stored] == [m.id for m in batch]
                model.save(stored)
            else:
                assert arg is None or isinstance(arg, int)
                limit = arg
                view = await layer.fetch(KEY, limit=limit)
                expected = model.fetch(limit)
                if not model.long_turn:
                    assert texts(view) == texts(expected)
                else:  # cut between groups (tests/layers/summarizing/test_agent_traffic.py)
                    check_tool_pairs(view)
                    raw_ids = [m.id for m in model.raw]
                    after = [m.id for m in view if not m.is_summary]
                    assert after == [i for i in raw_ids if i in set(after)]  # raw, in order
            # the raw store always holds exactly what was saved
            assert await raw.fetch(KEY) == model.raw

    anyio.run(run)


async def test_over_real_scrubber_buffer_and_summarizer_see_scrubbed_text_only(
    tmp_path: Path,
) -> None:
    from storage.pii import PIIScrubber

    fake = FakeSummarizer()
    raw = SQLiteChatStorage(tmp_path / "db.sqlite")
    layer = SummarizingChatStorage(
        TransformingChatStorage(raw, PIIScrubber(secret="s")),
        fake,
        trigger_at=2,
        keep_last=1,
        summaries="memory",
    )
    emails = [f"person{n}@example.org" for n in range(5)]
    for n, email in enumerate(emails[:3]):
        await layer.save(KEY, ChatMessage("user", f"I am {email}"))
        await layer.save(KEY, ChatMessage("assistant", f"noted {n}"))
    await layer.fetch(KEY)  # activation
    for email in emails[3:]:
        await layer.save(KEY, ChatMessage("user", f"also {email}"))
    seen = repr(fake.calls) + repr(await layer.fetch(KEY))
    assert fake.calls
    assert "<EMAIL_ADDRESS_" in seen
    for email in emails:
        assert email not in seen
    await raw.aclose()
