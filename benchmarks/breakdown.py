"""Where the time of one message goes: the per-message steps of a save and of a cold read.

Each step runs over all shipped messages, interleaved with the others, many rounds; the figure
is the median per message. It explains the gaps between chatlayers' SQLite store and the floor.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs

from benchmarks.data import shipped_messages
from storage.codec import decode, encode
from storage.history import prepare_batch as prepare
from storage.history import validate_message
from storage.message import ChatMessage, with_created_at

Step = tuple[str, str, Callable[[], Any]]


def steps() -> list[Step]:
    wires = list(shipped_messages())
    now = datetime.now(UTC)
    built = [ChatMessage.from_openai(w) for w in wires]
    stamped = [with_created_at(m, now) for m in built]
    records = [encode(m) for m in stamped]
    dumps, loads = json.dumps, json.loads
    return [
        (
            "save",
            "`json.dumps(openai_dict)` (what the floor does)",
            lambda: [dumps(w) for w in wires],
        ),
        (
            "save",
            "`prepare_batch([m])`, all of it (below: its parts)",
            lambda: [prepare([m]) for m in built],
        ),
        ("save", "`validate_message`", lambda: [validate_message(m) for m in built]),
        ("save", "`datetime.now(UTC)` (one per batch)", lambda: [datetime.now(UTC) for _ in built]),
        (
            "save",
            "`attrs.evolve(m, created_at=now)` (for comparison)",
            lambda: [attrs.evolve(m, created_at=now) for m in built],
        ),
        (
            "save",
            "`with_created_at(m, now)` (what `prepare_batch` uses)",
            lambda: [with_created_at(m, now) for m in built],
        ),
        ("save", "`codec.encode` (record JSON)", lambda: [encode(m) for m in stamped]),
        ("read", "`json.loads(record)` (what the floor does)", lambda: [loads(r) for r in records]),
        (
            "read",
            "`codec.decode(record)` (json.loads + ChatMessage)",
            lambda: [decode(r) for r in records],
        ),
    ]


def measure(rounds: int = 15) -> list[tuple[str, str, float]]:
    """Median µs per message of each step."""
    todo = steps()
    n = len(shipped_messages())
    samples: dict[str, list[float]] = {label: [] for _, label, _ in todo}
    for r in range(rounds):
        for _, label, fn in todo if r % 2 == 0 else reversed(todo):
            t = time.perf_counter()
            fn()
            samples[label].append((time.perf_counter() - t) / n * 1e6)
    return [(kind, label, statistics.median(samples[label])) for kind, label, _ in todo]
