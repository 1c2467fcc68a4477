"""View provenance of the summarizing layer beyond the kit's scenario (which runs on every
store): memory mode, a strict layer above, the provenance record itself, token budgets with
trimmed tool results, and what it costs (one record per reply, nothing per fetch)."""

from __future__ import annotations

from typing import Any

import pytest

from storage.abilities import TimeTravelStorage, find_ability
from storage.layers.strict import StrictViewChatStorage, strict_view
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.provenance import KIND, record_id
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.pii import PIIScrubber
from storage.stores.memory import InMemoryChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def turns(n: int, prefix: str = "m") -> list[ChatMessage]:
    return [
        ChatMessage("user" if i % 2 == 0 else "assistant", f"{prefix} {i}", id=f"{prefix}{i}")
        for i in range(n)
    ]


async def test_memory_mode_knows_a_view_while_it_holds_its_summary() -> None:
    store = InMemoryChatStorage()
    layer = SummarizingChatStorage(store, trigger_at=2, keep_last=1, summaries="memory")
    await layer.save_messages(KEY, turns(12))
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    await layer.save(KEY, ChatMessage("assistant", "reply", id="r"))
    found = await layer.provenance(KEY, "r")
    assert found is not None
    assert list(found.messages) == view
    # Another instance (or this one after a restart) never held that summary: unknown.
    other = SummarizingChatStorage(store, trigger_at=2, keep_last=1, summaries="memory")
    assert await other.provenance(KEY, "r") is None


async def test_memory_mode_view_without_a_summary_is_known_everywhere() -> None:
    store = InMemoryChatStorage()
    layer = SummarizingChatStorage(store, trigger_at=20, summaries="memory")
    await layer.save_messages(KEY, turns(3))
    view = await layer.fetch(KEY)
    await layer.save(KEY, ChatMessage("assistant", "reply", id="r"))
    other = SummarizingChatStorage(store, trigger_at=20, summaries="memory")
    found = await other.provenance(KEY, "r")
    assert found is not None
    assert list(found.messages) == view
    assert found.kinds == ("verbatim",) * 3


async def test_a_strict_layer_reports_the_view_it_served() -> None:
    store = InMemoryChatStorage()
    layer = SummarizingChatStorage(store, trigger_at=2, keep_last=1)
    stack = StrictViewChatStorage(layer)
    late = ChatMessage("system", "a late instruction", id="late")
    await stack.save_messages(KEY, [*turns(12), ChatMessage("user", "q", id="q"), late])
    served = await stack.fetch(KEY)
    await stack.save(KEY, ChatMessage("assistant", "reply", id="r"))
    found = await stack.provenance(KEY, "r")
    inner = await layer.provenance(KEY, "r")
    assert found is not None
    assert inner is not None
    assert list(found.messages) == served == strict_view(list(inner.messages))
    assert list(found.messages) != list(inner.messages)  # the late system message folded
    assert found.kinds[0] == "summary"


async def test_the_link_is_one_record_of_chatlayers_own_kind_never_scrubbed() -> None:
    store = InMemoryChatStorage()
    scrubbed = TransformingChatStorage(store, PIIScrubber(secret="s"))
    layer = SummarizingChatStorage(scrubbed, trigger_at=2, keep_last=1)
    await layer.save_messages(KEY, turns(12))
    for _ in range(3):
        await layer.fetch(KEY)  # fetches alone write nothing
    assert await store.fetch_records(KEY) == []
    reply = ChatMessage("assistant", "ok", id="reply +1 415 555 2671")  # a phone-like id
    await layer.save(KEY, reply)
    await layer.save(KEY, ChatMessage("assistant", "more", id="second"))  # no fetch before
    records = await store.fetch_records(KEY)
    assert [(r.kind, r.id) for r in records] == [(KIND, record_id(reply.id))]
    data = records[0].data
    assert data["reply"] == reply.id  # the scrubber left chatlayers' own record alone
    assert set(data) == {
        "reply",
        "at",
        "limit",
        "window",
        "n",
        "head",
        "served",
        "last",
        "version",
        "made",
        "covers_to",
        "compaction",
    }
    assert (await layer.provenance(KEY, reply.id)) is not None
    assert await layer.provenance(KEY, "second") is None


async def test_a_trimmed_tool_result_is_marked_trimmed() -> None:
    from tests.layers.summarizing.test_agent_traffic import SYSTEM, chat_turn

    store = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        store, trigger_tokens=3000, trim_tool_results=300, trim_keep_turns=1
    )
    for message in [SYSTEM] + [m for n in range(6) for m in chat_turn(n, 2500)]:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert layer.trims_made >= 1
    await layer.save(KEY, ChatMessage("assistant", "reply", id="r"))
    found = await layer.provenance(KEY, "r")
    assert found is not None
    assert list(found.messages) == view
    assert "trimmed" in found.kinds
    assert "summary" not in found.kinds  # trimming alone: no summarizer call
    assert found.messages[0].id == SYSTEM.id  # the pinned prompt, verbatim


async def test_without_records_below_nothing_is_recorded() -> None:
    class NoRecords(InMemoryChatStorage):
        save_record = None  # type: ignore[assignment]
        fetch_records = None  # type: ignore[assignment]

    store = NoRecords()
    layer = SummarizingChatStorage(store, trigger_at=2, keep_last=1)
    assert find_ability(layer, TimeTravelStorage) is layer
    await layer.save_messages(KEY, turns(6))
    await layer.fetch(KEY)
    await layer.save(KEY, ChatMessage("assistant", "reply", id="r"))
    assert await layer.provenance(KEY, "r") is None


@pytest.mark.parametrize("bad", ["", None, 3])
async def test_a_bad_message_id_is_refused(bad: Any) -> None:
    from storage.errors import InvalidArgumentError

    layer = SummarizingChatStorage(InMemoryChatStorage())
    with pytest.raises(InvalidArgumentError):
        await layer.provenance(KEY, bad)
