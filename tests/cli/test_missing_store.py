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
