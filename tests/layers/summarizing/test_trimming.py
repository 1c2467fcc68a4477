"""Tool-output trimming in the model view: deterministic, pairs intact."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.history import check_tool_pairs
from storage.layers.summarizing.trimming import TRIM_MARKER, trim_text, trim_tool_results
from storage.message import ChatMessage, ToolCall


def turn(n: int, result: str) -> list[ChatMessage]:
    call = ToolCall(f"c{n}", "run_tests", "{}")
    return [
        ChatMessage("user", f"request {n}"),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", result, tool_call_id=call.id),
        ChatMessage("assistant", f"done {n}"),
    ]


LOG = "\n".join(f"line {i:04d} " + "x" * 60 for i in range(400))


def test_trim_text_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    short, cut = trim_text(LOG, 1_000)
    assert cut > 0
    assert short.startswith("line 0000 ")
    assert short.endswith(LOG[-40:])
    assert TRIM_MARKER.format(cut=f"{cut:,}") in short
    assert len(short) - len(TRIM_MARKER.format(cut=f"{cut:,}")) - 2 == len(LOG) - cut
    assert trim_text("tiny", 1_000) == ("tiny", 0)
    with pytest.raises(ValueError, match="max_chars"):
        trim_text(LOG, 5)


def test_only_old_long_tool_results_are_trimmed() -> None:
    view = [ChatMessage("system", "sys"), *turn(1, LOG), *turn(2, "short"), *turn(3, LOG)]
    out = trim_tool_results(view, keep_turns=1, max_chars=500)
    assert len(out) == len(view)
    old, recent = out[3], out[-2]
    assert old.id == view[3].id
    assert old.tool_call_id == "c1"
    assert len(old.text) < 700
    assert old.metadata["chatlayers"]["trimmed_chars"] > 0
    assert recent is view[-2]  # inside the last turn: untouched
    assert out[7] is view[7]  # short: untouched
    assert [m for i, m in enumerate(out) if i not in (3,)] == [
        m for i, m in enumerate(view) if i not in (3,)
    ]
    check_tool_pairs(out)
    assert trim_tool_results(view, keep_turns=1, max_chars=500) == out  # deterministic


def test_text_parts_are_trimmed_and_other_parts_kept() -> None:
    call = ToolCall("c1", "read", "{}")
    parts = ({"type": "text", "text": LOG}, {"type": "image_url", "image_url": {"url": "u"}})
    view = [
        ChatMessage("user", "go"),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", parts, tool_call_id="c1"),
        *turn(2, "x"),
    ]
    out = trim_tool_results(view, keep_turns=1, max_chars=300)
    content = out[2].content
    assert isinstance(content, tuple)
    assert len(content[0]["text"]) < 500
    assert content[1] == parts[1]


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3_000), min_size=1, max_size=8),
    keep=st.integers(0, 4),
    limit=st.integers(20, 1_000),
)
def test_property_raw_untouched_pairs_kept_view_bounded(
    sizes: list[int], keep: int, limit: int
) -> None:
    view = [m for n, size in enumerate(sizes) for m in turn(n, "y" * size)]
    before = list(view)
    out = trim_tool_results(view, keep_turns=keep, max_chars=limit)
    assert view == before  # the input (raw record) is never modified
    check_tool_pairs(out)
    assert [m.id for m in out] == [m.id for m in view]
    protected = len(view) - 4 * min(keep, len(sizes))
    for index, (a, b) in enumerate(zip(view, out, strict=True)):
        if index >= protected or a.role != "tool" or len(a.text) <= limit:
            assert a is b
        else:
            marker = len(TRIM_MARKER.format(cut=f"{b.metadata['chatlayers']['trimmed_chars']:,}"))
            assert len(b.text) <= limit + marker + 2
