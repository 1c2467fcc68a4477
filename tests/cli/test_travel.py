"""``chatlayers fork``, ``rewind``, ``show --as-of`` and ``why`` as a user runs them: the
console script in a subprocess against a SQLite file, a live summarizing worker seeing the
CLI's rewind on its next fetch, and ``why`` explaining a summarized, trimmed reply exactly as
the stack's ``provenance`` does."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage import open_storage
from storage.abilities import view_kind
from storage.cli.output import Output
from storage.cli.travel import print_messages
from storage.message import ChatKey, ChatMessage, ToolCall
from tests.cli.test_migrate import chatlayers, env

KEY = ChatKey("ada", "trip", "assistant")
# A 600-token budget, the last turn verbatim, tool results over 60 characters trimmed once
# they are a turn old: after 9 turns, a view with all three kinds of message.
SUMMARIZING = "summarize?trigger_tokens=600&keep_last=1&trim_tool_results=60&trim_keep_turns=1::{}"
TURNS = 9
LAST = f"a{TURNS - 1}"


def run(*argv: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*chatlayers(), *argv], env=env(), capture_output=True, text=True, timeout=300, check=False
    )
    if check is not None:
        assert done.returncode == check, done.stdout + done.stderr
    return done


def run_json(*argv: str) -> Any:
    return json.loads(run(*argv, "--json").stdout)


def ids(record: dict[str, Any]) -> list[str]:
    return list(record["chatlayers"]["ids"])


def turn(n: int) -> list[ChatMessage]:
    """A user question, a tool call with a long result, the answer."""
    return [
        ChatMessage("user", f"question {n}: where is flight {n}?", id=f"u{n}"),
        ChatMessage("assistant", None, (ToolCall(f"c{n}", "find", f'{{"n": {n}}}'),), id=f"t{n}"),
        ChatMessage("tool", f"flight {n} status: " + "on time. " * 35, tool_call_id=f"c{n}"),
        ChatMessage("assistant", f"flight {n} is on time", id=f"a{n}"),
    ]


async def converse(url: str, turns: int) -> None:
    """Save ``turns`` turns as an orchestrator does: a fetch before each reply."""
    async with open_storage(url) as stack:
        for n in range(turns):
            user, call, result, answer = turn(n)
            await stack.save(KEY, user)
            await stack.fetch(KEY)
            await stack.save(KEY, call)
            await stack.save(KEY, result)
            await stack.fetch(KEY)
            await stack.save(KEY, answer)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "test-secret-0123456789abcdef")
    path = tmp_path / "chats.db"
    anyio.run(converse, SUMMARIZING.format(f"sqlite:///{path}"), TURNS)
    return path


def test_fork_copies_up_to_a_message_into_a_new_conversation(db: Path) -> None:
    url = f"sqlite:///{db}"
    done = run_json("fork", "--url", url, "--session", "trip", "--to-session", "alt", "--at", "a2")
    assert done["copied"] == 12
    assert done["fork"] == {"user_id": "ada", "session_id": "alt", "agent_id": "assistant"}
    source = run_json("show", "--url", url, "--session", "trip", "--raw")
    fork = run_json("show", "--url", url, "--session", "alt", "--raw")
    assert ids(fork) == ids(source)[:12]
    assert ids(fork)[-1] == "a2"
    # The fork then diverges; forking onto it again is refused and copies nothing.
    again = run("fork", "--url", url, "--session", "trip", "--to-session", "alt", check=1)
    assert "holds messages" in again.stderr
    assert ids(run_json("show", "--url", url, "--session", "alt", "--raw")) == ids(fork)
    text = run("fork", "--url", url, "--session", "trip", "--to-agent", "planner").stdout
    assert "36 messages copied" in text
    missing = run("fork", "--url", url, "--session", "trip", check=2)
    assert "--to-session or --to-agent" in missing.stderr


@pytest.mark.anyio
async def test_a_live_worker_sees_the_rewind_another_process_made(db: Path) -> None:
    url = SUMMARIZING.format(f"sqlite:///{db}")
    async with open_storage(url) as worker:
        before = await worker.fetch(KEY)
        assert before[-1].id == LAST
        assert any(m.is_summary for m in before)
        done = await anyio.to_thread.run_sync(
            lambda: run("rewind", "--url", url, "--session", "trip", "--to", "a3")
        )
        assert "20 messages hidden" in done.stdout
        after = await worker.fetch(KEY)
        assert after[-1].id == "a3"
        assert {"u4", "a4", "u8", LAST}.isdisjoint(m.id for m in after)
        everything = await worker.fetch_all_chats("ada", "trip")
        rewound = [
            row.message.id
            for row in everything
            if (row.message.metadata.get("chatlayers") or {}).get("rewound")
        ]
        assert len(rewound) == 20
        assert {"u4", "t4", "a4", "u8", LAST} <= set(rewound)
    # The record as it stood before the rewind is still there, by message id and by sequence.
    raw = f"sqlite:///{db}"
    as_of = run_json("show", "--url", raw, "--session", "trip", "--as-of", LAST)
    assert as_of["view"] == "as_of"
    assert ids(as_of)[-1] == LAST
    assert len(ids(as_of)) == 4 * TURNS
    now = run_json("show", "--url", raw, "--session", "trip", "--raw")
    assert ids(now) == ids(as_of)[:16]
    assert ids(run_json("show", "--url", raw, "--session", "trip", "--as-of", "id:u1")) == [
        "u0",
        *ids(as_of)[1:4],
        "u1",
    ]
    unknown = run("rewind", "--url", raw, "--session", "trip", "--to", LAST, check=1)
    assert "not a message of the view" in unknown.stderr
    # Before its first message the record held nothing: the error says where it starts.
    early = run("show", "--url", raw, "--session", "trip", "--as-of", "2020-01-01T00:00", check=1)
    assert "held no messages as of" in early.stderr
    assert "its first message is sequence number" in early.stderr
    assert "(id u0)" in early.stderr


@pytest.mark.anyio
async def test_why_prints_the_view_a_summarized_reply_answered(db: Path) -> None:
    url = SUMMARIZING.format(f"sqlite:///{db}")
    async with open_storage(url) as stack:
        found = await stack.provenance(KEY, LAST)
    assert found is not None
    kinds = [view_kind(m) for m in found.messages]
    assert {"summary", "verbatim", "trimmed"} <= set(kinds)
    shown = run_json("why", "--url", url, "--session", "trip", "--message", LAST)
    assert shown["reply"] == LAST
    assert [m["kind"] for m in shown["messages"]] == kinds
    assert [m["id"] for m in shown["messages"]] == [m.id for m in found.messages]
    assert [m.get("content") for m in shown["messages"]] == [m.content for m in found.messages]
    assert shown["checkpoint_version"] == found.checkpoint_version > 0
    text = run("why", "--url", url, "--session", "trip", "--message", LAST).stdout
    assert "summary · system" in text or "summary · user" in text
    assert "trimmed · tool" in text
    counts = (kinds.count("summary"), kinds.count("verbatim"), kinds.count("trimmed"))
    assert "{} summary, {} verbatim, {} trimmed".format(*counts) in text
    assert run_json("why", "--url", url, "--session", "trip", "--last")["reply"] == LAST
    unknown = run("why", "--url", url, "--session", "trip", "--message", "nope", check=1)
    assert "no message 'nope'" in unknown.stderr
    question = run("why", "--url", url, "--session", "trip", "--message", "u1", check=1)
    assert "'u1' is a user message, not a reply" in question.stderr


def test_why_last_after_a_rewind_explains_the_views_newest_reply(db: Path) -> None:
    url = SUMMARIZING.format(f"sqlite:///{db}")
    run("rewind", "--url", url, "--session", "trip", "--to", "a5")
    assert run_json("why", "--url", url, "--session", "trip", "--last")["reply"] == "a5"
    hidden = run_json("why", "--url", url, "--session", "trip", "--message", LAST)
    assert hidden["reply"] == LAST  # a rewound reply is still explained when named


def test_why_without_a_summarizing_layer_says_there_is_nothing_to_explain(db: Path) -> None:
    url = f"sqlite:///{db}"
    for which in (("--last",), ("--message", "a1")):
        done = run("why", "--url", url, "--session", "trip", *which, check=1)
        assert "this stack has none (summarize::...)" in done.stderr
        assert "nothing to explain" in done.stderr
        assert "show --session S --as-of id:REPLY_ID" in done.stderr
        assert done.stdout == ""  # not the whole record


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_tables_print_stored_text_as_it_is() -> None:
    """A terminal gets rich tables; brackets in stored text are text, not rich markup."""
    out = Terminal()
    print_messages(
        Output(json_mode=False, out=out),
        "view [of] 'a'/'b'",
        [ChatMessage("tool", "[bold]55.0[/bold] [x]", tool_call_id="c1")],
        ["verbatim · tool"],
        brief=False,
    )
    assert out.getvalue().count("[bold]55.0[/bold] [x]") == 1
    assert "view [of] 'a'/'b'" in out.getvalue()
    assert "┃" in out.getvalue()


def test_migrate_and_verify_carry_rewinds_and_what_each_reply_saw(db: Path, tmp_path: Path) -> None:
    """The cut-over path: a rewind made with the CLI, ``migrate`` to a new file, ``verify
    --views`` equal, and ``why`` answering the same from the new store."""
    source = f"sqlite:///{db}"
    target = f"sqlite:///{tmp_path}/new.db"
    run("rewind", "--url", source, "--session", "trip", "--to", "a6")
    copied = run_json("migrate", "--from", source, "--to", target)
    assert copied["keys"] == 1
    done = run(
        "verify",
        "--from",
        SUMMARIZING.format(source),
        "--to",
        SUMMARIZING.format(target),
        "--views",
    )
    assert "equal" in done.stdout
    for url in (source, target):
        shown = run_json("show", "--url", url, "--session", "trip", "--as-of", LAST)
        assert ids(shown)[-1] == LAST  # the rewound messages are in the record
    old = run_json(
        "why", "--url", SUMMARIZING.format(source), "--session", "trip", "--message", LAST
    )
    new = run_json(
        "why", "--url", SUMMARIZING.format(target), "--session", "trip", "--message", LAST
    )
    assert [m["kind"] for m in new["messages"]] == [m["kind"] for m in old["messages"]]
    assert [m.get("content") for m in new["messages"]] == [
        m.get("content") for m in old["messages"]
    ]
    assert {"summary", "trimmed"} <= {m["kind"] for m in new["messages"]}  # rewound since
    assert (
        run_json("show", "--url", target, "--session", "trip", "--raw")["chatlayers"]["ids"][-1]
        == "a6"
    )
