"""Summaries under a budget carry over to a restarted or second worker: the hold after a
compaction that could not get under the budget is stored in the checkpoint, so every instance
takes the same decision; a held view is compacted again once a new turn allows cutting more.
Verbatim copies in the view are the raw messages (only the summary is ``is_summary``), and
``compact(key, summary=...)`` keeps the pinned prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from storage.cli.conversation_file import read_conversations
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.header import SEPARATOR, framed
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber
from storage.protocol import ChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer
from summarizers.tokens import count_tokens
from tests.paths import REPO

pytestmark = pytest.mark.anyio

TAU = REPO / "examples" / "data" / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
TAU_TASK = "tau_airline_gpt4o_task006_trial0"
KEY = ChatKey("u", "s", "a")
SYSTEM = ChatMessage("system", "You are an airline agent. Follow the policy.")


class Counting:
    """The extractive summarizer, counting calls."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        self.calls += 1
        return await self.inner(buffer, keep_last)

    def describe(self) -> str:
        return "counting"


def stack(path: Path, summarizer: Counting, options: dict[str, Any]) -> SummarizingChatStorage:
    """The issue's stack: summarize over scrub over SQLite."""
    inner = TransformingChatStorage(SQLiteChatStorage(path), PIIScrubber(secret="s"))
    return SummarizingChatStorage(inner, summarizer, **options)


def tau_conversation() -> tuple[ChatKey, list[ChatMessage]]:
    (found,) = [c for c in read_conversations([TAU]) if c.key.session_id == TAU_TASK]
    return found.key, list(found.messages)


def agent_conversation() -> list[ChatMessage]:
    """Turns of a user request, tool calls and an answer; some turns long."""
    out = [SYSTEM]
    for n in range(12):
        out.append(ChatMessage("user", f"Request {n}: change reservation R{n} to economy."))
        for g in range(1 + (n % 4)):
            call = ToolCall(f"call_{n}_{g}", "get_reservation", f'{{"id": "R{n}{g}"}}')
            out.append(ChatMessage("assistant", None, (call,)))
            out.append(ChatMessage("tool", f"R{n}{g}: " + "seat 12A, " * 40, tool_call_id=call.id))
        out.append(ChatMessage("assistant", f"Done {n}: reservation R{n} changed."))
    return out


async def replay_checking_fresh_instances(
    path: Path, key: ChatKey, messages: list[ChatMessage], options: dict[str, Any]
) -> tuple[list[ChatMessage], SummarizingChatStorage, Counting, int]:
    """Replay like ``storage/cli/replay.py`` (a fetch before every assistant message); after
    every fetch a fresh instance over the same file serves the same view with no call.
    Returns the last view, the writer, its summarizer, and how many fetches saw a hold."""
    summarizer = Counting()
    writer = stack(path, summarizer, options)
    held = 0
    view: list[ChatMessage] = []
    for index, message in enumerate(messages):
        await writer.save(key, message)
        if index == len(messages) - 1 or messages[index + 1].role == "assistant":
            view = await writer.fetch(key)
            state = writer._states.get(key)
            held += state is not None and state.hold is not None
            fresh_summarizer = Counting()
            fresh = stack(path, fresh_summarizer, options)
            try:
                assert await fresh.fetch(key) == view
                assert fresh_summarizer.calls == 0
            finally:
                await fresh.aclose()
    return view, writer, summarizer, held


FRESH_PROCESS = """
import anyio, json, sys
sys.path.insert(0, sys.argv[1])
from tests.layers.summarizing.test_hold import Counting, stack
from storage.message import ChatKey
from pathlib import Path

async def main():
    summarizer = Counting()
    layer = stack(Path(sys.argv[2]), summarizer, json.loads(sys.argv[3]))
    view = await layer.fetch(ChatKey(*json.loads(sys.argv[4])))
    await layer.aclose()
    print(json.dumps({"calls": summarizer.calls, "view": [[m.id, m.text] for m in view]}))

anyio.run(main)
"""


