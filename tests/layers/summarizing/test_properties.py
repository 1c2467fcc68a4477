"""Raw stays raw: whatever mix of saves, fetches, restarts, two instances,
compactions and failing summarizers, the raw record is exactly what was saved, the view ends
with every message saved after the checkpoint, and the checkpoint covers only held messages."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import InvalidArgumentError, SummarizerError
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.cutting import view_form
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from tests.layers.summarizing.test_layer import FakeSummarizer

KEY = ChatKey("u", "s", "a")

instance = st.integers(0, 1)
operation = st.one_of(
    st.tuples(
        st.just("save"),
        instance,
        st.lists(st.sampled_from(["user", "assistant", "tool-turn"]), min_size=1, max_size=3),
    ),
    st.tuples(st.just("fetch"), instance, st.none() | st.integers(0, 6)),
    st.tuples(st.just("restart"), instance, st.none()),
    st.tuples(st.just("fail"), st.booleans(), st.none()),
    st.tuples(st.just("compact"), instance, st.none()),
)


def is_suffix(part: list[ChatMessage], whole: list[ChatMessage]) -> bool:
    return not part or whole[-len(part) :] == part


class Scenario:
    """Two summarizing instances over one store, one fake summarizer, and what was saved."""

    def __init__(self, trigger_at: int, keep_last: int, on_error: str, coherence: str) -> None:
        self.trigger_at, self.keep_last = trigger_at, keep_last
        self.on_error, self.coherence = on_error, coherence
        self.store = InMemoryChatStorage()
        self.fake = FakeSummarizer()
        self.layers = [self.make(), self.make()]
        self.saved: list[ChatMessage] = []
        self.counter = 0

    def make(self) -> SummarizingChatStorage:
        return SummarizingChatStorage(
            self.store,
            self.fake,
            trigger_at=self.trigger_at,
            keep_last=self.keep_last,
            on_error=self.on_error,  # type: ignore[arg-type]
            coherence=self.coherence,  # type: ignore[arg-type]
            retry_backoff=0.0,
        )

    def batch(self, kinds: list[str]) -> list[ChatMessage]:
        batch: list[ChatMessage] = []
        for kind in kinds:
            self.counter += 1
            if kind == "tool-turn":
                cid = f"call{self.counter % 3}"
                batch += [
                    ChatMessage("assistant", None, (ToolCall(cid, "f", "{}"),)),
                    ChatMessage("tool", f"r{self.counter}", tool_call_id=cid),
                ]
            else:
                batch.append(ChatMessage(kind, f"m{self.counter}"))
        return batch

    async def apply(self, op: str, who: Any, arg: Any) -> list[ChatMessage] | None:
        """Run one operation; the view when it was a fetch that succeeded."""
        if op == "save":
            batch = self.batch(arg)
            try:
                await self.layers[who].save_messages(KEY, batch)
            except SummarizerError:
                assert self.on_error == "raise"
            self.saved += batch  # stored before the summarizer ran, whatever it did
        elif op == "fetch":
            try:
                view: list[ChatMessage] = await self.layers[who].fetch(KEY, limit=arg)
                return view
            except SummarizerError:
                assert self.on_error == "raise"
        elif op == "restart":
            self.layers[who] = self.make()
        elif op == "fail":
            self.fake.fail = RuntimeError("model down") if who else None
        else:
            with contextlib.suppress(SummarizerError, InvalidArgumentError):
                await self.layers[who].compact(KEY)
        return None

    async def check_record(self) -> tuple[list[ChatMessage], Any, Any]:
        """The raw record is exactly what was saved, and the checkpoint covers only held
        messages; returns the record, its tail from seq 0 and the checkpoint."""
        raw = await self.store.fetch(KEY)
        assert [(m.id, m.role, m.content) for m in raw] == [
            (m.id, m.role, m.content) for m in self.saved
        ]
        tail = await self.store.fetch_since(KEY, 0)
        checkpoint = await self.store.load_checkpoint(KEY)
        if checkpoint is not None:
            assert checkpoint.covers_to in tail.seqs
            assert all(m.is_summary for m in checkpoint.messages)
        return raw, tail, checkpoint

    def check_view(
        self, view: list[ChatMessage], raw: list[ChatMessage], tail: Any, checkpoint: Any
    ) -> None:
        """A whole view (no limit) against the record."""
        if self.coherence != "store":
            # A pinned instance's view still ends with the messages saved after the
            # checkpoint it started from, and never holds anything not in the record.
            order = {m.id: n for n, m in enumerate(raw)}
            body = [order[m.id] for m in view if not m.is_summary]  # KeyError: not raw
            assert body == sorted(body)
        elif checkpoint is not None:
            after = [
                m for m, s in zip(tail.messages, tail.seqs, strict=True) if s > checkpoint.covers_to
            ]
            # The view is the checkpoint (as the view shows it: no stored hold, verbatim
            # copies unmarked) + every message saved after it.
            assert view == [*view_form(checkpoint.messages), *after]
        elif self.on_error == "raise":
            assert view == raw
        else:
            # The fallback window: raw messages in order, ending with the newest; a turn cut
            # keeps its opening user message (turn_window).
            order = {m.id: n for n, m in enumerate(raw)}
            body = [order[m.id] for m in view]  # KeyError: not raw
            assert body == sorted(body)
            assert not raw or view[-1].id == raw[-1].id
            assert is_suffix(view[1:], raw) or is_suffix(view, raw)
            assert len(view) >= min(len(raw), self.trigger_at * 2) - 1


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(operation, max_size=30),
    trigger_at=st.integers(1, 3),
    keep_last=st.integers(0, 2),
    on_error=st.sampled_from(["raise", "fallback"]),
    coherence=st.sampled_from(["store", "process"]),
)
def test_property_raw_stays_raw(
    ops: list[tuple[Any, ...]], trigger_at: int, keep_last: int, on_error: str, coherence: str
) -> None:
    async def run() -> None:
        scenario = Scenario(trigger_at, keep_last, on_error, coherence)
        for op, who, arg in ops:
            view = await scenario.apply(op, who, arg)
            raw, tail, checkpoint = await scenario.check_record()
            if view is not None and op == "fetch" and arg is None:
                scenario.check_view(view, raw, tail, checkpoint)

    anyio.run(run)


@pytest.mark.parametrize("restarts", [0, 1, 3])
def test_restarts_never_summarize_again(restarts: int) -> None:
    async def run() -> None:
        store = InMemoryChatStorage()
        fake = FakeSummarizer()
        layer = SummarizingChatStorage(store, fake, trigger_at=2, keep_last=1)
        for n in range(9):
            await layer.save_messages(
                KEY, [ChatMessage("user", f"q{n}"), ChatMessage("assistant", f"a{n}")]
            )
            await layer.fetch(KEY)
        calls = len(fake.calls)
        view = await layer.fetch(KEY)
        for _ in range(restarts):
            layer = SummarizingChatStorage(store, fake, trigger_at=2, keep_last=1)
            assert await layer.fetch(KEY) == view
        assert len(fake.calls) == calls

    anyio.run(run)
