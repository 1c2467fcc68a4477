"""The ``chatlayers`` command, run in-process through ``main([...])`` (and once as a subprocess)."""

from __future__ import annotations

import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.cli import main
from storage.cli.conversation_file import message_id, read_conversations
from storage.cli.output import Output
from storage.cli.replay import ReplayReport
from storage.config import open_storage
from storage.config.registry import registry
from storage.errors import InvalidMessageError
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import AsyncContextMixin
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.cli.helpers import run, run_script
from tests.paths import REPO

DATA = REPO / "examples" / "data"
TAU = DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
OASST = DATA / "oasst_en_100.openai.jsonl"
SWE = DATA / "swe_agent_marshmallow_1867_fc.openai.jsonl"
SECRET = "test-secret-0123456789abcdef"

needs_listing = pytest.mark.skipif(
    not (hasattr(SQLiteChatStorage, "list_keys") and hasattr(InMemoryChatStorage, "list_keys")),
    reason="memory/sqlite stores do not implement ListableStorage.list_keys yet",
)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    return int(count)


def default_url(db: Path) -> str:
    return f"summarize::scrub::sqlite:///{db}"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding the tau-bench replay through the default stack (built once)."""
    db = tmp_path_factory.mktemp("replayed") / "tau.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHATLAYERS_PII_SECRET", SECRET)
        assert main(["replay", "--url", default_url(db), str(TAU)]) == 0
    return db


@pytest.fixture
def tau_db(replayed: Path, tmp_path: Path) -> Path:
    db = tmp_path / "tau.db"
    shutil.copy(replayed, db)
    return db


# --- replay ---------------------------------------------------------------------------------


def test_replay_tau_bench_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "chats.db"
    code, out, err = run(capsys, "replay", "--url", default_url(db), str(TAU))
    assert code == 0, err
    main, _, per_set = out.partition("\nper set\n")
    lines = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in main.splitlines()[1:])
    assert lines["database"] == str(db)
    assert int(lines["summarizer calls"].replace(",", "")) >= int(lines["summaries made"])
    assert re.fullmatch(r"\d+(\.\d\d)? (µs|ms|s)", lines["save p50"])
    assert re.fullmatch(r"\d+\.\d\d (ms|s)", lines["save triggering a summary p50 (inline)"])
    header, row = per_set.splitlines()[:2]
    assert header.split()[:2] == ["set", "conversations"]
    assert row.split()[:2] == ["tau_bench_airline_gpt4o_trial0", "50"]
    assert lines["conversations"] == "50"
    assert lines["messages stored"] == "1,384"
    assert lines["messages already stored"] == "0"
    assert int(lines["PII found"].replace(",", "")) > 0
    assert int(lines["EMAIL_ADDRESS"].replace(",", "")) > 0
    assert int(lines["summaries made"].replace(",", "")) > 0
    assert lines["raw history (messages)"] == "1,384"
    assert int(lines["model view (messages)"].replace(",", "")) < 1384
    raw_tokens = int(lines["raw history (tokens, gpt-4o)"].replace(",", ""))
    view_tokens = int(lines["model view (tokens, gpt-4o)"].replace(",", ""))
    assert 0 < view_tokens < raw_tokens
    assert lines["fetch p50"].endswith(("µs", "ms"))
    assert lines["fetch p99"].endswith(("µs", "ms"))
    assert "\x1b[" not in out  # plain text when piped
    assert str(db) in err  # the database path is said explicitly (it holds chat history)
    assert rows(db) == 1384


def test_replay_json_and_idempotent(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "replay", "--url", default_url(tau_db), str(TAU))
    assert report["conversations"] == 50
    assert report["messages_read"] == 1384
    assert report["messages_stored"] == 0
    assert report["messages_already_stored"] == 1384
    assert rows(tau_db) == 1384
    assert report["raw"]["messages"] == 1384
    assert report["model_view"]["messages"] < report["raw"]["messages"]  # still summarized
    # Nothing new was stored, so nothing new was scrubbed: PII is not counted again.
    assert report["pii_found"] == {}
    assert report["fetch_p50_ms"] <= report["fetch_p99_ms"]
    assert report["database"] == str(tau_db)


def test_replay_fresh_deletes_first(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "replay", "--fresh", "--url", default_url(tau_db), str(TAU))
    assert report["messages_stored"] == 1384
    assert rows(tau_db) == 1384


def test_replay_all_shipped_sets_without_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_json(
        capsys, "replay", "--url", f"sqlite:///{tmp_path}/all.db", str(TAU), str(OASST), str(SWE)
    )
    assert report["conversations"] == 50 + 95 + 1
    assert report["messages_stored"] == 1384 + 360 + 24
    assert report["pii_found"] is None
    assert report["summaries_made"] is None
    assert report["raw"] == report["model_view"]


def test_replay_fetch_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "replay", "--fetch-limit", "4", "--url", "memory://", str(SWE))
    assert report["model_view"]["messages"] <= 4
    assert report["raw"]["messages"] == 24


def test_replay_refuses_a_bad_file_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    good = TAU.read_text().splitlines()[0]
    bad.write_text(
        good
        + "\n"
        + json.dumps({"id": "x", "messages": [{"role": "robot", "content": "hi"}]})
        + "\n"
    )
    db = tmp_path / "c.db"
    code, _, err = run(capsys, "replay", "--url", f"sqlite:///{db}", str(bad))
    assert code == 1
    assert f"{bad}:2: message 0: unknown role 'robot'" in err
    assert not db.exists()  # refused before the store was even opened


def test_message_ids_are_deterministic() -> None:
    first = read_conversations([SWE])
    again = read_conversations([SWE])
    assert [m.id for m in first[0].messages] == [m.id for m in again[0].messages]
    assert first[0].messages[3].id == message_id(
        "swe_agent_demo_marshmallow_1867_function_calling", 3
    )
    assert len({m.id for m in first[0].messages}) == 24
    assert first[0].key.agent_id == "assistant"


def test_key_from_metadata_user_id() -> None:
    conversation = read_conversations([TAU])[0]
    assert conversation.key.user_id == "mia_li_3668"
    assert conversation.key.session_id == "tau_airline_gpt4o_task000_trial0"
    oasst = read_conversations([OASST])[0]
    assert oasst.key.user_id == oasst.key.session_id  # no user id in the data: the conversation's


def test_json_list_files_are_read(tmp_path: Path) -> None:
    items = [json.loads(line) for line in OASST.read_text().splitlines()[:3]]
    path = tmp_path / "three.json"
    path.write_text(json.dumps(items))
    assert [c.key.session_id for c in read_conversations([path])] == [i["id"] for i in items]
    path.write_text("[{")
    with pytest.raises(InvalidMessageError, match=r"three\.json: not valid JSON"):
        read_conversations([path])


# --- show / stack -------------------------------------------------------------------------


def _longest_tau() -> tuple[str, str, int]:
    best = max(
        (json.loads(line) for line in TAU.read_text().splitlines()),
        key=lambda d: len(d["messages"]),
    )
    return best["metadata"]["user_id"], best["id"], len(best["messages"])


def test_show_model_view_and_raw(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user, session, length = _longest_tau()
    url = default_url(tau_db)
    view = run_json(capsys, "show", "--url", url, "--user", user, "--session", session)
    assert view["view"] == "model"
    assert len(view["messages"]) < length
    metadata = view["chatlayers"]["metadata"]
    # One leading message: the pinned policy as stored, then the summary merged after it.
    assert metadata[0]["chatlayers"]["summary"] is True
    assert view["messages"][0]["role"] == "system"
    assert view["messages"][0]["content"].startswith("# Airline Agent Policy")
    assert [m["role"] for m in view["messages"][1:]].count("system") == 0
    raw = run_json(capsys, "show", "--url", url, "--user", user, "--session", session, "--raw")
    assert raw["view"] == "raw"
    assert len(raw["messages"]) == length
    last = run_json(
        capsys, "show", "--url", url, "--user", user, "--session", session, "--raw", "--limit", "3"
    )
    assert len(last["messages"]) <= 3
    assert last["chatlayers"]["ids"] == raw["chatlayers"]["ids"][-len(last["messages"]) :]
    code, out, _ = run(capsys, "show", "--url", url, "--user", user, "--session", session)
    assert code == 0
    assert out.splitlines()[0].startswith("model view of ")
    assert "[0] system (summary)" in out  # the policy with the summary: one message
    assert "[1] system" not in out


@needs_listing
def test_show_finds_the_user_from_the_session(
    tau_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user, session, _ = _longest_tau()
    view = run_json(capsys, "show", "--url", default_url(tau_db), "--session", session, "--raw")
    assert view["user_id"] == user
    code, _, err = run(capsys, "show", "--url", default_url(tau_db), "--session", "nope")
    assert code == 1
    assert "no conversation is stored in session 'nope'" in err
    url = default_url(tau_db)
    code, _, err = run(capsys, "show", "--url", url, "--session", session, "--agent", "bogus")
    assert code == 1
    assert f"session {session!r} has no agent 'bogus'; its agents: 'assistant'" in err


def test_show_takes_the_sessions_only_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'bots.db'}"

    async def fill() -> None:
        async with open_storage(url) as stack:
            await stack.save(ChatKey("u1", "s1", "bot"), ChatMessage("user", "hello bot"))
            await stack.save(ChatKey("u1", "s2", "bot"), ChatMessage("user", "one"))
            await stack.save(ChatKey("u1", "s2", "helper"), ChatMessage("user", "two"))

    anyio.run(fill)
    view = run_json(capsys, "show", "--url", url, "--session", "s1")
    assert (view["agent_id"], view["messages"][0]["content"]) == ("bot", "hello bot")
    code, _, err = run(capsys, "show", "--url", url, "--session", "s2")  # two agents: say which
    assert code == 1
    assert "session 's2' has no agent 'assistant'; its agents: 'bot', 'helper'" in err


def test_show_scrubbed_raw_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conv = tmp_path / "c.jsonl"
    conv.write_text(
        json.dumps(
            {
                "id": "s1",
                "metadata": {"user_id": "u1"},
                "messages": [
                    {"role": "user", "content": "mail me at ada@example.org"},
                    {"role": "assistant", "content": "ok"},
                ],
            }
        )
        + "\n"
    )
    url = f"scrub::sqlite:///{tmp_path}/c.db"
    assert run(capsys, "replay", "--url", url, str(conv))[0] == 0
    raw = run_json(capsys, "show", "--url", url, "--user", "u1", "--session", "s1", "--raw")
    assert "ada@example.org" not in json.dumps(raw)
    assert "<EMAIL_ADDRESS_" in raw["messages"][0]["content"]


def test_stack_command_redacts(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis")
    code, out, err = run(
        capsys, "stack", "--url", "summarize::scrub::redis://:s3cret@localhost:6379/0"
    )
    assert code == 0, err
    assert "s3cret" not in out + err
    lines = out.splitlines()
    assert "(outermost first)" in lines[0]
    assert lines[2].split(maxsplit=1)[1].startswith("SummarizingChatStorage(")
    assert (
        lines[3].split(maxsplit=1)[1].startswith("TransformingChatStorage(transform=PIIScrubber(")
    )
    assert lines[4].split(maxsplit=1)[1].startswith("redis://:***@localhost:6379/0")
    data = run_json(capsys, "stack", "--url", "redis://:s3cret@localhost:6379/0")
    assert "s3cret" not in json.dumps(data)


def test_stack_command_shows_the_summarizer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "stack", "--url", "summarize::memory://")
    assert code == 0, err
    assert "summarizer=ExtractiveSummarizer(max_chars=2000))" in out
    url = (
        "summarize?summarizer=litellm&summarizer.model=gpt-4o-mini"
        '&summarizer.completion_kwargs={"api_key":"sk-s3cret"}::memory://'
    )
    data = run_json(capsys, "stack", "--url", url)
    assert data["components"][0].endswith(
        "summarizer=LiteLLMSummarizer(model='gpt-4o-mini', timeout=30.0, retries=2))"
    )
    assert "s3cret" not in json.dumps(data)


def test_url_before_or_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    before = run_json(capsys, "--url", url, "stack")
    after = run_json(capsys, "stack", "--url", url)
    assert before == after
    assert before["components"] == [f"sqlite:///{tmp_path}/x.db (synchronous=normal)"]


def test_config_file_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/cfg.db"\n[[layers]]\ntype = "summarize"\n'
    )
    data = run_json(capsys, "stack", "--config", str(config))
    assert data["source"] == f"config {config}"
    assert data["database"] == str(tmp_path / "cfg.db")
    code, _, err = run(capsys, "stack", "--config", str(config), "--url", "memory://")
    assert code == 1
    assert "not both" in err


def test_errors_exit_1_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "stack", "--url", "sumarize::memory://")
    assert code == 1
    assert out == ""
    assert err.startswith("chatlayers: error: ")
    assert "did you mean 'summarize'" in err
    code, _, err = run(
        capsys, "stack", "--url", "summarize?trigger_at=x::postgresql://u:s3cret@h/db"
    )
    assert code == 1
    assert "s3cret" not in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["replay"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main([])


# --- export / import / stats / delete / compact ------------------------------------------------


@needs_listing
def test_export_import_round_trip_sqlite_to_jsonl(
    tau_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("storage.stores.jsonl")
    exported = tmp_path / "tau.export.jsonl"
    code, out, err = run(capsys, "export", "--url", f"sqlite:///{tau_db}", "-o", str(exported))
    assert code == 0, err
    assert "exported 50 conversations (1,384 messages, raw record)" in out
    lines = exported.read_text().splitlines()
    assert len(lines) == 50
    first = json.loads(lines[0])
    assert {"user_id", "session_id", "agent_id", "messages", "chatlayers"} <= set(first)
    assert all(
        set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"}
        for m in first["messages"]
    )
    jsonl = f"jsonl://{tmp_path}/store"
    result = run_json(capsys, "import", "--url", jsonl, str(exported))
    assert result == {
        "conversations": 50,
        "conversations_left_empty": 0,
        "messages_stored": 1384,
        "messages_already_stored": 0,
    }
    again = run_json(capsys, "import", "--url", jsonl, str(exported))
    assert again["messages_stored"] == 0  # idempotent
    code, second, _ = run(capsys, "export", "--url", jsonl)
    assert code == 0
    assert second.splitlines() == lines  # identical fetches, key for key


@needs_listing
def test_export_filters(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user, session, length = _longest_tau()
    url = f"sqlite:///{tau_db}"
    code, out, _ = run(capsys, "export", "--url", url, "--user", user)
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert records
    assert {r["user_id"] for r in records} == {user}
    _, out, _ = run(capsys, "export", "--url", url, "--session", session)
    (record,) = [json.loads(line) for line in out.splitlines()]
    assert len(record["messages"]) == length


@needs_listing
def test_import_refused_whole_on_first_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = TAU.read_text().splitlines()[:4]
    broken = json.loads(lines[2])
    broken["messages"].insert(3, {"role": "tool", "tool_call_id": "call_nowhere", "content": "x"})
    lines[2] = json.dumps(broken)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    db = tmp_path / "target.db"
    code, out, err = run(capsys, "import", "--url", f"sqlite:///{db}", str(bad))
    assert code == 1
    assert out == ""
    assert f"{bad}:3: message 3: tool result 'call_nowhere'" in err
    assert not db.exists()  # nothing imported: the store was never even opened
    code, _, err = run(capsys, "stats", "--url", f"sqlite:///{db}")
    assert code == 1
    assert "no SQLite database" in err  # read-only commands never create an empty one
    assert "none is made: check the path" in err


def test_import_bad_json_and_bad_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "messages": []}\n{not json\n')
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert f"{bad}:2: not valid JSON" in err
    bad.write_text('{"messages": []}\n')
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert "neither 'session_id' nor 'id'" in err
    bad.write_text('{"id": "a", "user_id": "", "messages": []}\n')
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert f"{bad}:1: user_id must not be empty" in err
    bad.write_text(
        json.dumps(
            {
                "id": "a",
                "messages": [{"role": "user", "content": "x"}],
                "chatlayers": {"ids": ["1", "2"]},
            }
        )
        + "\n"
    )
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert "chatlayers.ids must be a list of 1 entries" in err
    bad.write_text(
        json.dumps(
            {
                "id": "a",
                "messages": [{"role": "user", "content": "x"}],
                "chatlayers": {"created_at": ["2024-01-01T00:00:00"]},
            }
        )
        + "\n"
    )
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert "has no timezone" in err
    bad.write_text(
        json.dumps(
            {
                "id": "a",
                "messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
                "chatlayers": {"ids": ["same", "same"]},
            }
        )
        + "\n"
    )
    code, _, err = run(capsys, "import", "--url", "memory://", str(bad))
    assert code == 1
    assert "chatlayers.ids repeats 'same'" in err
    code, _, err = run(capsys, "import", "--url", "memory://", str(tmp_path / "missing.jsonl"))
    assert code == 1
    assert "cannot read" in err


@needs_listing
def test_stats(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = run_json(capsys, "stats", "--url", f"sqlite:///{tau_db}")
    users = {json.loads(line)["metadata"]["user_id"] for line in TAU.read_text().splitlines()}
    assert stats["users"] == len(users)
    assert stats["sessions"] == 50
    assert stats["conversations"] == 50
    assert stats["agents"] == 1
    assert stats["messages"] == 1384
    with sqlite3.connect(tau_db) as conn:
        (size,) = conn.execute("SELECT sum(length(CAST(record AS BLOB))) FROM messages").fetchone()
    assert stats["bytes"] == size
    code, out, _ = run(capsys, "stats", "--url", f"sqlite:///{tau_db}")
    assert code == 0
    assert "messages" in out
    assert "1,384" in out


@needs_listing
def test_delete_user_and_one_conversation(tau_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user, session, _ = _longest_tau()
    url = default_url(tau_db)
    everyone = run_json(capsys, "stats", "--url", url)
    before = run_json(capsys, "stats", "--url", url, "--user", user)
    assert before["conversations"] >= 1
    code, out, _ = run(
        capsys, "delete", "--url", url, "--user", user, "--session", session, "--agent", "assistant"
    )
    assert code == 0
    assert "deleted conversation" in out
    assert "(1 conversation)" in out
    assert (
        run_json(capsys, "stats", "--url", url, "--user", user)["conversations"]
        == before["conversations"] - 1
    )
    code, out, err = run(capsys, "delete", "--url", url, "--user", user)
    if before["conversations"] > 1:
        assert code == 0
        assert f"deleted user {user!r}" in out
    else:  # its one conversation is gone: nothing is left to delete, and it says so
        assert code == 1
        assert f"nothing is stored for user {user!r}" in err
    assert run_json(capsys, "stats", "--url", url, "--user", user)["messages"] == 0
    total = run_json(capsys, "stats", "--url", url)
    assert total["users"] == everyone["users"] - 1
    assert total["messages"] == everyone["messages"] - before["messages"]
    code, _, err = run(capsys, "delete", "--url", url, "--user", user, "--agent", "assistant")
    assert code == 1
    assert "--agent needs --session" in err


def test_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", "--url", f"sqlite:///{tmp_path}/c.db")
    assert code == 1
    assert "rewrites a jsonl store's files" in err
    pytest.importorskip("storage.stores.jsonl")
    url = f"jsonl://{tmp_path}/store"
    assert run(capsys, "replay", "--url", url, str(SWE))[0] == 0
    result = run_json(capsys, "compact", "--url", url)
    assert result["dropped"] == 0
    code, out, _ = run(capsys, "compact", "--url", url)
    assert code == 0
    assert out.startswith("compacted ")


class UnlistedStore(AsyncContextMixin):
    """A store that cannot list its keys: every protocol method, no ``list_keys``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store = InMemoryChatStorage()  # held privately: find_ability must not see it

    @classmethod
    def from_url(cls, url: str, **options: Any) -> UnlistedStore:
        return cls(url)

    def describe(self) -> str:
        return self.url  # the password too: the stack's redaction must hide it

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self._store.save(key, message)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        return await self._store.save_messages(key, messages)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        return await self._store.fetch(key, limit=limit)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        return await self._store.fetch_all_chats(user_id, session_id)

    async def delete(self, key: ChatKey) -> None:
        await self._store.delete(key)

    async def delete_user(self, user_id: str) -> None:
        await self._store.delete_user(user_id)

    async def aclose(self) -> None:
        await self._store.aclose()


