"""Retention scenarios of the conformance kit: what a purge leaves is a record chat APIs accept.

- a tool call and its results straddling the cut-off go whole (never a result without its
  call, never a call without its results), also when a caller's clock gave a result an older
  time than its call;
- the answer of a question that went does not stay at the front: the record (and so every
  view of it) starts with a user turn after its instructions;
- one long agent turn with no user message left is cut at a tool-group boundary only;
- a second purge finds nothing more.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from storage.abilities import RetentionStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.testing.ability_tests import MakeStack, need
from storage.testing.fault_tests import check_tool_groups
from storage.testing.protocol_tests import msg

__all__ = ["RetentionTests"]


class RetentionTests:
    """Retention purges keep whatever they leave valid (needs ``make_stack(retention=...)``)."""

    async def test_purge_keeps_tool_groups_whole_and_the_front_a_user_turn(
        self, make_stack: MakeStack
    ) -> None:
        try:
            stack = await make_stack(retention=3600)
        except TypeError as exc:
            pytest.skip(f"the store takes no retention: {exc}")
        ret = need(stack, RetentionStorage)
        t = datetime.now(UTC)
        old, young = t - timedelta(minutes=10), t + timedelta(hours=2)
        straddling = ChatKey("retention", "tools", "a")
        history = [
            ChatMessage("system", "you track orders", created_at=old),
            msg("look up my order", created_at=old),
            ChatMessage(
                "assistant",
                None,
                (ToolCall("c1", "lookup", '{"order": 1}'), ToolCall("c2", "track", "{}")),
                created_at=old,
            ),
            ChatMessage("tool", "shipped", tool_call_id="c1", created_at=old),
            ChatMessage("tool", "in transit", tool_call_id="c2", created_at=young),  # young
            # The answer of a question that goes: it goes too (a user message follows).
            msg("it is in transit", "assistant", created_at=young),
            msg("and the other one?", created_at=young),
            # A young call whose result carries an old time (a caller's clock): the whole
            # group goes, never the result alone.
            ChatMessage("assistant", None, (ToolCall("c3", "lookup", "{}"),), created_at=young),
            ChatMessage("tool", "delivered", tool_call_id="c3", created_at=old),
            msg("it was delivered", "assistant", created_at=young),
            ChatMessage("assistant", None, (ToolCall("c4", "lookup", "{}"),), created_at=young),
            ChatMessage("tool", "kept", tool_call_id="c4", created_at=young),
        ]
        await stack.save_messages(straddling, history)
        # One long agent turn, no user message after the cut-off: groups only.
        alone = ChatKey("retention", "agent", "a")
        work = [msg("watch the queue", created_at=old)]
        for n in range(3):
            at = old if n == 0 else young
            work += [
                ChatMessage("assistant", None, (ToolCall(f"w{n}", "poll", "{}"),), created_at=at),
                ChatMessage("tool", f"queue {n}", tool_call_id=f"w{n}", created_at=at),
            ]
        await stack.save_messages(alone, work)
        now = t + timedelta(minutes=90)  # cut-off: t + 30 min
        assert await ret.purge(now=now) == 8 + 3
        kept = await stack.fetch(straddling)
        assert [m.text for m in kept] == ["and the other one?", "it was delivered", "", "kept"]
        check_tool_groups(kept)
        check_tool_groups(await stack.fetch(straddling, limit=4))
        left = await stack.fetch(alone)
        assert [m.text for m in left] == ["", "queue 1", "", "queue 2"]
        check_tool_groups(left)
        assert await ret.purge(now=now) == 0