def fetch_in_a_fresh_process(path: Path, key: ChatKey, options: dict[str, Any]) -> Any:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            FRESH_PROCESS,
            str(REPO),
            str(path),
            json.dumps(options),
            json.dumps([key.user_id, key.session_id, key.agent_id]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


async def test_tau_task006_restart_and_second_instance_serve_the_same_view_no_call(
    tmp_path: Path,
) -> None:
    """Before: the writer served 15 messages / 4,942 tokens (held, over the 4,000 budget); a
    new instance made one more call and served 7 messages / 2,330 tokens."""
    key, messages = tau_conversation()
    path = tmp_path / "tau.db"
    options = {"trigger_tokens": 4000}
    view, writer, summarizer, held = await replay_checking_fresh_instances(
        path, key, messages, options
    )
    assert summarizer.calls >= 1
    assert held >= 1  # the hold was in effect, and every fresh instance held alike
    assert count_tokens(view) <= 4000  # a new turn allowed cutting: not left over budget
    second = stack(path, Counting(), options)  # a second live instance beside the writer
    assert await second.fetch(key) == view
    assert await writer.fetch(key) == view
    await second.aclose()
    await writer.aclose()
    got = fetch_in_a_fresh_process(path, key, options)
    assert got["calls"] == 0
    assert got["view"] == [[m.id, m.text] for m in view]


@pytest.mark.parametrize(
    "options",
    [{"trigger_at": 3, "keep_last": 2}, {"trigger_tokens": 700, "keep_tokens": 300}],
    ids=["trigger_at", "trigger_tokens"],
)
async def test_every_instance_takes_the_same_hold_decision(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    path = tmp_path / "agent.db"
    messages = agent_conversation()
    view, writer, summarizer, held = await replay_checking_fresh_instances(
        path, KEY, messages, options
    )
    assert summarizer.calls >= 2
    assert held >= 1
    await writer.aclose()
    got = fetch_in_a_fresh_process(path, KEY, options)
    assert got["calls"] == 0
    assert got["view"] == [[m.id, m.text] for m in view]


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_a_held_view_is_compacted_again_when_a_new_turn_allows_cutting(
    summaries: Literal["store", "memory"],
) -> None:
    """The last two turns alone are over the budget (4 messages after the leading one): the
    compaction cannot get under it and holds the key. A new turn moves the cut, so the next
    save compacts again (before: held until ``step`` more messages)."""
    summarizer = Counting()
    layer = SummarizingChatStorage(
        InMemoryChatStorage(), summarizer, trigger_at=2, keep_last=2, summaries=summaries
    )
    turns = [
        [
            ChatMessage("user", f"q{n}"),
            ChatMessage("assistant", f"a{n}"),
            ChatMessage("assistant", f"b{n}"),
        ]
        for n in range(3)
    ]
    stored = await layer.save_messages(KEY, [SYSTEM, *[m for t in turns for m in t]])
    view = await layer.fetch(KEY)
    assert summarizer.calls == 1
    assert [m.text for m in view[1:]] == ["q1", "a1", "b1", "q2", "a2", "b2"]  # held
    await layer.save(KEY, ChatMessage("assistant", "more"))  # no new turn: still held
    assert summarizer.calls == 1
    await layer.save(KEY, ChatMessage("user", "q3"))
    view = await layer.fetch(KEY)
    assert summarizer.calls == 2
    assert view[0].id == stored[0].id  # the one leading message: the prompt, the summary
    assert view[0].is_summary
    assert [m.text for m in view[1:]] == ["q2", "a2", "b2", "more", "q3"]


# --- verbatim copies are the raw messages -----------------------------------------------------


async def test_the_pinned_prompt_leads_the_one_header_and_verbatim_copies_are_raw(
    tmp_path: Path,
) -> None:
    key, messages = tau_conversation()
    layer = stack(tmp_path / "v.db", Counting(), {"trigger_tokens": 4000})
    for message in messages:
        await layer.save(key, message)
    view = await layer.fetch(key)
    raw = await layer.inner.fetch(key)
    # The airline policy, exactly as stored, first in the one leading message.
    assert (view[0].id, view[0].role) == (raw[0].id, "system")
    assert view[0].text.startswith(raw[0].text + SEPARATOR)
    assert view[0].is_summary
    assert [m.is_summary for m in view].count(True) == 1
    assert "hold" not in view[0].metadata["chatlayers"]  # bookkeeping stays in the store
    assert all(m == next(r for r in raw if r.id == m.id) for m in view[1:])
    # A restart serves the same view.
    again = stack(tmp_path / "v.db", Counting(), {"trigger_tokens": 4000})
    assert await again.fetch(key) == view
    await again.aclose()
    await layer.aclose()


async def test_a_long_turns_opener_and_trimmed_results_come_back_as_raw() -> None:
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        base, Counting(), trigger_at=5, trim_tool_results=40, trim_keep_turns=0
    )
    request = ChatMessage("user", "Fix parser.py please.")
    history = [SYSTEM, request]
    for n in range(30):
        call = ToolCall(f"c{n}", "bash", "{}")
        history.append(ChatMessage("assistant", None, (call,)))
        history.append(ChatMessage("tool", f"line {n}\n" * 30, tool_call_id=call.id))
    for message in history:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    raw = {m.id: m for m in await base.fetch(KEY)}
    summaries = [m for m in view if m.is_summary]
    assert summaries == [view[0]]  # the prompt and the summary: one leading message
    assert view[0].id == SYSTEM.id
    assert view[0].text.startswith(f"{SYSTEM.text}{SEPARATOR}")
    assert [m for m in view if m.id == request.id] == [raw[request.id]]
    for message in view:
        if message.is_summary:
            continue
        original = raw[message.id]
        marker = message.metadata.get("chatlayers")
        if marker is None:
            assert message == original
        else:
            assert dict(marker) == {"trimmed_chars": marker["trimmed_chars"]}


async def test_trimmed_results_in_the_view_carry_only_their_trimmed_marker() -> None:
    from tests.layers.summarizing.test_agent_traffic import chat_turn

    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        base, Counting(), trigger_tokens=3000, trim_tool_results=300, trim_keep_turns=1
    )
    for message in [SYSTEM] + [m for n in range(6) for m in chat_turn(n, 2500)]:
        await layer.save(KEY, message)
    view = await layer.fetch(KEY)
    assert layer.trims_made >= 1
    assert not any(m.is_summary for m in view)  # trimming alone: no summary in the view
    raw = {m.id: m for m in await base.fetch(KEY)}
    trimmed = [m for m in view if m.metadata.get("chatlayers")]
    assert trimmed
    for message in trimmed:
        assert set(message.metadata) == {"chatlayers"}
        assert set(message.metadata["chatlayers"]) == {"trimmed_chars"}
        assert message.role == raw[message.id].role == "tool"
    assert [m for m in view if not m.metadata] == [
        raw[m.id] for m in view if not m.metadata
    ]  # the rest exactly as stored


