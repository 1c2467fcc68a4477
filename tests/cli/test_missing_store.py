"""A ``chatlayers`` command on a mistyped store path: the commands that only read refuse a
SQLite file or JSONL directory that does not exist, and leave nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import run

READS = [
    ["stats"],
    ["show", "--session", "s"],
    ["export"],
    ["sessions", "--user", "u"],
    ["search", "--user", "u", "words"],
    ["why", "--session", "s", "--last"],
    ["delete", "--user", "u", "--yes"],
]
STORES = {
    "sqlite": ("sqlite:///{}", "no SQLite database"),
    "jsonl": ("jsonl://{}", "no JSONL store"),
}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("argv", READS, ids=lambda argv: argv[0])
def test_a_read_command_refuses_a_missing_store_and_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, argv: list[str]
) -> None:
    url, refusal = STORES[store]
    typo = tmp_path / "typo" / "chats"
    code, out, err = run(capsys, "--url", url.format(typo), *argv)
    assert code == 1, out + err
    assert refusal in err
    assert "check the path" in err
    assert list(tmp_path.iterdir()) == []


def test_a_read_command_on_an_existing_empty_jsonl_directory_reads_an_empty_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--url", f"jsonl://{tmp_path}", "stats", "--json")
    assert code == 0, err
    assert '"messages": 0' in out


# Commands that change only conversations already stored: on a missing store there is nothing
# to change, so they refuse it as the read commands do instead of leaving an empty one behind.
CHANGES = [
    ["rewind", "--session", "s", "--to", "x"],
    ["fork", "--session", "s", "--to-session", "t"],
    ["compact"],
    ["compact", "--session", "s", "--summary", "text"],
    ["purge", "--dry-run"],
    ["purge", "--yes"],
]


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("argv", CHANGES, ids=lambda argv: "-".join(argv[:2]))
def test_a_command_changing_stored_conversations_refuses_a_missing_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, argv: list[str]
) -> None:
    url, refusal = STORES[store]
    if argv == ["compact"] and store == "sqlite":
        refusal = "rewrites a jsonl store's files"  # refused before the store is opened
    typo = tmp_path / "typo" / "chats"
    stack = f"summarize::{url.format(typo)}?retention=30d"  # what compact and purge need
    code, out, err = run(capsys, "--url", stack, *argv)
    assert code == 1, out + err
    assert refusal in err
    assert list(tmp_path.iterdir()) == []


def test_import_and_replay_still_create_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.cli.helpers import few

    conversations = few(tmp_path, 2)
    for name, argv in (("imported", ["import"]), ("replayed", ["replay"])):
        for url in (f"sqlite:///{tmp_path}/{name}.db", f"jsonl://{tmp_path}/{name}"):
            code, out, err = run(capsys, "--url", url, *argv, str(conversations))
            assert code == 0, out + err
    assert {p.name for p in tmp_path.iterdir()} >= {
        "imported.db",
        "imported",
        "replayed.db",
        "replayed",
    }


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("command", ["migrate", "verify"])
def test_migrate_and_verify_refuse_a_missing_source_and_create_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, command: str
) -> None:
    url, refusal = STORES[store]
    typo, target = tmp_path / "typo" / "chats", tmp_path / "target.db"
    argv = ["--from", url.format(typo), "--to", f"sqlite:///{target}"]
    code, out, err = run(capsys, command, *argv)
    assert code == (2 if command == "verify" else 1), out + err  # verify: 1 is "they differ"
    assert refusal in err
    assert not (tmp_path / "typo").exists()
