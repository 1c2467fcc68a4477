"""``parse_duration``: the one reading of "30d", "12h", seconds and timedeltas."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.durations import format_duration, parse_duration, short_duration
from storage.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("12h", 43200.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("1.5h", 5400.0),
        ("2w", 1209600.0),
        ("250ms", 0.25),
        (" 7D ", 7 * 86400.0),
        ("3600", 3600.0),
        ("0", 0.0),
        (3600, 3600.0),
        (0.5, 0.5),
        (timedelta(days=1, seconds=1), 86401.0),
    ],
)
def test_parse_duration(value: int | float | str | timedelta, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "bad", ["-1d", "-5", -1, "abc", "", "1x", "d", "1d2h", True, float("nan"), float("inf"), None]
)
def test_bad_durations_refused_naming_the_value(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="duration") as info:
        parse_duration(bad)  # type: ignore[arg-type]
    if isinstance(bad, str) and bad:
        assert repr(bad) in str(info.value)


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["s", "m", "h", "d", "w"]))
def test_units_scale(n: int, unit: str) -> None:
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    assert parse_duration(f"{n}{unit}") == float(n) * scale


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (300.0, "5 minutes"),
        (90, "1.5 minutes"),
        (60, "1 minute"),
        (45, "45 seconds"),
        (0, "0 seconds"),
        (0.25, "250 ms"),
        (5400, "1.5 hours"),
        (86400 * 30, "30 days"),
        (604800 * 2, "2 weeks"),
    ],
)
def test_format_duration_writes_it_as_people_do(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(2592000.0, "30d"), (1209600, "2w"), (7200, "2h"), (90, "90s"), (90.5, "90.5s"), (60, "1m")],
)
def test_short_duration_is_how_config_spells_it_and_reads_back(
    seconds: float, written: str
) -> None:
    """What ``describe()`` shows (``retention=30d``, not ``2.592e+06s``) is what a URL
    takes, and it parses back to the same seconds."""
    assert short_duration(seconds) == written
    assert parse_duration(written) == seconds
