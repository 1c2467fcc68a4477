"""The CLI's read-only commands make no summary: looking at a conversation through the default
stack (a pair budget) never changes what a deployment's own stack (a token budget) serves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio

from storage import ChatKey, ChatMessage, SQLiteChatStorage
from tests.cli.test_migrate import chatlayers, env

KEY = ChatKey("ada", "trip", "assistant")
PAIRS = 30  # over the default stack's trigger_at=20, under the deployment's token budget


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*chatlayers(), *argv], env=env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


async def fill(path: Path) -> None:
    async with SQLiteChatStorage(path) as store:
        for n in range(PAIRS):
            await store.save_messages(
                KEY, [ChatMessage("user", f"question {n}"), ChatMessage("assistant", f"answer {n}")]
            )


async def stored_checkpoint(path: Path) -> object:
    async with SQLiteChatStorage(path) as store:
        return await store.load_checkpoint(KEY)


def test_show_export_and_stats_through_a_summarizing_stack_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    anyio.run(fill, db)
    url = f"summarize::sqlite:///{db}"  # trigger_at=20: a fetch of 30 pairs would summarize
    shown = json.loads(run("--url", url, "show", "--session", "trip", "--json").stdout)
    assert len(shown["messages"]) == 2 * PAIRS  # the record as stored: no summary was made
    run("--url", url, "export", "--model-view", "-o", str(tmp_path / "out.jsonl"))
    run("--url", url, "stats")
    assert anyio.run(stored_checkpoint, db) is None
    deployment = f"summarize?trigger_tokens=100000::sqlite:///{db}"
    again = json.loads(run("--url", deployment, "show", "--session", "trip", "--json").stdout)
    assert [m["content"] for m in again["messages"]] == [m["content"] for m in shown["messages"]]


async def summarize_once(path: Path) -> None:
    from storage import open_storage

    async with open_storage(f"summarize::sqlite:///{path}") as stack:
        await stack.fetch(KEY)  # the deployment's own fetch makes the summary


def test_show_serves_a_stored_summary_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    anyio.run(fill, db)
    anyio.run(summarize_once, db)
    checkpoint = anyio.run(stored_checkpoint, db)
    assert checkpoint is not None
    shown = json.loads(
        run("--url", f"summarize::sqlite:///{db}", "show", "--session", "trip", "--json").stdout
    )
    assert len(shown["messages"]) < 2 * PAIRS  # the stored summary and the turns after it
    assert anyio.run(stored_checkpoint, db) == checkpoint
