"""``chatlayers diff``: two stacks on the same conversations, through the command a user runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from storage.cli import main
from storage.eval.diff import first_difference
from storage.message import ChatMessage
from tests.cli.helpers import few, run
from tests.cli.test_migrate import chatlayers, env

TOKENS = "summarize?trigger_tokens=3000::memory://"
PAIRS = "summarize?trigger_at=6::memory://"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "diff-tests")
    monkeypatch.chdir(tmp_path)


def test_two_budgets_differ_with_the_eval_measures_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = few(tmp_path)
    code, out, err = run(capsys, "diff", str(path), "--url", TOKENS, "--url", PAIRS, "--json")
    assert code == 1, err  # the views differ
    report = json.loads(out)
    assert report["stacks"] == {"A": TOKENS, "B": PAIRS}
    assert report["equal"] is False
    conversations = report["conversations"]
    assert len(conversations) == 6
    assert report["differing"] == sum(not c["equal"] for c in conversations) > 0
    for c in conversations:
        assert c["equal"] == (c["first_difference"] is None)
        for side in ("A", "B"):
            figures = c[side]
            assert figures["view_tokens"] <= figures["raw_tokens"]
            assert figures["summarized"] == (figures["view_tokens"] < figures["raw_tokens"])
            assert figures["pii"] == {}  # no scrubbing layer
        difference = c["first_difference"]
        if difference is not None:
            assert difference["fields"]
            assert c["A"]["summarized"] or c["B"]["summarized"]
    # The figures are the eval measure's own: the same totals as `chatlayers eval`.
    code, out, err = run(capsys, "eval", str(path), "--url", TOKENS, "--url", PAIRS, "--json")
    assert code == 0, err
    for side, evaluated in zip("AB", json.loads(out), strict=True):
        mine = report["total"][side]
        for name in ("facts", "kept_view", "points", "summarizer_calls", "view_tokens"):
            assert mine[name] == evaluated["total"][name], (side, name)
        assert mine["retention"] == evaluated["total"]["retention"]
        per_conversation = sum(c[side]["summarizer_calls"] for c in conversations)
        assert per_conversation == mine["summarizer_calls"]


def test_the_same_stack_over_two_stores_is_equal_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = few(tmp_path, 4)
    code, out, err = run(
        capsys,
        "diff",
        str(path),
        "--url",
        PAIRS,
        "--url",
        "summarize?trigger_at=6::sqlite:///other.db",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["equal"] is True
    assert all(c["first_difference"] is None for c in report["conversations"])
    assert report["total"]["A"]["summarizer_calls"] > 0  # summarized, identically
    assert report["total"]["A"]["view_tokens"] == report["total"]["B"]["view_tokens"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["few.openai.jsonl"]  # nothing kept


def test_scrubbing_is_a_difference_with_pii_counted_by_entity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pii.jsonl"
    conversation = {
        "id": "c1",
        "messages": [
            {"role": "user", "content": "Hi, I need help with my order."},
            {"role": "assistant", "content": "Sure. What is your email address?"},
            {"role": "user", "content": "It is ana.kim@example.com, phone +1 415 555 0132."},
            {"role": "assistant", "content": "Thanks, I found your account."},
        ],
    }
    path.write_text(json.dumps(conversation) + "\n")
    code, out, err = run(
        capsys, "diff", str(path), "--url", "scrub::memory://", "--url", "memory://", "--json"
    )
    assert code == 1, err
    (c,) = json.loads(out)["conversations"]
    assert c["A"]["pii"] == {"EMAIL_ADDRESS": 1, "PHONE_NUMBER": 1}
    assert c["B"]["pii"] == {}
    difference = c["first_difference"]
    # The first view fetched holds only the clean first message; the second differs at the
    # message with the address.
    assert difference["before"] == 3
    assert difference["final"] is False
    assert difference["index"] == 2
    assert difference["fields"] == ["content"]
    assert "<EMAIL_ADDRESS_" in difference["a"]
    assert "ana.kim@example.com" in difference["b"]
    # A table when piped, and the PII by entity.
    code, out, err = run(
        capsys, "diff", str(path), "--url", "scrub::memory://", "--url", "memory://"
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "chatlayers diff"
    assert lines[1].split()[:3] == ["conversation", "view", "tokens"]
    assert lines[2].startswith("c1 ")
    assert "view before message 3, message 2: content" in lines[2]
    assert lines[3].startswith("total ")
    assert "1 of 1 conversation differ" in lines[3]
    assert "PII found by entity" in out
    assert any(line.split() == ["EMAIL_ADDRESS", "1", "0"] for line in lines)
    assert "A = scrub::memory://" in err


def test_not_two_stacks_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(few(tmp_path, 1))
    for stacks in ([], ["--url", "memory://"], ["--url", "memory://"] * 3):
        with pytest.raises(SystemExit) as info:
            main(["diff", path, *stacks])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: chatlayers diff ")
        assert "exactly two stacks" in err


def test_a_config_file_may_stand_for_a_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "stack.toml"
    config.write_text(
        '[store]\nurl = "memory://"\n\n[[layers]]\ntype = "summarize"\ntrigger_at = 6\n'
    )
    code, out, err = run(
        capsys, "diff", str(few(tmp_path, 3)), "--url", PAIRS, "--config", str(config), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["stacks"]["B"] == str(config)


def test_a_server_store_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "diff", str(few(tmp_path, 1)), "--url", "memory://", "--url", "redis://:pw@h:1/0"
    )
    assert code == 2  # could not compare (1 is "the views differ")
    assert "fresh stores" in err
    assert "pw" not in err


def test_a_refused_stack_is_named_as_diffs_own(tmp_path: Path) -> None:
    """The console script, as a user runs it: the refusal speaks of diff, not of eval."""
    path = str(few(tmp_path, 1))
    redis = subprocess.run(
        [*chatlayers(), "diff", path, "--url", "memory://", "--url", "redis://:pw@h:1/0"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert redis.returncode == 2, redis.stderr  # could not compare (1 is "they differ")
    assert "diff replays the conversations into fresh stores" in redis.stderr
    assert "eval" not in redis.stderr
    assert "pw" not in redis.stderr
    sealed = "encrypt?keys=" + "A" * 43 + "=&keyring=memory://::memory://"
    encrypted = subprocess.run(
        [*chatlayers(), "diff", path, "--url", "memory://", "--url", sealed],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert encrypted.returncode == 2, encrypted.stderr
    assert "diff cannot replay a stack with 'encrypt'" in encrypted.stderr
    assert "eval" not in encrypted.stderr


def test_first_difference_names_a_shorter_view() -> None:
    a = [ChatMessage("user", "hi"), ChatMessage("assistant", "hello")]
    b = [ChatMessage("user", "hi")]  # other ids and times: equal for the model
    assert first_difference({1: a[:1]}, {1: b}) is None
    found = first_difference({1: a[:1], 2: a}, {1: b, 2: b})
    assert found is not None
    assert (found.before, found.final, found.index, found.fields) == (2, True, 1, ("length",))
    assert found.b == "view ends (1 message)"
    assert found.a.startswith("assistant 'hello'")
