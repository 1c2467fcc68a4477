"""``storage.purge.purge_mask``: what a retention purge deletes, as properties over generated
records (tool groups, long agent turns, instructions mid-way, old flags anywhere)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.message import ChatMessage, ToolCall
from storage.purge import purge_mask
from storage.testing.fault_tests import check_tool_groups


@st.composite
def records(draw: st.DrawFn) -> list[ChatMessage]:
    """A valid record: optional system prompt, then turns of text answers and tool groups
    (sometimes an agent turn with no user message first)."""
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(ChatMessage("system", "prompt"))
    calls = 0
    for turn in range(draw(st.integers(0, 5))):
        if turn or draw(st.booleans()):
            out.append(ChatMessage("user", f"q{turn}"))
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                ids = [f"c{calls + n}" for n in range(draw(st.integers(1, 3)))]
                calls += len(ids)
                out.append(
                    ChatMessage("assistant", None, tuple(ToolCall(i, "f", "{}") for i in ids))
                )
                out += [ChatMessage("tool", "r", tool_call_id=i) for i in ids]
            else:
                out.append(ChatMessage("assistant", "a"))
        if draw(st.booleans()):
            out.append(ChatMessage("developer", "mid-way instruction"))
    return out


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_what_stays_is_valid_and_nothing_old_stays(data: st.DataObject) -> None:
    messages = data.draw(records())
    old = data.draw(st.lists(st.booleans(), min_size=len(messages), max_size=len(messages)))
    mask, _ = purge_mask(messages, old)
    assert all(gone for gone, was_old in zip(mask, old, strict=True) if was_old)
    kept = [m for m, gone in zip(messages, mask, strict=True) if not gone]
    check_tool_groups(kept)
    if any(old):
        body = [m for m in kept if m.role not in ("system", "developer")]
        if any(m.role == "user" for m in body):
            assert body[0].role == "user"  # no orphaned answer at the front


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_reading_on_in_chunks_gives_the_whole_records_answer(data: st.DataObject) -> None:
    """A store that reads the first part of a record and reads on while ``more`` gets what
    the whole record gives."""
    messages = data.draw(records())
    old = data.draw(st.lists(st.booleans(), min_size=len(messages), max_size=len(messages)))
    whole, _ = purge_mask(messages, old)
    last_old = max((i for i, o in enumerate(old) if o), default=-1)
    if last_old < 0:
        assert not any(whole)
        return
    end = last_old + 1
    mask, more = purge_mask(messages[:end], old[:end])
    chunk = data.draw(st.integers(1, 4))
    while more and end < len(messages):
        end = min(len(messages), end + chunk)
        mask, more = purge_mask(messages[:end], old[:end])
    assert mask + [False] * (len(messages) - end) == whole
