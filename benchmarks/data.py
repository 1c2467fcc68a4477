"""Benchmark data: real messages from the shipped conversations, cycled to any length."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"

Wire = dict[str, Any]


@cache
def shipped_messages() -> tuple[Wire, ...]:
    """Every non-system message of ``examples/data/*.openai.jsonl``, in file order.

    System prompts are left out so a cycled history has none in the middle; tool calls and
    their results stay adjacent, as in the source conversations.
    """
    out: list[Wire] = []
    for path in sorted(DATA.glob("*.openai.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.extend(m for m in json.loads(line)["messages"] if m["role"] != "system")
    if not out:
        raise RuntimeError(f"no conversations found in {DATA}")
    return tuple(out)


def history(n: int, offset: int = 0) -> list[Wire]:
    """``n`` OpenAI message dicts cycling the shipped messages from the ``offset``-th user turn.

    Starts on a user message so no window starts with an orphaned tool result. The dicts are
    shared between calls: treat them as read-only.
    """
    source = shipped_messages()
    start = _user_turns()[offset % len(_user_turns())]
    return [source[(start + i) % len(source)] for i in range(n)]


@cache
def _user_turns() -> tuple[int, ...]:
    return tuple(i for i, m in enumerate(shipped_messages()) if m["role"] == "user")


def stats() -> dict[str, float]:
    """Counts and mean size of the shipped messages (for the report header)."""
    source = shipped_messages()
    sizes = [len(json.dumps(m, ensure_ascii=False)) for m in source]
    return {
        "messages": len(source),
        "mean_bytes": sum(sizes) / len(sizes),
        "with_tool_calls": sum(1 for m in source if m.get("tool_calls")),
        "tool_results": sum(1 for m in source if m["role"] == "tool"),
    }
