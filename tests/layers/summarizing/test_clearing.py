"""Cheapest compaction first: old tool results the summary already holds are cleared, older
results of a repeated call collapsed, then trimming, before any summarizer call; in the view
and the checkpoint only, in store and memory mode, the same view from every instance."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.facts import extract_facts
from storage.history import check_tool_pairs
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.clearing import (
    CLEARED,
    COLLAPSED,
    clear_known_results,
    cleared_reason,
    collapse_repeated_reads,
    lighten,
)
from storage.layers.summarizing.cutting import is_verbatim
from storage.layers.summarizing.trimming import trim_tool_results
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
FLIGHTS = [
    {
        "flight_number": f"HAT{100 + i}",
        "origin": "DTW",
        "destination": "JFK",
        "date": f"2024-05-{10 + i}",
        "price": 200 + i,
    }
    for i in range(8)
]


def reservation(status: str = "active") -> str:
    record = {"reservation_id": "H9ZU1C", "user_id": "mia_li_3668", "cabin": "economy"}
    return json.dumps({**record, "status": status, "flights": FLIGHTS})


def read(n: int, result: str, arguments: str = '{"reservation_id": "H9ZU1C"}') -> list[ChatMessage]:
    call = ToolCall(f"call_{n}", "get_reservation_details", arguments)
    return [
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", result, tool_call_id=call.id),
    ]


def chat(n: int) -> list[ChatMessage]:
    return [
        ChatMessage("user", f"Question {n}: is it on time? " + "Tell me more. " * 10),
        ChatMessage("assistant", f"Yes, answer {n}. " + "It is. " * 10),
    ]


SYSTEM = ChatMessage("system", "You are a travel agent.")
FIRST = [
    SYSTEM,
    ChatMessage("user", "Show my reservation H9ZU1C please."),
    *read(1, reservation()),
    ChatMessage("assistant", "Here it is."),
    *chat(1),
    *chat(2),
]


def second(status: str = "active") -> list[ChatMessage]:
    """The reservation read again, then three more turns (the budget is crossed in the
    second: the read is then older than the last two turns)."""
    return [
        ChatMessage("user", "Show it again please."),
        *read(2, reservation(status)),
        ChatMessage("assistant", "Same as before."),
        *chat(3),
        *chat(4),
        *chat(5),
    ]


class Counting:
    """The extractive summarizer, its inputs recorded."""

    def __init__(self) -> None:
        self.inputs: list[list[ChatMessage]] = []
        self._inner = ExtractiveSummarizer()

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        self.inputs.append(list(buffer))
        return await self._inner(buffer, keep_last)


def layer_over(store: Any, summarizer: Any, **options: Any) -> SummarizingChatStorage:
    options.setdefault("trigger_tokens", 1000)
    return SummarizingChatStorage(store, summarizer, **options)


def cleared_in(view: list[ChatMessage]) -> list[ChatMessage]:
    return [m for m in view if m.role == "tool" and m.metadata.get("chatlayers")]


# --- the steps ---------------------------------------------------------------------------


def summary_of(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


LEDGER = summary_of(
    "Ledger:\n- reservation H9ZU1C: user_id=mia_li_3668, cabin=economy, status=active, "
    + "flights=["
    + "; ".join(f"(DTW→JFK, {f['flight_number']}, {f['date']}, ${f['price']})" for f in FLIGHTS)
    + "]"
)


def test_a_result_is_cleared_only_when_the_summary_says_all_it_says() -> None:
    messages = [
        ChatMessage("user", "again"),
        *read(1, reservation()),  # all in the summary: cleared
        *read(2, reservation("cancelled")),  # a word the summary lacks: kept
        *read(3, json.dumps({"reservation_id": "H9ZU1C", "price": 999})),  # a new fact: kept
        *read(4, "ok"),  # no fact at all: kept
        ChatMessage("user", "and now"),
        *read(5, reservation()),  # in the last turn: kept
    ]
    out = clear_known_results(messages, [LEDGER], keep_turns=1)
    changed = [i for i, (a, b) in enumerate(zip(messages, out, strict=True)) if a is not b]
    assert changed == [2]
    cleared = out[2]
    assert cleared.content == CLEARED
    assert (cleared.id, cleared.role, cleared.tool_call_id) == (
        messages[2].id,
        "tool",
        "call_1",
    )
    assert cleared.metadata["chatlayers"]["cleared"] == "summary"
    assert cleared.metadata["chatlayers"]["trimmed_chars"] == len(reservation())
    check_tool_pairs(out)
    assert clear_known_results(out, [LEDGER], keep_turns=1) == out  # idempotent
    assert clear_known_results(messages, [], keep_turns=1) == messages  # no summary: nothing


def test_older_results_of_a_repeated_call_are_collapsed_the_newest_kept() -> None:
    older_price = json.dumps({"reservation_id": "H9ZU1C", "price": 999})
    messages = [
        ChatMessage("user", "look"),
        *read(1, reservation()),
        *read(2, reservation(), '{ "reservation_id" : "H9ZU1C" }'),  # the same arguments
        *read(3, "other", '{"reservation_id": "ZZ0000"}'),  # other arguments
        *read(4, older_price),  # a fact the newest result does not state
        ChatMessage("user", "again"),
        *read(5, reservation("cancelled")),  # the newest read, in the last turn
    ]
    out = collapse_repeated_reads(messages, keep_turns=1)
    assert [m.content for m in out if m.role == "tool"] == [
        COLLAPSED,
        COLLAPSED,
        "other",
        older_price,
        reservation("cancelled"),
    ]
    assert out[2].metadata["chatlayers"]["newer"] == messages[-1].id
    assert out[2].metadata["chatlayers"]["cleared"] == "repeated"
    check_tool_pairs(out)
    # The summary holding that fact, it goes too.
    with_price = collapse_repeated_reads(messages, [summary_of("price $999")], keep_turns=1)
    assert with_price[8].content == COLLAPSED
    # Nothing changes when the repeat is inside the protected turns only.
    assert collapse_repeated_reads(messages, keep_turns=3) == messages


def test_the_steps_run_in_order_and_a_cleared_result_is_never_trimmed_again() -> None:
    long = json.dumps({"log": "x" * 3000, "reservation_id": "H9ZU1C"})
    messages = [
        ChatMessage("user", "go"),
        *read(1, reservation()),
        *read(2, long, '{"q": 1}'),
        *read(3, long, '{"q": 1}'),
        *read(4, long, '{"q": 2}'),
        ChatMessage("user", "next"),
        ChatMessage("assistant", "done"),
    ]
    stages = lighten([LEDGER], messages, keep_turns=1, clear=True, trim_chars=500)
    assert [s.step for s in stages] == ["clear", "collapse", "trim"]
    final = stages[-1].items
    assert [m.metadata["chatlayers"].get("cleared") for m in final if m.role == "tool"] == [
        "summary",
        "repeated",
        None,  # the newest of its call: trimmed instead
        None,
    ]
    assert final[6].metadata["chatlayers"]["trimmed_chars"] > 0
    assert stages[-1].end == 9  # every changed message is before it, no call split
    assert trim_tool_results(final, keep_turns=0, max_chars=20)[2] is final[2]
    assert lighten([LEDGER], final, keep_turns=1, clear=True, trim_chars=500) == []
    assert lighten([LEDGER], messages, keep_turns=1, clear=False, trim_chars=None) == []


def test_a_cleared_copy_is_counted_as_its_own_text() -> None:
    from storage.layers.summarizing.options import SummarizingOptions
    from storage.layers.summarizing.policy import Policy

    layer = SummarizingChatStorage(InMemoryChatStorage(), trigger_tokens=1000)
    options: SummarizingOptions = layer._options
    measure = Policy.of(options).message_size()
    assert measure is not None
    messages = [ChatMessage("user", "go"), *read(1, reservation()), *read(2, reservation())]
    raw = measure(messages[2])
    trimmed = trim_tool_results(messages, keep_turns=0, max_chars=100)[2]
    collapsed = collapse_repeated_reads(messages, keep_turns=0)[2]
    cleared = clear_known_results(messages, [LEDGER], keep_turns=0)[2]
    sizes = [measure(m) for m in (trimmed, collapsed, cleared)]
    assert raw > sizes[0] > sizes[1] > sizes[2]  # one id, four texts, four counts


# --- through the layer -----------------------------------------------------------------------


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_a_result_the_summary_holds_is_cleared_without_a_summarizer_call(
    summaries: str,
) -> None:
    store = InMemoryChatStorage()
    summarizer = Counting()
    layer = layer_over(store, summarizer, summaries=summaries)
    for message in FIRST:
        await layer.save(KEY, message)
    await layer.compact(KEY)  # the summary now holds the reservation
    later = second()
    for message in later:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert len(summarizer.inputs) == 1  # only the compaction asked for
    assert (layer.clears_made, layer.collapses_made, layer.trims_made) == (1, 0, 0)
    (cleared,) = cleared_in(view)
    assert cleared.content == CLEARED
    index = view.index(cleared)
    assert view[index - 1].tool_calls[0].id == cleared.tool_call_id  # right after its call
    check_tool_pairs(view)
    assert [m.role for m in view].count("system") == 1
    raw = [(m.id, m.role, m.content, m.tool_calls) for m in await store.fetch(KEY)]
    assert raw == [(m.id, m.role, m.content, m.tool_calls) for m in [*FIRST, *later]]


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_a_result_whose_state_changed_is_not_cleared(summaries: str) -> None:
    summarizer = Counting()
    layer = layer_over(InMemoryChatStorage(), summarizer, summaries=summaries)
    for message in FIRST:
        await layer.save(KEY, message)
    await layer.compact(KEY)
    for message in second("cancelled"):
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert layer.clears_made == 0
    assert len(summarizer.inputs) == 2  # the summarizer had to make this compaction
    assert "status=cancelled" in view[0].text  # and the new state is in the summary


async def test_two_instances_over_one_store_serve_the_same_cleared_view(tmp_path: Any) -> None:
    path = tmp_path / "chats.db"
    first = layer_over(SQLiteChatStorage(path), Counting())
    other_summarizer = Counting()
    other = layer_over(SQLiteChatStorage(path), other_summarizer)
    for message in FIRST:
        await first.save(KEY, message)
    await first.compact(KEY)
    for n, message in enumerate(second()):
        await (first if n % 2 else other).save(KEY, message)  # saves through both
    view = await first.fetch(KEY)
    assert await other.fetch(KEY) == view
    assert first.clears_made + other.clears_made == 1  # one compaction, fleet-wide
    assert other_summarizer.inputs == []
    restarted = layer_over(SQLiteChatStorage(path), Counting())
    assert await restarted.fetch(KEY) == view
    assert restarted.summarizer_calls == 0
    # The stored checkpoint holds the cleared result as a verbatim copy, the format the
    # previous release reads: marked, with the trimmed_chars it counts and never trims.
    checkpoint = await restarted.inner.load_checkpoint(KEY)  # type: ignore[attr-defined]
    assert checkpoint is not None
    assert all(m.is_summary for m in checkpoint.messages)
    copies = [m for m in checkpoint.messages if m.role == "tool"]
    assert len(copies) == 1
    assert is_verbatim(copies[0])
    assert copies[0].content == CLEARED
    assert copies[0].metadata["chatlayers"]["trimmed_chars"] == len(reservation())
    raw = {m.tool_call_id: m for m in await restarted.inner.fetch(KEY) if m.role == "tool"}
    assert raw["call_2"].content == reservation()  # the record keeps the result
    for layer in (first, other, restarted):
        await layer.aclose()


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_a_repeated_read_is_collapsed_without_a_summarizer_call(summaries: str) -> None:
    summarizer = Counting()
    layer = layer_over(InMemoryChatStorage(), summarizer, summaries=summaries)
    history = [
        SYSTEM,
        ChatMessage("user", "Show my reservation H9ZU1C please."),
        *read(1, reservation()),
        ChatMessage("assistant", "Here it is."),
        *[m for n in (1, 2) for m in chat(n)],
        *second()[:-2],
    ]
    for message in history:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert summarizer.inputs == []
    assert (layer.clears_made, layer.collapses_made) == (0, 1)
    assert [m.content for m in view if m.role == "tool"] == [COLLAPSED, reservation()]
    check_tool_pairs(view)


async def test_a_pair_budget_still_calls_the_summarizer_which_reads_less() -> None:
    summarizer = Counting()
    layer = SummarizingChatStorage(InMemoryChatStorage(), summarizer, trigger_at=5)
    history = [
        SYSTEM,
        ChatMessage("user", "Show it."),
        *read(1, reservation()),
        *read(2, reservation()),
        ChatMessage("assistant", "Here it is."),
        *[m for n in (1, 2, 3) for m in chat(n)],
    ]
    for message in history:
        await layer.save(KEY, message)
    await layer.fetch(KEY)
    # Clearing keeps every message (a call stays answered): only a summary shrinks a pair
    # budget, and it is made from the collapsed view.
    assert layer.collapses_made == 0
    assert len(summarizer.inputs) == 1
    assert [m.content for m in summarizer.inputs[0] if m.role == "tool"] == [
        COLLAPSED,
        reservation(),
    ]


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_an_explicit_compaction_summarizes_and_the_option_turns_the_steps_off(
    summaries: str,
) -> None:
    history = [*FIRST, *second()[:-4]]  # a repeated read, under the budget
    summarizer = Counting()
    layer = layer_over(InMemoryChatStorage(), summarizer, summaries=summaries)
    for message in history:
        await layer.save(KEY, message)
    await layer.compact(KEY)
    assert len(summarizer.inputs) == 1  # asked for: a summary, not a cleared view
    assert summarizer.inputs[0][2].content == COLLAPSED  # made from the collapsed view
    off = layer_over(
        InMemoryChatStorage(), Counting(), summaries=summaries, clear_tool_results=False
    )
    assert off.clear_tool_results is False
    assert "clear_tool_results=False" in off.describe()
    for message in [*FIRST, *second()]:
        await off.save(KEY, message)
    assert (off.clears_made, off.collapses_made) == (0, 0)
    assert cleared_in(await off.fetch(KEY)) == []


# --- the property ------------------------------------------------------------------------------

RECORDS = ["H9ZU1C", "K2LM8P", "Q0ZF0J"]


def record(ident: str, status: str, change: int) -> str:
    flights: list[dict[str, Any]] = [
        {"flight_number": f"HAT{ord(ident[0]) + i}", "date": f"2024-06-{10 + i}", "price": 90 + i}
        for i in range(4)
    ]
    flights[0]["price"] += 100 * change  # a new price: a new fact
    return json.dumps({"reservation_id": ident, "status": status, "flights": flights})


turn_spec = st.tuples(
    st.integers(0, 1),  # who saves the turn: store-mode instance 0 or 1
    st.lists(
        st.tuples(
            st.sampled_from(RECORDS), st.sampled_from(["active", "cancelled"]), st.integers(0, 1)
        )
    ),
    st.booleans(),  # a long answer
)


def check_view(view: list[ChatMessage]) -> None:
    """What strict clients need: one leading system message, each call answered by the
    results right after it, no other tool message."""
    assert [m.role for m in view[1:]].count("system") == 0
    index = 0
    while index < len(view):
        message = view[index]
        assert message.role != "tool", f"tool result {index} is not right after its call"
        index += 1
        calls = {c.id for c in message.tool_calls}
        answered: set[str] = set()
        while index < len(view) and view[index].role == "tool":
            answered.add(view[index].tool_call_id or "")
            index += 1
        assert answered == calls


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    turns=st.lists(turn_spec, min_size=1, max_size=12),
    trigger=st.sampled_from([500, 800, 1200]),
    trim=st.sampled_from([None, 200]),
)
def test_property_a_compaction_never_drops_a_raw_fact(
    turns: list[tuple[int, list[tuple[str, str, int]], bool]], trigger: int, trim: int | None
) -> None:
    """Whatever the traffic: the raw record is what was saved, every view is valid, a result
    cleared as held by the summary has every fact in the summary, a collapsed one's newer
    result is in the view and with the summary states every fact it stated (unless trimming,
    which cuts text by design, ran first), and every instance over the store serves the same
    view."""
    anyio.run(check_traffic, turns, trigger, trim)


# Found by the property: a result cleared (or collapsed) against one summary stays in the
# view after the next summary rewrote the ledger to the newest state (another record's $190,
# an older price $90): it is put back as it was.
REWRITTEN = [
    [
        (0, [("K2LM8P", "active", 1)], False),
        (0, [("K2LM8P", "active", 0)], False),
        (0, [("H9ZU1C", "active", 1), ("H9ZU1C", "active", 0)], False),
        (0, [], False),
    ],
    [
        (0, [("H9ZU1C", "active", 0)], True),
        (0, [("H9ZU1C", "active", 0), ("H9ZU1C", "active", 1), ("K2LM8P", "active", 0)], False),
        (0, [("H9ZU1C", "active", 0), ("K2LM8P", "active", 0)], False),
        (0, [("H9ZU1C", "active", 0)], False),
    ],
]


@pytest.mark.parametrize(("turns", "trigger"), [(REWRITTEN[0], 500), (REWRITTEN[1], 800)])
async def test_a_result_a_new_summary_no_longer_holds_is_put_back(
    turns: list[tuple[int, list[tuple[str, str, int]], bool]], trigger: int
) -> None:
    await check_traffic(turns, trigger, None)


async def check_traffic(
    turns: list[tuple[int, list[tuple[str, str, int]], bool]], trigger: int, trim: int | None
) -> None:
    """The property's checks on one traffic (see the property)."""
    store, memory_store = InMemoryChatStorage(), InMemoryChatStorage()
    options: dict[str, Any] = {"trigger_tokens": trigger, "trim_tool_results": trim}
    options["trim_keep_turns"] = 1

    def make(over: Any, **more: Any) -> SummarizingChatStorage:
        return SummarizingChatStorage(over, ExtractiveSummarizer(), **options, **more)

    layers = [make(store), make(store), make(memory_store, summaries="memory")]
    saved: list[ChatMessage] = [SYSTEM]
    await layers[0].save(KEY, SYSTEM)
    await layers[2].save(KEY, SYSTEM)
    for n, (who, reads, long) in enumerate(turns):
        batch = [ChatMessage("user", f"Turn {n}: what about my trips?")]
        for k, (ident, status, change) in enumerate(reads):
            call = ToolCall(f"c{n}_{k}", "get_reservation_details", json.dumps({"id": ident}))
            batch.append(ChatMessage("assistant", None, (call,)))
            result = record(ident, status, change)
            batch.append(ChatMessage("tool", result, tool_call_id=call.id))
        batch.append(ChatMessage("assistant", f"Answer {n}. " + "Noted. " * (60 if long else 3)))
        for message in batch:
            await layers[who].save(KEY, message)
            await layers[2].save(KEY, message)
        saved += batch
        by_id = {m.id: m for m in saved}
        for layer in (layers[who], layers[2]):
            view = await layer.fetch(KEY)
            check_view(view)
            ids = {m.id for m in view}
            summary = extract_facts(view[0].text) if view[0].is_summary else frozenset()
            for message in view if trim is None else ():  # trimming cuts facts
                reason = cleared_reason(message)
                if reason == "summary":
                    assert extract_facts(by_id[message.id].text) <= summary
                elif reason == "repeated":
                    newer = message.metadata["chatlayers"]["newer"]
                    assert newer in ids
                    kept = extract_facts(by_id[newer].text) | summary
                    assert extract_facts(by_id[message.id].text) <= kept
        raw = await store.fetch(KEY)
        assert [(m.id, m.content) for m in raw] == [(m.id, m.content) for m in saved]
    views = [await layer.fetch(KEY) for layer in (layers[0], layers[1], make(store))]
    assert views[0] == views[1] == views[2]