# --- compact(summary=...) keeps the pinned prompt --------------------------------------------


@pytest.mark.parametrize("summaries", ["store", "memory"])
@pytest.mark.parametrize("role", ["system", "developer"])
async def test_manual_compact_keeps_the_pinned_prompt_first(
    tmp_path: Path, summaries: Literal["store", "memory"], role: str
) -> None:
    prompt = ChatMessage(role, "Follow the airline policy.")
    base: ChatStorage = SQLiteChatStorage(tmp_path / "m.db")
    layer = SummarizingChatStorage(base, Counting(), trigger_at=20, summaries=summaries)
    stored = await layer.save_messages(
        KEY, [prompt, ChatMessage("user", "hi"), ChatMessage("assistant", "hello")]
    )
    view = await layer.compact(KEY, summary="The user greeted us.")
    assert len(view) == 1  # one leading message: the prompt unchanged first, the summary
    assert (view[0].id, view[0].role) == (stored[0].id, role)
    assert view[0].is_summary
    assert view[0].text == f"{stored[0].text}{SEPARATOR}{framed('The user greeted us.')}"
    assert await layer.fetch(KEY) == view
    await layer.save(KEY, ChatMessage("user", "next"))
    after = await layer.fetch(KEY)
    assert after[:1] == view
    if summaries == "store":
        again = SummarizingChatStorage(SQLiteChatStorage(tmp_path / "m.db"), Counting())
        assert await again.fetch(KEY) == after
        await again.aclose()
    await layer.aclose()
