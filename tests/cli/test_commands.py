"""The newer ``chatlayers`` commands and the polish a new user asked for: sessions, search,
purge, compact, import --system, export formats, delete of a session, confirmations, help
texts, did-you-mean, plurals, URLs as typed, and the command registry."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.cli import COMMAND_MODULES, build_parser, main
from storage.cli.confirm import confirm
from storage.cli.registry import command, registered
from storage.cli.transcript import fence, markdown_conversation
from storage.config import open_storage
from storage.errors import ConfigError
from storage.layers.summarizing.header import framed
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.sqlite import SQLiteChatStorage
from tests.cli.helpers import run

SECRET = "test-secret-0123456789abcdef"
DAY = timedelta(days=1)
NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def turn(text: str, when: datetime, n: int) -> list[ChatMessage]:
    return [
        ChatMessage("user", text, created_at=when, id=f"u{n}-{text}"),
        ChatMessage(
            "assistant",
            None,
            [ToolCall(f"call-{n}", "lookup", '{"q": "' + text + '"}')],
            created_at=when,
            id=f"a{n}-{text}",
        ),
        ChatMessage("tool", '{"found": true}', tool_call_id=f"call-{n}", created_at=when),
        ChatMessage("assistant", f"answer about {text}", created_at=when, id=f"b{n}-{text}"),
    ]


def fill(db: Path, **options: Any) -> None:
    async def go() -> None:
        async with SQLiteChatStorage(db, **options) as store:
            await store.save_messages(ChatKey("ada", "trip", "assistant"), turn("oslo", NOW, 1))
            await store.save_messages(ChatKey("ada", "trip", "planner"), turn("bergen", NOW, 2))
            await store.save_messages(
                ChatKey("ada", "old", "assistant"), turn("rome", NOW - 40 * DAY, 3)
            )
            await store.save_messages(
                ChatKey("ada", "older", "assistant"), turn("paris", NOW - 50 * DAY, 4)
            )
            await store.save_messages(ChatKey("bob", "trip", "assistant"), turn("oslo", NOW, 5))

    anyio.run(go)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "chats.db"
    fill(path)
    return path


def url(db: Path, query: str = "") -> str:
    return f"sqlite:///{db}{query}"


# --- sessions and search ----------------------------------------------------------------------


def test_sessions_newest_first_and_pages(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "sessions", "--url", url(db), "--user", "ada")
    assert [s["session_id"] for s in result["sessions"]] == ["trip", "old", "older"]
    assert result["sessions"][0]["agents"] == ["assistant", "planner"]
    assert result["sessions"][0]["message_count"] == 8
    assert result["next_cursor"] is None
    first = run_json(capsys, "sessions", "--url", url(db), "--user", "ada", "--limit", "2")
    assert [s["session_id"] for s in first["sessions"]] == ["trip", "old"]
    rest = run_json(
        capsys, "sessions", "--url", url(db), "--user", "ada", "--cursor", first["next_cursor"]
    )
    assert [s["session_id"] for s in rest["sessions"]] == ["older"]
    every = run_json(capsys, "sessions", "--url", url(db), "--user", "ada", "--limit", "1", "--all")
    assert [s["session_id"] for s in every["sessions"]] == ["trip", "old", "older"]
    code, out, err = run(capsys, "sessions", "--url", url(db), "--user", "ada", "--limit", "1")
    assert code == 0
    assert out.startswith("1 session of user 'ada'")
    assert "--cursor" in err


def test_search_finds_only_the_users_messages(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "search", "--url", url(db), "--user", "bob", "oslo")
    assert result["hits"]
    assert {h["session_id"] for h in result["hits"]} == {"trip"}
    assert all("oslo" in h["snippet"].lower() for h in result["hits"])
    code, out, _ = run(capsys, "search", "--url", url(db), "--user", "ada", "bergen")
    assert code == 0
    assert "planner" in out
    assert re.match(r"\d+ hits? for 'bergen'", out)


HIDES = "hides it (its declaration: it cannot offer it over what it stores)"


def test_search_through_an_encrypting_layer_names_the_layer_that_hides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.layers.encrypting import DEFAULT_KEY_ENV, new_master_key

    monkeypatch.setenv(DEFAULT_KEY_ENV, new_master_key())
    ring = tmp_path / "keyring.db"
    stack = (
        f"summarize::scrub::encrypt?keyring={ring}&create_keyring=true::{url(tmp_path / 'e.db')}"
    )
    code, _, err = run(capsys, "search", "--url", stack, "--user", "ada", "oslo")
    assert code == 1
    named = err.split("which this stack does not offer: ")[1]
    assert named.startswith("EncryptingChatStorage(keyring=")
    assert named.rstrip().endswith(HIDES)
    assert "does not implement it" not in err  # the layers above only pass on what it hid


def test_a_stack_without_the_ability_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from storage.config.registry import registry
    from tests.cli.test_cli import UnlistedStore

    registry.register("stores", "bare", UnlistedStore)
    try:
        for argv in (("sessions", "--user", "u"), ("search", "--user", "u", "x"), ("purge", "-y")):
            code, _, err = run(capsys, *argv, "--url", "bare://:pw@host/0")
            assert code == 1, argv
            assert "which this stack does not offer" in err, argv
            assert "does not" in err
            assert "pw" not in err
    finally:
        registry.unregister("stores", "bare")


# --- purge ----------------------------------------------------------------------------------


def test_purge_dry_run_then_yes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    fill(db)
    retained = url(db, "?retention=30d")
    code, out, _ = run(capsys, "purge", "--url", retained, "--dry-run")
    assert code == 0
    assert "would purge 8 messages older than 30d in 2 conversations" in out
    assert "nothing deleted" in out
    code, _, err = run(capsys, "purge", "--url", retained)  # no terminal, no --yes
    assert code == 1
    assert "no terminal to ask; re-run with --yes" in err
    assert run_json(capsys, "stats", "--url", url(db))["messages"] == 20
    result = run_json(capsys, "purge", "--url", retained, "--yes")
    assert result["messages_deleted"] == 8
    assert run_json(capsys, "stats", "--url", url(db))["messages"] == 12


def test_purge_without_retention_is_explained(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "purge", "--url", url(db), "--yes")
    assert code == 1
    assert "has none (set retention=" in err


# --- delete ---------------------------------------------------------------------------------


def test_delete_a_whole_session_asks_first(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("delete", "--url", url(db), "--user", "ada", "--session", "trip")
    code, out, _ = run(capsys, *base, "--dry-run")
    assert code == 0
    assert "would delete session 'trip' of user 'ada' (2 conversations)" in out
    code, _, err = run(capsys, *base)
    assert code == 1
    assert "refusing to delete session 'trip' of user 'ada' (2 conversations)" in err
    assert run_json(capsys, "stats", "--url", url(db), "--user", "ada")["conversations"] == 4
    code, out, _ = run(capsys, *base, "--yes")
    assert code == 0
    assert "deleted session 'trip' of user 'ada' (2 conversations)" in out
    stats = run_json(capsys, "stats", "--url", url(db), "--user", "ada")
    assert stats["conversations"] == 2
    # bob's session of the same name is untouched
    assert run_json(capsys, "stats", "--url", url(db), "--user", "bob")["conversations"] == 1
    # one conversation needs no confirmation, and the plural is right
    code, out, _ = run(
        capsys, "delete", "--url", url(db), "--user", "bob", "--session", "trip", "--agent",
        "assistant",
    )  # fmt: skip
    assert code == 0
    assert out.rstrip().endswith("(1 conversation)")


def test_delete_user_asks_and_yes_deletes(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "delete", "--url", url(db), "--user", "ada")
    assert code == 1
    assert "(4 conversations)" in err
    result = run_json(capsys, "delete", "--url", url(db), "--user", "ada", "--yes")
    assert result == {"deleted": "user 'ada'", "conversations": 4}
    assert run_json(capsys, "stats", "--url", url(db))["users"] == 1


def test_confirm_asks_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = io.StringIO()
    confirm("delete 2 conversations", yes=False, stdin=Tty("y\n"), stderr=err)
    assert "Delete 2 conversations? [y/N]" in err.getvalue()
    with pytest.raises(ConfigError, match="cancelled"):
        confirm("delete 2 conversations", yes=False, stdin=Tty("\n"), stderr=io.StringIO())
    with pytest.raises(ConfigError, match="no terminal"):
        confirm("delete 2 conversations", yes=False, stdin=io.StringIO("y\n"))
    confirm("delete 2 conversations", yes=True, stdin=io.StringIO())


# --- compact --------------------------------------------------------------------------------


def test_compact_one_conversation(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_url = f"summarize::{url(db)}"
    code, out, err = run(
        capsys, "compact", "--url", stack_url, "--user", "ada", "--session", "trip",
        "--summary", "Ada asked about Oslo.",
    )  # fmt: skip
    assert code == 0, err
    assert "with the given summary: the model view is now 1 message" in out
    assert "raw record keeps 4 messages" in out
    shown = run_json(capsys, "show", "--url", stack_url, "--user", "ada", "--session", "trip")
    assert shown["messages"][0]["content"] == framed("Ada asked about Oslo.")
    assert len(shown["messages"]) == 1
    # Without a summarizing layer it says what is needed.
    code, _, err = run(capsys, "compact", "--url", url(db), "--user", "ada", "--session", "trip")
    assert code == 1
    assert "needs a summarizing layer (summarize::...)" in err


def test_compact_names_a_conversation_as_show_does(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --agent (and --user), compact takes the session's only agent and user, as
    show does; with several it says which are there."""

    async def save_support() -> None:
        async with SQLiteChatStorage(db) as store:
            await store.save_messages(ChatKey("cy", "desk", "support"), turn("lima", NOW, 6))

    anyio.run(save_support)
    stack_url = f"summarize::{url(db)}"
    code, out, err = run(
        capsys, "compact", "--url", stack_url, "--session", "desk", "--summary", "Lima.",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("compacted 'cy'/'desk'/'support' with the given summary")
    shown = run_json(capsys, "show", "--url", stack_url, "--session", "desk")
    assert shown["messages"][0]["content"] == framed("Lima.")
    # "trip" has two agents and two users: the agent defaults to "assistant", the user is asked.
    code, _, err = run(capsys, "compact", "--url", stack_url, "--session", "trip")
    assert code == 1
    assert "--user is needed" in err
    code, _, err = run(capsys, "compact", "--url", stack_url, "--user", "ada")
    assert code == 1
    assert "give --session" in err


# --- import --system ------------------------------------------------------------------------


def test_import_can_strip_a_leading_system_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.jsonl"
    messages = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    source.write_text(json.dumps({"id": "c1", "user_id": "u", "messages": messages}) + "\n")
    for policy, roles in (
        ("strip", ["user", "assistant"]),
        ("keep", ["system", "user", "assistant"]),
    ):
        target = f"sqlite:///{tmp_path}/{policy}.db"
        code, out, err = run(capsys, "import", "--url", target, str(source), "--system", policy)
        assert code == 0, err
        assert out.startswith("imported 1 conversation:")
        shown = run_json(capsys, "show", "--url", target, "--session", "c1", "--raw")
        assert [m["role"] for m in shown["messages"]] == roles
    # Stripping keeps the other messages' ids: importing with keep afterwards adds only it.
    code, out, _ = run(capsys, "import", "--url", f"sqlite:///{tmp_path}/strip.db", str(source))
    assert "1 message stored, 2 already present" in out


# --- export formats -------------------------------------------------------------------------


def test_export_markdown_transcript(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "export", "--url", url(db), "--user", "bob", "--format", "md")
    assert code == 0, err
    assert out.startswith("## bob / trip / assistant\n")
    assert "*model view, 4 messages*" in out
    assert re.search(r"^### user · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$", out, re.M)
    assert '**tool call** `lookup` (`call-5`)\n\n```json\n{\n  "q": "oslo"\n}\n```' in out
    assert "### tool result `call-5`" in out
    assert '```json\n{\n  "found": true\n}\n```' in out
    assert "answer about oslo" in out
    assert "exported 1 conversation (4 messages, model view)" in err


def test_content_cannot_break_the_transcript_structure() -> None:
    assert fence("a ``` b") == "````\na ``` b\n````"
    assert fence("plain", "json") == "```json\nplain\n```"
    key = ChatKey("u", "s", "a")
    text = markdown_conversation(key, [ChatMessage("system", "# Policy\n## Rules\nno #tag")], "v")
    assert "\\# Policy\n\\## Rules\nno #tag" in text
    assert [line for line in text.splitlines() if line.startswith("#")] == [
        "## u / s / a",
        "### system · time unknown",
    ]


def test_export_json_documents_import_back(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "all.json"
    code, out, err = run(capsys, "export", "--url", url(db), "--format", "json", "-o", str(target))
    assert code == 0, err
    assert "(20 messages, raw record)" in out  # json moves data: the raw record by default
    documents = json.loads(target.read_text())
    assert len(documents) == 5
    assert {d["user_id"] for d in documents} == {"ada", "bob"}
    copy = f"sqlite:///{tmp_path}/copy.db"
    code, out, err = run(capsys, "import", "--url", copy, str(target))
    assert code == 0, err
    assert run_json(capsys, "stats", "--url", copy)["messages"] == 20


def test_export_raw_versus_model_view(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_url = f"summarize::{url(db)}"
    assert main(["compact", "--url", stack_url, "--user", "bob", "--session", "trip",
                 "--summary", "Bob asked about Oslo."]) == 0  # fmt: skip
    capsys.readouterr()
    args = ("export", "--url", stack_url, "--user", "bob")
    model = run(capsys, *args, "--format", "json", "--model-view")[1]
    raw = run(capsys, *args, "--format", "json")[1]  # json defaults to the raw record
    assert [m["content"] for m in json.loads(model)[0]["messages"]] == [
        framed("Bob asked about Oslo.")
    ]
    assert len(json.loads(raw)[0]["messages"]) == 4
    jsonl = run(capsys, *args)[1]  # jsonl defaults to the raw record (what import restores)
    assert len(json.loads(jsonl)["messages"]) == 4
    jsonl_model = run(capsys, *args, "--model-view")[1]
    assert len(json.loads(jsonl_model)["messages"]) == 1


# --- polish ---------------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_flag_and_argument_has_help_text() -> None:
    missing = [
        f"{path}: {'/'.join(action.option_strings) or action.dest}"
        for path, action in _walk(build_parser(), "chatlayers")
        if not action.help
    ]
    assert missing == []
    names = {spec.name for spec in registered()}
    assert {"sessions", "search", "purge", "compact", "export", "import", "delete"} <= names


def test_a_mistyped_flag_gets_the_subcommands_usage_and_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["show", "--sesion", "s1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: chatlayers show ")
    assert "--sesion (did you mean --session?)" in err
    with pytest.raises(SystemExit):
        main(["sessions", "--user", "u", "--limt", "3"])
    err = capsys.readouterr().err
    assert err.startswith("usage: chatlayers sessions ")
    assert "did you mean --limit?" in err


def test_sqlite_with_two_slashes_is_refused_with_the_right_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "stats", "--url", "sqlite://x.db")
    assert code == 1
    assert "sqlite:///x.db" in err
    assert not (tmp_path / "x.db").exists()


def test_urls_are_printed_as_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typed = f"jsonl://{tmp_path}/chats"
    code, out, err = run(capsys, "stack", "--url", typed)
    assert code == 0, err
    assert typed in out
    assert "jsonl:////" not in out


def test_replay_plurals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"id": "c", "messages": [{"role": "user", "content": "hi"}]}))
    code, _, err = run(capsys, "replay", "--url", f"sqlite:///{tmp_path}/p.db", str(source))
    assert code == 0, err
    assert "replaying 1 conversation (1 message) into" in err


