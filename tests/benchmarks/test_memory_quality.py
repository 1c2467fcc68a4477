"""Generated agent traffic (benchmarks/traffic.py) and the memory-quality benchmark runner."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from benchmarks import memory_quality
from benchmarks.traffic import conversation, write_conversations
from storage.cli.conversation_file import read_conversations
from storage.eval.measure import DEFAULT_EVAL_URLS


def test_generated_conversations_are_valid_deterministic_and_need_old_facts(
    tmp_path: Path,
) -> None:
    path = write_conversations(tmp_path / "gen.jsonl", count=5, seed=7)
    again = write_conversations(tmp_path / "again.jsonl", count=5, seed=7)
    assert path.read_text() == again.read_text()  # same seed, same traffic
    assert conversation(0, seed=8) != conversation(0, seed=7)
    conversations = read_conversations([path])  # validated as `chatlayers eval` reads them
    assert len({c.key for c in conversations}) == 5
    for item in conversations:
        roles = [m.role for m in item.messages]
        assert roles[0] == "system"
        assert roles.count("tool") >= 10
        assert len(item.messages) >= 60
        # The closing recap names the account and what changed, said long before it.
        recap = item.messages[-3].text
        customer = json.loads(item.messages[3].text)["customer_id"]
        assert customer in recap
        first_change = next(m for m in item.messages if m.role == "tool" and "_id" in m.text[:15])
        assert item.messages.index(first_change) < len(item.messages) - 20


def test_the_benchmark_prints_one_row_per_stack_and_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_quality.main(["--tau", "4", "--conversations", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert len(rows) == 4
    assert {row.split(" | ")[1] for row in rows} == {"tau_bench_airline_gpt4o_trial0", "generated"}


def test_on_generated_traffic_the_default_summarizer_beats_truncation(
    tmp_path: Path,
) -> None:
    """The goal of docs/summarizing.md on the benchmark's generated traffic (40 support
    conversations, seed 0), both budgets: retention >= 0.95 and 0.15 above truncation to the
    same characters, the view at most 0.7 of the raw record (today 0.156 on the token budget,
    0.259 on the pair budget). Deterministic: no timing."""
    urls = list(DEFAULT_EVAL_URLS)
    reports = anyio.run(memory_quality.measure, urls, 40, 0, tmp_path, 0)  # once, not per backend
    for report in reports:
        figures = report.sets["generated"]
        assert figures.conversations == 40
        assert figures.retention is not None
        assert figures.truncation_retention is not None
        assert figures.retention >= 0.95, report.stack
        assert figures.retention >= figures.truncation_retention + 0.15, report.stack
        assert figures.view_ratio is not None
        assert figures.view_ratio <= 0.7
