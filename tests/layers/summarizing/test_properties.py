"""Raw stays raw (issue 12 item 8): whatever mix of saves, fetches, restarts, two instances,
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
        store = InMemoryChatStorage()
        fake = FakeSummarizer()

        def make() -> SummarizingChatStorage:
            return SummarizingChatStorage(
                store,
                fake,
                trigger_at=trigger_at,
                keep_last=keep_last,
                on_error=on_error,  # type: ignore[arg-type]
                coherence=coherence,  # type: ignore[arg-type]
                retry_backoff=0.0,
            )

        layers = [make(), make()]
        saved: list[ChatMessage] = []
        counter = 0
        for op, who, arg in ops:
            view: list[ChatMessage] | None = None
            if op == "save":
                batch: list[ChatMessage] = []
                for kind in arg:
                    counter += 1
                    if kind == "tool-turn":
                        cid = f"call{counter % 3}"
                        batch += [
                            ChatMessage("assistant", None, (ToolCall(cid, "f", "{}"),)),
                            ChatMessage("tool", f"r{counter}", tool_call_id=cid),
                        ]
                    else:
                        batch.append(ChatMessage(kind, f"m{counter}"))
                try:
                    await layers[who].save_messages(KEY, batch)
                except SummarizerError:
                    assert on_error == "raise"
                saved += batch  # stored before the summarizer ran, whatever it did
            elif op == "fetch":
                try:
                    view = await layers[who].fetch(KEY, limit=arg)
                except SummarizerError:
                    assert on_error == "raise"
            elif op == "restart":
                layers[who] = make()
            elif op == "fail":
                fake.fail = RuntimeError("model down") if who else None
            else:
                with contextlib.suppress(SummarizerError, InvalidArgumentError):
                    await layers[who].compact(KEY)
            # The raw record is exactly what was saved, in order.
            raw = await store.fetch(KEY)
            assert [(m.id, m.role, m.content) for m in raw] == [
                (m.id, m.role, m.content) for m in saved
            ]
            tail = await store.fetch_since(KEY, 0)
            checkpoint = await store.load_checkpoint(KEY)
            if checkpoint is not None:
                # The checkpoint covers only messages the raw record holds.
                assert checkpoint.covers_to in tail.seqs
                assert all(m.is_summary for m in checkpoint.messages)
            if view is None or op != "fetch" or arg is not None:
                continue
            after = [
                m
                for m, s in zip(tail.messages, tail.seqs, strict=True)
                if checkpoint is None or s > checkpoint.covers_to
            ]
            if coherence == "store":
                if checkpoint is not None:
                    # The view is the checkpoint (as the view shows it: no stored hold,
                    # verbatim copies unmarked) + every message saved after it.
                    assert view == [*view_form(checkpoint.messages), *after]
                elif on_error == "raise":
                    assert view == raw
                else:
                    assert is_suffix(view, raw)
                    assert len(view) >= min(len(raw), trigger_at * 2) - 1
            else:
                # A pinned instance's view still ends with the messages saved after the
                # checkpoint it started from, and never holds anything not in the record.
                order = {m.id: n for n, m in enumerate(raw)}
                body = [order[m.id] for m in view if not m.is_summary]  # KeyError: not raw
                assert body == sorted(body)

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