def test_a_command_module_registers_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("tests._hello_command")

    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default="world", help="who to greet")

    async def hello(args: argparse.Namespace, out: Any, stack: Any) -> int:
        out.text(f"hello {args.name} (stack {stack})")
        return 0

    module.hello = command(  # type: ignore[attr-defined]
        "hello-test", help="say hello", arguments=arguments, needs_stack=False
    )(hello)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr("storage.cli.COMMAND_MODULES", (*COMMAND_MODULES, module.__name__))
    code, out, _ = run(capsys, "hello-test", "--name", "ada")
    assert (code, out) == (0, "hello ada (stack None)\n")
    with pytest.raises(ValueError, match="registered twice"):
        command("hello-test", help="again")(arguments)  # type: ignore[arg-type]


def test_open_storage_is_what_the_cli_uses(db: Path) -> None:
    # The CLI and the library build the same stack from a URL.
    stack = open_storage(url(db))
    assert stack.describe().splitlines()[-1].startswith("sqlite:///")


def test_a_json_export_of_a_summarized_stack_imports_back(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_url = f"summarize::{url(db)}"
    assert main(["compact", "--url", stack_url, "--user", "bob", "--session", "trip",
                 "--summary", "Bob asked about Oslo."]) == 0  # fmt: skip
    target = tmp_path / "bob.json"
    code, _, err = run(capsys, "export", "--url", stack_url, "--format", "json", "-o", str(target))
    assert code == 0, err
    copy = f"sqlite:///{tmp_path}/copy.db"
    code, _, err = run(capsys, "import", "--url", copy, str(target))
    assert code == 0, err
    assert run_json(capsys, "stats", "--url", copy)["messages"] == 20  # every raw message


def test_a_conversation_emptied_by_strip_is_not_counted_as_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.jsonl"
    only_system = {"id": "c0", "user_id": "u", "messages": [{"role": "system", "content": "x"}]}
    chat = {"id": "c1", "user_id": "u", "messages": [{"role": "user", "content": "hi"}]}
    source.write_text(json.dumps(only_system) + "\n" + json.dumps(chat) + "\n")
    target = f"sqlite:///{tmp_path}/t.db"
    code, out, err = run(capsys, "import", "--url", target, str(source), "--system", "strip")
    assert code == 0, err
    assert out.startswith("imported 1 conversation: 1 message stored")
    assert "1 conversation left empty by --system strip" in out
