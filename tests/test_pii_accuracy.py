"""The accuracy bars of issue 3 on the shipped labelled sample (speed is measured only in
``benchmarks/pii_accuracy.py``)."""

from __future__ import annotations

import pytest

from benchmarks.pii_accuracy import BARS, SCORED, load, score
from storage.pii import PIIScrubber


@pytest.fixture(scope="module")
def stats() -> dict[str, dict[str, object]]:
    return score(load(), PIIScrubber(secret="accuracy-test"))


@pytest.mark.parametrize("entity", SCORED)
def test_precision_and_recall_bars(stats: dict[str, dict[str, int]], entity: str) -> None:
    row = stats[entity]
    assert row["gold"] > 0
    min_precision, min_recall = BARS[entity]
    assert row["correct"] / row["pred"] >= min_precision, row["fp"]
    assert row["found"] / row["gold"] >= min_recall, row["fn"]
