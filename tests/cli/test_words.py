"""The wording helpers of the command's output."""

from __future__ import annotations

import pytest

from storage.cli.words import duration, plural


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "n/a"),
        (0.0, "0 µs"),
        (0.000812, "812 µs"),
        (0.00356, "3.56 ms"),
        (0.999, "999.00 ms"),
        (1.0, "1.00 s"),
        (12.816, "12.82 s"),
    ],
)
def test_duration_picks_the_unit_a_reader_expects(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_plural() -> None:
    assert plural(1, "conversation") == "1 conversation"
    assert plural(1200, "summary", "summaries") == "1,200 summaries"
