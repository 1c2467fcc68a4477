"""Retention scenarios of the conformance kit: what a purge leaves is a record chat APIs accept.

- a tool call and its results straddling the cut-off go whole (never a result without its
  call, never a call without its results), also when a caller's clock gave a result an older
  time than its call;
- the answer of a question that went does not stay at the front: the record (and so every
  view of it) starts with a user turn after its instructions;
- one long agent turn with no user message left is cut at a tool-group boundary only;
- a second purge finds nothing more;
- without ``retention`` nothing goes; with it, old messages go with their key's checkpoint and
  a new epoch, automatically on writes at most once per ``purge_interval``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from storage.abilities import (
    CheckpointStorage,
    ListableStorage,
    RetentionStorage,
    SequencedStorage,
    find_ability,
)
from storage.errors import InvalidArgumentError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.testing.ability_tests import (
    T0,
    MakeStack,
    checkpoint_of,
    need,
    stack_with,
    summary_message,
    texts,
)
from storage.testing.fault_tests import check_tool_groups
from storage.testing.harness import FakeClock, StoreHarness
from storage.testing.protocol_tests import KEY, msg

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

    async def test_purge_deletes_old_messages(
        self, store: ChatStorage, make_stack: MakeStack
    ) -> None:
        plain = find_ability(store, RetentionStorage)
        if plain is not None:
            await store.save(KEY, msg("ancient", created_at=T0 - timedelta(days=3000)))
            assert await plain.purge() == 0  # no retention: nothing goes
            assert len(await store.fetch(KEY)) == 1
        kept_stack = await stack_with(make_stack, retention=3600)
        ret = need(kept_stack, RetentionStorage)
        seq = find_ability(kept_stack, SequencedStorage)
        cps = find_ability(kept_stack, CheckpointStorage)
        old_only = ChatKey("retention", "old", "a")
        mixed = ChatKey("retention", "mixed", "a")
        # Young by the store's own clock when written (a purge on write keeps them), old by
        # the ``now`` given to purge below.
        t = datetime.now(UTC)
        await kept_stack.save(old_only, msg("old a", created_at=t - timedelta(minutes=10)))
        await kept_stack.save_messages(
            mixed,
            [
                msg("old b", created_at=t - timedelta(minutes=9)),
                msg("new c", "assistant", created_at=t + timedelta(hours=2)),
            ],
        )
        before = await seq.head(mixed) if seq is not None else None
        if cps is not None and before is not None:
            made = checkpoint_of((summary_message("g"),), before.last_seq, before.epoch, "m", T0)
            assert await cps.save_checkpoint(mixed, made, expected_version=0) is not None
        now = t + timedelta(minutes=90)  # cut-off: t + 30 min
        assert await ret.purge(now=now) == 2
        assert await kept_stack.fetch(old_only) == []
        assert texts(await kept_stack.fetch(mixed)) == ["new c"]
        if seq is not None and before is not None:
            after = await seq.head(mixed)
            assert after.epoch != before.epoch
            assert (await seq.head(old_only)).last_seq == 0
        if cps is not None:
            assert await cps.load_checkpoint(mixed) is None
        listable = find_ability(kept_stack, ListableStorage)
        if listable is not None:
            assert await listable.list_keys(user_id="retention") == [mixed]
        assert await ret.purge(now=now) == 0
        with pytest.raises(InvalidArgumentError):
            await ret.purge(now=datetime(2024, 1, 1))  # naive

    async def test_purge_runs_on_writes_at_most_once_per_interval(
        self, harness: StoreHarness, make_stack: MakeStack
    ) -> None:
        if harness.clock_option is None:
            pytest.skip("the store takes no clock")
        clock = FakeClock(time.time())
        stack = await stack_with(
            make_stack, retention=60, purge_interval=10, **{harness.clock_option: clock}
        )
        need(stack, RetentionStorage)

        def ago(seconds: float) -> datetime:
            return datetime.fromtimestamp(clock.now - seconds, UTC)

        await stack.save(KEY, msg("m1", created_at=ago(30)))  # first write: purge, m1 young
        clock.advance(5)
        await stack.save(KEY, msg("m2", created_at=ago(0)))
        clock.advance(40)  # m1 is 75 s old now; 45 s since the last purge
        await stack.save(KEY, msg("m3", created_at=ago(0)))
        assert texts(await stack.fetch(KEY)) == ["m2", "m3"]
        await stack.save(KEY, msg("m4", created_at=ago(70)))  # old, but within the interval
        assert texts(await stack.fetch(KEY)) == ["m2", "m3", "m4"]
        clock.advance(11)
        await stack.save(KEY, msg("m5", created_at=ago(0)))
        assert texts(await stack.fetch(KEY)) == ["m2", "m3", "m5"]
