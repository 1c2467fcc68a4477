"""turn_window, the window of a model view: properties over generated views."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage.history import turn_window
from storage.message import ChatMessage, ToolCall


@st.composite
def views(draw: st.DrawFn) -> list[ChatMessage]:
    """A valid view: an optional leading prompt, then turns of user messages, assistant
    replies and tool-call groups (an assistant message with its results)."""
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(ChatMessage("system", "prompt"))
    for n, kind in enumerate(draw(st.lists(st.sampled_from(["user", "reply", "group"])))):
        if kind == "user":
            out.append(ChatMessage("user", f"u{n}"))
        elif kind == "reply":
            out.append(ChatMessage("assistant", f"a{n}"))
        else:
            ids = [f"c{n}_{k}" for k in range(draw(st.integers(1, 3)))]
            out.append(ChatMessage("assistant", None, tuple(ToolCall(i, "f", "{}") for i in ids)))
            out += [ChatMessage("tool", f"r{i}", tool_call_id=i) for i in ids]
    return out


def groups_whole(window: list[ChatMessage]) -> bool:
    answered: set[str] = set()
    for message in window:
        if message.role == "tool" and message.tool_call_id not in answered:
            return False
        answered |= {c.id for c in message.tool_calls}
    return True


@given(view=views(), limit=st.integers(1, 12))
def test_a_window_starts_right_keeps_groups_whole_and_ends_with_the_newest(
    view: list[ChatMessage], limit: int
) -> None:
    window = turn_window(view, limit)
    order = {id(m): n for n, m in enumerate(view)}
    positions = [order[id(m)] for m in window]
    assert positions == sorted(positions)  # a subsequence of the view, in order
    lead = 1 if view and view[0].role == "system" else 0
    assert window[:lead] == view[:lead]
    body = window[lead:]
    if len(view) > lead:
        assert body, "a window of a non-empty view is never empty"
        assert body[-1] is view[-1]  # never an older state than the record's
    assert groups_whole(body)
    if len(body) < len(view) - lead and any(m.role == "user" for m in view[lead:]):
        assert body[0].role == "user"  # a cut view starts with a user message
    # Over the limit only by the opening user message and the newest assistant message with
    # its results, when those alone are more than the limit.
    if len(body) > limit:
        start = 1 if body[0].role == "user" else 0
        assert body[start].role == "assistant"
        assert all(m.role == "tool" for m in body[start + 1 :])


def test_a_turn_longer_than_the_limit_keeps_its_opener_and_newest_group() -> None:
    call = ChatMessage("assistant", None, (ToolCall("c1", "f", "{}"),))
    result = ChatMessage("tool", "r", tool_call_id="c1")
    user = ChatMessage("user", "q")
    assert turn_window([user, call, result], 2) == [user, call, result]
    later = ChatMessage("assistant", None, (ToolCall("c2", "f", "{}"),))
    late = ChatMessage("tool", "r2", tool_call_id="c2")
    assert turn_window([user, call, result, later, late], 3) == [user, later, late]
