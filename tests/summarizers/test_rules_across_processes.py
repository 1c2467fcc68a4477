"""The summary rules as production meets them: a stack from a URL over one SQLite file, the
checkpoint one worker made served unchanged to a second process and after a restart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from storage import ChatKey, ChatMessage
from storage.cli.conversation_file import read_conversations
from storage.config import open_storage
from tests.clients import refusals
from tests.paths import REPO

KEY = ChatKey("u1", "s1", "support")
# What the rules act on: a request a pointing-back question refers to, an answered question
# for information, an opener restated with its facts, then enough turns to cross the trigger.
TURNS = [
    (
        "Hi. I'm having some issues with money and need to downgrade my business flights to "
        "economy. Can you help with that?",
        "I can help with that.",
    ),
    ("How much was reservation H9ZU1C in total?", "H9ZU1C came to $255."),
    ("I'd like to change my flight reservation.", "Which one?"),
    ("I want to change the flight for reservation M05KNL.", "Sure, to which date?"),
    ("To May 27, please.", "Done: M05KNL now flies on 2024-05-27."),
    ("Please add one checked bag to M05KNL.", "Added: 1 checked bag, $35."),
    ("And a seat by the window on HAT118, please.", "Seat 14A on HAT118 is yours."),
    ("Could you email the receipt to ada@example.org?", "Sent to ada@example.org."),
    ("Thanks, that's all.", "You're welcome!"),
]
READ_VIEW = """
import json, sys, anyio
from storage import ChatKey
from storage.cli.conversation_file import read_conversations
from storage.config import open_storage
async def main():
    async with open_storage(sys.argv[1]) as stack:
        view = await stack.fetch(ChatKey("u1", "s1", "support"))
    print(json.dumps([[m.role, m.text, m.id] for m in view]))
anyio.run(main)
"""


def _rows(view: list[ChatMessage]) -> list[list[str]]:
    return [[m.role, m.text, m.id] for m in view]


@pytest.mark.anyio
async def test_a_second_process_and_a_restart_serve_the_summary_the_rules_wrote(
    tmp_path: Path,
) -> None:
    url = f"summarize?trigger_at=3&keep_last=1::sqlite:///{tmp_path / 'chats.db'}"
    async with open_storage(url) as worker:
        for question, answer in TURNS:
            await worker.save(KEY, ChatMessage("user", question))
            await worker.fetch(KEY)  # where an orchestrator calls the model
            await worker.save(KEY, ChatMessage("assistant", answer))
        view = await worker.fetch(KEY)
    summary = view[0]
    assert summary.is_summary
    assert "need to downgrade my business flights to economy" in summary.text
    assert "Can you help with that" not in summary.text
    assert "How much was reservation H9ZU1C" not in summary.text  # answered
    assert "change my flight reservation." not in summary.text  # restated below
    assert "I want to change the flight for reservation M05KNL." in summary.text

    done = await anyio.run_process([sys.executable, "-c", READ_VIEW, url], cwd=REPO)
    assert json.loads(done.stdout) == _rows(view)  # a second process: the same view
    async with open_storage(url) as restarted:
        again = await restarted.fetch(KEY)
    assert _rows(again) == _rows(view)  # a restart: the same view, no new summary


READ_KEY_VIEW = """
import json, sys, anyio
from storage import ChatKey
from storage.cli.conversation_file import read_conversations
from storage.config import open_storage
async def main():
    async with open_storage(sys.argv[1]) as stack:
        view = await stack.fetch(ChatKey(*sys.argv[2:5]))
    print(json.dumps([[m.role, m.text, m.id] for m in view]))
anyio.run(main)
"""


@pytest.mark.anyio
async def test_two_workers_keep_the_newest_request_and_the_records_own_cabin(
    tmp_path: Path,
) -> None:
    """tau-bench task 34 through two stack instances over one SQLite file (one saves the
    user's messages, the other the agent's, each fetching as an orchestrator does): in the
    view the agent changes the reservation from, the summary still says what the user asked
    now, the cabin the request turns on and the refusal already given about it, every model
    client accepts it, a second process and a restart serve the same view."""
    tau = REPO / "examples" / "data" / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
    conversation = read_conversations([tau])[34]
    key = conversation.key
    url = f"summarize?trigger_at=6::sqlite:///{tmp_path / 'chats.db'}"
    view: list[ChatMessage] = []
    async with open_storage(url) as users, open_storage(url) as agents:
        for message in conversation.messages:
            change = any(c.name == "update_reservation_flights" for c in message.tool_calls)
            if message.role == "assistant":
                view = await agents.fetch(key)
                if change:
                    break
            await (users if message.role == "user" else agents).save(key, message)
    summary = view[0].text
    assert view[0].is_summary
    assert "first upgrade reservation XEHM4B to economy, then cancel it" in summary
    (entry,) = [line for line in summary.splitlines() if line.startswith("- reservation XEHM4B")]
    assert "cabin=basic_economy" in entry
    # ...and what the agent already refused about it (the trial found it dropped here).
    assert '- XEHM4B: "Unfortunately, it cannot be canceled for a refund' in summary
    assert refusals(view) == {}  # every strict chat template and provider takes it
    done = await anyio.run_process(
        [sys.executable, "-c", READ_KEY_VIEW, url, key.user_id, key.session_id, key.agent_id],
        cwd=REPO,
    )
    assert json.loads(done.stdout) == _rows(view)
    async with open_storage(url) as restarted:
        assert _rows(await restarted.fetch(key)) == _rows(view)  # a restart: no new summary
