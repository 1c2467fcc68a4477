"""``chatlayers eval``: the quality measure through the command a user runs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from storage.eval.measure import DEFAULT_EVAL_URLS
from tests.cli.helpers import TAU, few, run, run_script


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def check_consistent(figures: dict[str, Any], conversations: int) -> None:
    assert figures["conversations"] == conversations
    assert 0 <= figures["summarized"] <= conversations
    for kept in ("kept_view", "kept_truncation", "kept_last_n"):
        assert 0 <= figures[kept] <= figures["facts"]
    if figures["facts"]:
        assert figures["retention"] == figures["kept_view"] / figures["facts"]
        assert figures["truncation_retention"] == figures["kept_truncation"] / figures["facts"]
    assert sum(figures["missed"].values()) <= figures["facts"] - figures["kept_view"]
    assert figures["view_tokens"] <= figures["raw_tokens"]
    if figures["summarized"]:
        assert figures["summarizer_calls"] >= figures["summarized"]
        assert figures["summarized_view_tokens"] < figures["summarized_raw_tokens"]
    for step in ("clears_made", "collapses_made", "trims_made"):
        assert figures[step] >= 0


def test_default_stacks_on_a_few_conversations_give_consistent_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "eval", str(few(tmp_path)), "--json")
    assert code == 0, err
    reports = json.loads(out)
    assert [r["stack"] for r in reports] == list(DEFAULT_EVAL_URLS)
    for report in reports:
        (figures,) = report["sets"].values()
        check_consistent(figures, 6)
        assert figures["points"] > 0
        assert report["total"] == figures
    assert sorted(p.name for p in tmp_path.iterdir()) == ["few.openai.jsonl"]  # nothing kept


def test_shipped_tau_bench_runs_keep_their_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "eval", str(TAU), "--json")
    assert code == 0, err
    for report in json.loads(out):
        figures = report["total"]
        check_consistent(figures, 50)
        # The default summarizer keeps what the next message needs, far more than truncation
        # to the same characters keeps, the goal of issue 21 (the table in
        # docs/summarizing.md has the figures: 0.205 on the token budget, 0.154 on the pair).
        assert figures["retention"] >= 0.95, report["stack"]
        assert figures["retention"] >= figures["truncation_retention"] + 0.15, report["stack"]
        assert figures["view_ratio"] <= 0.7


def test_several_urls_a_table_and_a_plain_stack_without_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = few(tmp_path, 3)
    code, out, err = run(
        capsys,
        "eval",
        str(path),
        "--url",
        "summarize?trigger_at=4::sqlite:///mine.db",
        "--url",
        "memory://",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "chatlayers eval"
    assert lines[1].split()[:4] == ["stack", "set", "conversations", "summarized"]
    assert lines[2].startswith("summarize?trigger_at=4::sqlite:///mine.db  few ")
    assert lines[3].split()[:5] == ["memory://", "few", "3", "0", "0"]  # never compacted
    assert "retention:" in err  # what the columns mean, for a person
    assert not (tmp_path / "mine.db").exists()  # a fresh store elsewhere, removed after


def test_compactions_made_by_each_no_model_step_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "summarize?trigger_tokens=3000&trim_tool_results=600&trim_keep_turns=1::memory://"
    path = few(tmp_path, 12)
    code, out, err = run(capsys, "eval", str(path), "--url", url, "--json")
    assert code == 0, err
    figures = json.loads(out)[0]["total"]
    check_consistent(figures, 12)
    assert figures["trims_made"] > 0  # trimming made compactions with no summarizer call
    code, out, err = run(capsys, "eval", str(path), "--url", url)
    assert code == 0, err
    header, row = out.splitlines()[1:3]
    assert header.split()[-3:] == ["cleared", "collapsed", "trimmed"]
    assert row.split()[-3:] == [
        str(figures["clears_made"]),
        str(figures["collapses_made"]),
        str(figures["trims_made"]),
    ]


def test_a_server_store_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "eval", str(few(tmp_path, 1)), "--url", "redis://:pw@h:1/0")
    assert code == 1
    assert "fresh stores" in err
    assert "pw" not in err


def test_url_before_the_command_is_one_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--url", "memory://", "eval", str(few(tmp_path, 1)), "--json")
    assert code == 0, err
    assert [r["stack"] for r in json.loads(out)] == ["memory://"]


def test_facts_replaces_the_extractor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_facts.py").write_text(
        "import re\n"
        "def codes(text):  # six capitals and digits: reservation ids, flight numbers\n"
        "    return set(re.findall(r'\\b(?=[A-Z]*[0-9])[A-Z0-9]{6}\\b', text))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = few(tmp_path, 12)
    url = "summarize?trigger_at=6::memory://"
    code, out, err = run(capsys, "eval", str(path), "--url", url, "--json")
    assert code == 0, err
    default = json.loads(out)[0]["total"]
    code, out, err = run(
        capsys, "eval", str(path), "--url", url, "--facts", "my_facts:codes", "--json"
    )
    assert code == 0, err
    mine = json.loads(out)[0]["total"]
    assert mine["points"] == default["points"]  # the same replay...
    assert 0 < mine["facts"] < default["facts"]  # ...other facts: only the codes
    assert all(re.fullmatch(r"[A-Z0-9]{6}", fact) for fact in mine["missed"])
    for bad in ("my_facts", "nowhere_at_all:x", "my_facts:absent"):
        code, _, err = run(capsys, "eval", str(path), "--facts", bad)
        assert code == 1, bad
        assert "--facts" in err


def test_facts_module_beside_the_user_is_found_or_the_error_says_pythonpath(
    tmp_path: Path,
) -> None:
    """The path a user takes: the ``chatlayers`` console script, run where their extractor
    is. A console script does not import from the current directory, so the error says
    how to make it (``PYTHONPATH=.``), and with it the extractor is used."""
    (tmp_path / "my_facts.py").write_text("def none(text):\n    return set()\n")
    path = few(tmp_path, 2)
    command = ["eval", str(path), "--url", "summarize?trigger_at=2::memory://"]
    command += ["--facts", "my_facts:none"]
    bare = run_script(command, tmp_path, {"HOME": str(tmp_path)})
    assert bare.returncode == 1
    assert "my_facts.py is here, but not on the import path: run with PYTHONPATH=." in bare.stderr
    found = run_script([*command, "--json"], tmp_path, {"HOME": str(tmp_path), "PYTHONPATH": "."})
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["total"]["facts"] == 0  # the extractor finds none


def test_a_stack_that_cannot_be_built_is_refused_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second stack's mistake is found before the first stack's whole run, and
    nothing claims to be measuring."""
    good, bad = "summarize?trigger_at=6::memory://", "summarize?summarizer=litellm::memory://"
    code, out, err = run(capsys, "eval", str(few(tmp_path, 3)), "--url", good, "--url", bad)
    assert code == 1
    assert "summarizer 'litellm' needs option 'model'" in err
    assert "measuring" not in err + out
    assert "replaying" not in err + out