@pytest.fixture
def unlisted_scheme() -> Iterator[str]:
    registry.register("stores", "unlisted", UnlistedStore)
    yield "unlisted"
    registry.unregister("stores", "unlisted")


def test_listing_needed(capsys: pytest.CaptureFixture[str], unlisted_scheme: str) -> None:
    # A store that cannot list keys: the command says so before touching the store.
    code, _, err = run(capsys, "stats", "--url", f"{unlisted_scheme}://:s3cret@localhost:1/0")
    assert code == 1
    assert "cannot do (it does not implement list_keys)" in err
    assert "s3cret" not in err


# --- output -------------------------------------------------------------------------------


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_table_in_a_terminal_plain_when_piped() -> None:
    tty = _TTY()
    Output(json_mode=False, out=tty).table("t", ("a", "b"), [("x", 1)])
    assert "┃" in tty.getvalue() or "│" in tty.getvalue()
    piped = io.StringIO()
    Output(json_mode=False, out=piped).table("t", ("a", "b"), [("x", 1)])
    assert piped.getvalue() == "t\na  b\nx  1\n"
    assert Output(json_mode=True, out=_TTY()).rich is False


def test_console_script_subprocess(tmp_path: Path) -> None:
    env = {"CHATLAYERS_PII_SECRET": SECRET, "HOME": str(tmp_path)}
    result = run_script(["replay", "--json", str(SWE)], tmp_path, env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["messages_stored"] == 24
    assert report["database"] == str(tmp_path / "chatlayers.db")  # the default stack's file
    assert (tmp_path / "chatlayers.db").exists()


def test_percentiles_are_nearest_rank() -> None:
    report = ReplayReport(fetch_seconds=[float(i) for i in range(1, 101)])
    assert report.percentile(0.5) == 50.0
    assert report.percentile(0.99) == 99.0
    assert report.percentile(1.0) == 100.0
    assert ReplayReport().percentile(0.5) is None


def test_closed_pipe_ends_quietly(tau_db: Path) -> None:
    """``chatlayers export | head -c 100``: the reader leaves early, no traceback."""
    script = Path(sys.executable).with_name("chatlayers")
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import sys; from storage.cli import main; sys.exit(main())"]
    )
    proc = subprocess.Popen(
        [*command, "export", "--url", f"sqlite:///{tau_db}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()  # like `head` exiting
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err


def test_replay_defaults_to_a_token_budget_and_summarizes_the_agent_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "t")
    report = run_json(capsys, "replay", str(TAU), str(SWE))
    assert any("trigger_tokens=4000" in line for line in report["stack"])
    assert report["database"] == str(tmp_path / "chatlayers.db")
    by_set = {row["set"]: row for row in report["sets"]}
    swe = by_set["swe_agent_marshmallow_1867_fc"]
    assert swe["summarized"] == 1
    assert int(swe["view_tokens"].replace(",", "")) < int(swe["raw_tokens"].replace(",", ""))
    assert by_set["tau_bench_airline_gpt4o_trial0"]["summarized"] > 0
    assert report["summarizer_calls"] >= 1
    # another command without --url keeps the library default (same database file)
    code, out, err = run(capsys, "stack")
    assert code == 0, err
    assert "trigger_tokens" not in out


def test_show_of_a_missing_conversation_fails_the_same_with_or_without_user(
    tau_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = default_url(tau_db)
    with_user = run(capsys, "show", "--url", url, "--user", "nobody", "--session", "nowhere")
    without = run(capsys, "show", "--url", url, "--session", "nowhere")
    assert with_user[0] == without[0] == 1
    assert "no messages stored" in with_user[2]
    user, session, _ = _longest_tau()
    code, out, err = run(capsys, "show", "--url", url, "--user", user, "--session", session,
                         "--limit", "0")  # fmt: skip
    assert code == 0, err
    assert "no message asked for" in out + err


def test_a_model_view_export_reimports(
    tau_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summarized view (the policy and the summary in one leading message) is a history
    ``import`` accepts: before, its second system message was refused."""
    user, session, _ = _longest_tau()
    target = tmp_path / "view.json"
    code, _, err = run(
        capsys, "export", "--url", default_url(tau_db), "--user", user, "--session", session,
        "--format", "json", "--model-view", "-o", str(target),
    )  # fmt: skip
    assert code == 0, err
    exported = json.loads(target.read_text())[0]["messages"]
    assert [m["role"] for m in exported].count("system") == 1
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    code, _, err = run(capsys, "import", "--url", copy, str(target))
    assert code == 0, err
    again = run_json(capsys, "show", "--url", copy, "--user", user, "--session", session, "--raw")
    assert [m["content"] for m in again["messages"]] == [m["content"] for m in exported]


def test_show_ids_gives_what_rewind_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The path a user takes: read the ids off `show --ids`, rewind to one of them.
    db = tmp_path / "c.db"

    async def fill() -> None:
        async with SQLiteChatStorage(db) as store:
            for turn in range(3):
                await store.save_messages(
                    ChatKey("u", "trip", "a"),
                    [ChatMessage("user", f"question {turn}"), ChatMessage("assistant", f"{turn}")],
                )

    anyio.run(fill)
    url = f"sqlite:///{db}"
    code, out, err = run(capsys, "show", "--url", url, "--session", "trip", "--ids")
    assert code == 0, err
    ids = re.findall(r"^\[(\d)\] (?:user|assistant)  id=(\S+)$", out, re.M)
    assert [int(index) for index, _ in ids] == list(range(6))
    stored = run_json(capsys, "show", "--url", url, "--session", "trip")["chatlayers"]["ids"]
    assert [found for _, found in ids] == stored
    code, out, err = run(capsys, "rewind", "--url", url, "--session", "trip", "--to", ids[3][1])
    assert code == 0, err
    _, out, _ = run(capsys, "show", "--url", url, "--session", "trip")
    assert "[3] assistant" in out
    assert "[4]" not in out
    assert "id=" not in out  # only with --ids
