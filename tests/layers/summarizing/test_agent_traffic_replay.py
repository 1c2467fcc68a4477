"""The main job shows it: replaying the shipped sets through a token budget
summarizes the long tau-bench and SWE-agent conversations, and the report has the per-set
table and what a triggering save cost; the background benchmark runs end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from storage import open_storage
from storage.cli.conversation_file import read_conversations
from storage.cli.replay import REPLAY_URL, replay
from storage.message import ChatKey
from summarizers.tokens import count_tokens
from tests.paths import REPO

pytestmark = pytest.mark.anyio

DATA = REPO / "examples" / "data"
SWE = DATA / "swe_agent_marshmallow_1867_fc.openai.jsonl"
TAU = DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
OASST = DATA / "oasst_en_100.openai.jsonl"


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
async def test_replay_with_the_token_budget_summarizes_the_long_agent_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background: bool
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "replay-test-secret-0123456789abcdef")
    url = REPLAY_URL.replace("sqlite:///chatlayers.db", f"sqlite:///{tmp_path / 'r.db'}")
    if background:
        url = url.replace("trigger_tokens=4000", "trigger_tokens=4000&background=true")
    conversations = read_conversations([SWE, TAU])
    conversations += read_conversations([OASST])[:10]
    async with open_storage(url) as stack:
        report = await replay(stack, conversations, fresh=True)
    sets = report.sets
    assert list(sets) == [
        "swe_agent_marshmallow_1867_fc",
        "tau_bench_airline_gpt4o_trial0",
        "oasst_en_100",
    ]
    swe, tau, chat = sets.values()
    assert swe.summarized == 1
    assert swe.view_tokens is not None
    assert swe.raw_tokens is not None
    assert swe.view_tokens < swe.raw_tokens * 0.6
    assert tau.summarized >= 15  # the runs over 4,000 tokens
    assert tau.view_tokens is not None
    assert tau.raw_tokens is not None
    assert tau.view_tokens < tau.raw_tokens
    assert chat.summarized == 0  # short chats stay whole
    assert chat.view_tokens == chat.raw_tokens
    assert report.summarizer_calls == sum(s.summarizer_calls for s in sets.values()) > 0
    assert report.background is background
    assert report.trigger_save_seconds  # saves that triggered a summary were timed apart
    assert len(report.save_seconds) + len(report.trigger_save_seconds) == report.messages_read
    rows = dict(report.save_rows())
    mode = "background" if background else "inline"
    assert f"save triggering a summary p50 ({mode})" in rows
    assert [row[0] for row in report.set_rows()] == list(sets)


@pytest.mark.slow
def test_background_benchmark_quick_run() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.background", "--quick", "--delay", "0.2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for mode in ("inline", "background"):
        assert re.search(rf"^\| {mode} \| ", done.stdout, re.M), done.stdout


async def test_memory_mode_serves_the_store_modes_views_on_the_swe_agent_run() -> None:
    # One worker fetching after every save: both modes make the same compactions, long turn
    # included (memory mode cut it nowhere before: views grew to 7,209 tokens, the whole run).
    (conversation,) = read_conversations([SWE])
    key = ChatKey("u", "s", "a")
    views: dict[str, list[list[tuple[str, str, str]]]] = {}
    sizes: list[int] = []
    for mode in ("store", "memory"):
        async with open_storage(f"summarize?trigger_tokens=2000&summaries={mode}::memory://") as s:
            views[mode] = []
            for message in conversation.messages:
                await s.save(key, message)
                view = await s.fetch(key)
                views[mode].append([(m.id, m.role, m.text) for m in view])
                if mode == "memory":
                    sizes.append(count_tokens(view))
    assert views["memory"] == views["store"]  # each saved message is stamped when saved
    assert sizes[-1] <= 2000 + 3
    assert sum(size > 2000 for size in sizes) <= 3
