"""Time-travel tests of the conformance kit (:class:`storage.abilities.TimeTravelStorage`):
forks, rewinds, as-of reads and kept checkpoint versions on every stack that has them, a
fork of a summarized conversation served with no summarizer call, a rewind made by another
process seen by a summarizing worker's next fetch, and rewound messages purged and erased.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from storage.abilities import (
    CheckpointStorage,
    ReplaceableStorage,
    RetentionStorage,
    SequencedStorage,
    SummaryCheckpoint,
    TimeTravelStorage,
    find_ability,
    rewound_at,
)
from storage.errors import ConflictError, InvalidArgumentError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.ability_tests import MakeStack, need, summary_message
from storage.testing.harness import FakeClock, StoreHarness, scrubbed
from storage.testing.protocol_tests import KEY, msg
from storage.testing.reliability_tests import _child_env, one_backend

__all__ = ["TimeTravelTests"]

FORKED = ChatKey(KEY.user_id, "session-2", KEY.agent_id)
SIBLING = ChatKey(KEY.user_id, KEY.session_id, "agent-2")
STRANGER = ChatKey("user-2", KEY.session_id, KEY.agent_id)
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _turns(n: int, prefix: str = "m") -> list[ChatMessage]:
    """``n`` messages, user and assistant in turn, ids ``{prefix}0`` ..., caller times a
    minute apart from :data:`T0`."""
    return [
        msg(
            f"{prefix} message {i}",
            "user" if i % 2 == 0 else "assistant",
            id=f"{prefix}{i}",
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(n)
    ]


def _ids(messages: list[ChatMessage]) -> list[str]:
    return [m.id for m in messages]


class _Counting:
    """An extractive summarizer that counts its calls."""

    def __init__(self) -> None:
        from storage.summarizer import default_summarizer

        self.inner = default_summarizer()
        self.calls = 0

    async def __call__(self, history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        self.calls += 1
        return await self.inner(history, keep_last)


class TimeTravelTests:
    """``fork``, ``rewind``, ``fetch_as_of``, ``fetch_timeline`` and checkpoint versions."""

    # --- fork ------------------------------------------------------------------------------

    async def test_fork_copies_the_view_and_the_two_diverge(self, store: ChatStorage) -> None:
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(6))
        source = await store.fetch(KEY)
        assert await travel.fork(KEY, FORKED) == 6
        assert await store.fetch(FORKED) == source  # same ids, contents and times, in order
        assert await travel.fork(KEY, SIBLING, at="m3") == 4  # another agent, up to m3
        assert _ids(await store.fetch(SIBLING)) == ["m0", "m1", "m2", "m3"]
        await store.save(KEY, msg("only in the source", id="s"))
        await store.save(FORKED, msg("only in the fork", id="f"))
        assert _ids(await store.fetch(KEY)) == [*_ids(source), "s"]
        assert _ids(await store.fetch(FORKED)) == [*_ids(source), "f"]
        assert _ids(await store.fetch(SIBLING)) == ["m0", "m1", "m2", "m3"]
        empty = ChatKey(KEY.user_id, "nothing", "here")
        assert await travel.fork(empty, ChatKey(KEY.user_id, "x", "y")) == 0

    async def test_fork_refuses_a_used_key_another_user_and_itself(
        self, store: ChatStorage
    ) -> None:
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(3))
        await store.save(FORKED, msg("already here", id="here"))
        with pytest.raises(ConflictError):
            await travel.fork(KEY, FORKED)
        assert _ids(await store.fetch(FORKED)) == ["here"]  # nothing copied
        for new_key in (STRANGER, KEY):
            with pytest.raises(InvalidArgumentError):
                await travel.fork(KEY, new_key)
        assert await store.fetch(STRANGER) == []
        with pytest.raises(InvalidArgumentError):
            await travel.fork(KEY, SIBLING, at="no such message")
        assert await store.fetch(SIBLING) == []

    async def test_a_fork_never_carries_a_checkpoint_made_after_it_read_the_record(
        self, store: ChatStorage
    ) -> None:
        """A turn and a summary covering it land between the fork's read of the record and
        its read of the checkpoint: the fork carries the older checkpoint (covering only
        copied messages), never the newer one, whose summary tells of a turn not copied."""
        from storage.abilities.forking import fork_by_copy

        found = find_ability(store, CheckpointStorage)
        if found is None or find_ability(store, TimeTravelStorage) is None:
            pytest.skip("the store keeps no checkpoints")
        cps = found
        await store.save_messages(KEY, _turns(6))
        seqs = (await cps.fetch_since(KEY, 0)).seqs
        first = await _checkpoint(cps, KEY, "up to m3", seqs[3], 0)

        class Racing:
            """The store, with another worker's turn and summary landing after the read."""

            def __getattr__(self, name: str) -> object:
                return getattr(store, name)

            async def fetch_timeline(self, key: ChatKey) -> object:
                read = await need(store, TimeTravelStorage).fetch_timeline(key)
                await store.save_messages(KEY, _turns(2, "late"))
                newest = (await cps.fetch_since(KEY, 0)).seqs[-1]
                await _checkpoint(cps, KEY, "up to late1", newest, first.version)
                return read

        assert await fork_by_copy(Racing(), KEY, FORKED, None) == 6
        assert _ids(await store.fetch(FORKED)) == [f"m{i}" for i in range(6)]
        carried = await cps.load_checkpoint(FORKED)
        assert carried is not None
        assert "up to m3" in str(carried.messages[0].content)
        tail = await cps.fetch_since(FORKED, carried.covers_to)
        assert _ids(list(tail.messages)) == ["m4", "m5"]

    # --- rewind ----------------------------------------------------------------------------

    async def test_rewind_hides_without_deleting(self, store: ChatStorage) -> None:
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(6))
        assert await travel.rewind(KEY, "m2") == 3
        assert _ids(await store.fetch(KEY)) == ["m0", "m1", "m2"]
        assert _ids(await store.fetch(KEY, limit=1)) == ["m2"]
        rows = await store.fetch_all_chats(KEY.user_id, KEY.session_id)
        assert [r.message.id for r in rows] == [f"m{i}" for i in range(6)]  # still the record
        marked = [r.message.id for r in rows if rewound_at(r.message)]
        assert marked == ["m3", "m4", "m5"]
        assert await store.save(KEY, msg("m3 again, a retry", id="m3")) == []  # ids stay taken
        await store.save(KEY, msg("after the rewind", id="n1"))
        assert _ids(await store.fetch(KEY)) == ["m0", "m1", "m2", "n1"]
        assert await travel.rewind(KEY, "n1") == 0  # the newest: nothing to hide
        assert await travel.rewind(KEY, "m1") == 2  # again, past a message saved after one
        assert _ids(await store.fetch(KEY)) == ["m0", "m1"]
        for hidden in ("m4", "n1", "unknown"):
            with pytest.raises(InvalidArgumentError):
                await travel.rewind(KEY, hidden)
        assert _ids(await store.fetch(KEY)) == ["m0", "m1"]
        timeline = await travel.fetch_timeline(KEY)
        assert _ids(list(timeline.messages)) == [*[f"m{i}" for i in range(6)], "n1"]
        assert list(timeline.seqs) == sorted(timeline.seqs)
        assert [(r.to_id, r.hidden) for r in timeline.rewinds] == [("m2", 3), ("m1", 2)]
        assert _ids(timeline.view()) == ["m0", "m1"]

    async def test_rewind_of_a_tool_turn_keeps_windows_pair_safe(self, store: ChatStorage) -> None:
        from storage.message import ToolCall

        travel = need(store, TimeTravelStorage)
        call = ChatMessage("assistant", None, (ToolCall("c1", "lookup", "{}"),), id="call")
        result = ChatMessage("tool", "found", tool_call_id="c1", id="result")
        await store.save_messages(KEY, [msg("q", id="q"), call, result, msg("a", "assistant")])
        await store.save_messages(KEY, [msg("q2", id="q2"), msg("a2", "assistant", id="a2")])
        assert await travel.rewind(KEY, "result") == 3
        assert _ids(await store.fetch(KEY)) == ["q", "call", "result"]
        for limit in (1, 2, 3):  # a window never holds a result without its call
            window = _ids(await store.fetch(KEY, limit=limit))
            assert window[-1:] == ["result"] or not window or window == ["q"]
            assert "result" not in window or "call" in window

    async def test_rewind_and_fork_never_separate_a_call_from_its_results(
        self, store: ChatStorage
    ) -> None:
        from storage.message import ToolCall

        travel = need(store, TimeTravelStorage)
        calls = (ToolCall("c1", "lookup", "{}"), ToolCall("c2", "lookup", "{}"))
        call = ChatMessage("assistant", None, calls, id="call")
        first = ChatMessage("tool", "one", tool_call_id="c1", id="r1")
        second = ChatMessage("tool", "two", tool_call_id="c2", id="r2")
        await store.save_messages(
            KEY, [msg("q", id="q"), call, first, second, msg("a", "assistant")]
        )
        for to in ("call", "r1"):  # either would leave c1 or c2 unanswered
            with pytest.raises(InvalidArgumentError, match="unanswered"):
                await travel.rewind(KEY, to)
            with pytest.raises(InvalidArgumentError, match="unanswered"):
                await travel.fork(KEY, FORKED, at=to)
        assert len(await store.fetch(KEY)) == 5  # nothing hidden
        assert await store.fetch(FORKED) == []  # nothing copied
        assert await travel.fork(KEY, FORKED, at="q") == 1
        assert await travel.rewind(KEY, "r2") == 1
        assert _ids(await store.fetch(KEY)) == ["q", "call", "r1", "r2"]

    async def test_rewind_starts_a_new_epoch_seen_by_another_instance(
        self, harness: StoreHarness, store: ChatStorage, make_stack: MakeStack
    ) -> None:
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(4))
        other = await make_stack() if harness.persistent else store
        assert _ids(await other.fetch(KEY)) == [f"m{i}" for i in range(4)]
        sequenced = need(store, SequencedStorage) if harness.persistent else None
        before = await sequenced.head(KEY) if sequenced is not None else None
        assert await travel.rewind(KEY, "m1") == 2
        assert _ids(await other.fetch(KEY)) == ["m0", "m1"]
        if sequenced is not None and before is not None:
            after = await sequenced.head(KEY)
            assert after.epoch != before.epoch
            tail = await sequenced.fetch_since(KEY, 0)
            assert _ids(list(tail.messages)) == ["m0", "m1"]

    # --- as-of reads -----------------------------------------------------------------------

    async def test_fetch_as_of_a_sequence_an_id_and_a_time(self, store: ChatStorage) -> None:
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(5))
        assert await travel.rewind(KEY, "m2") == 2
        await store.save(
            KEY, msg("later", id="n1", created_at=datetime.now(UTC) + timedelta(days=1))
        )
        # Right after m4 was saved: the later rewind not applied.
        assert _ids(await travel.fetch_as_of(KEY, "m4")) == [f"m{i}" for i in range(5)]
        assert _ids(await travel.fetch_as_of(KEY, "n1")) == ["m0", "m1", "m2", "n1"]
        timeline = await travel.fetch_timeline(KEY)
        rewind_seq = timeline.rewinds[0].seq
        assert _ids(await travel.fetch_as_of(KEY, rewind_seq)) == ["m0", "m1", "m2"]
        assert _ids(await travel.fetch_as_of(KEY, rewind_seq - 1)) == _ids(
            await travel.fetch_as_of(KEY, "m4")
        )
        assert await travel.fetch_as_of(KEY, 0) == []
        # Times: the messages' caller-set created_at, the rewind's store clock (now).
        half = T0 + timedelta(minutes=2, seconds=30)
        assert _ids(await travel.fetch_as_of(KEY, half)) == ["m0", "m1", "m2"]
        assert _ids(await travel.fetch_as_of(KEY, T0 + timedelta(hours=1))) == [
            f"m{i}" for i in range(5)
        ]  # before the rewind was made
        assert _ids(await travel.fetch_as_of(KEY, datetime.now(UTC) + timedelta(hours=1))) == [
            "m0",
            "m1",
            "m2",
        ]  # the rewind applied; n1 is stamped later still
        assert await travel.fetch_as_of(KEY, T0 - timedelta(days=1)) == []
        for bad in (-1, "", "no such id", datetime(2024, 5, 1), 1.5, None, True):
            with pytest.raises(InvalidArgumentError):
                await travel.fetch_as_of(KEY, bad)  # type: ignore[arg-type]

    # --- erasure and retention -------------------------------------------------------------

    async def test_delete_and_delete_user_erase_rewound_messages(self, store: ChatStorage) -> None:
        travel = need(store, TimeTravelStorage)
        for key in (KEY, SIBLING):
            await store.save_messages(key, _turns(4))
            assert await travel.rewind(key, "m0") == 3
        await store.delete(KEY)
        assert (await travel.fetch_timeline(KEY)).messages == ()
        with pytest.raises(InvalidArgumentError):
            await travel.fetch_as_of(KEY, "m3")  # gone, rewound ones too
        assert len((await travel.fetch_timeline(SIBLING)).messages) == 4
        await store.delete_user(KEY.user_id)
        assert (await travel.fetch_timeline(SIBLING)).messages == ()
        assert await store.fetch_all_chats(KEY.user_id, KEY.session_id) == []
        await store.save_messages(KEY, _turns(2))  # a new record: nothing rewound in it
        assert _ids(await store.fetch(KEY)) == ["m0", "m1"]
        assert (await travel.fetch_timeline(KEY)).rewinds == ()

    async def test_retention_purges_rewound_messages(
        self, harness: StoreHarness, make_stack: MakeStack
    ) -> None:
        if harness.clock_option is None:
            pytest.skip("the store takes no clock")
        clock = FakeClock()
        try:
            store = await make_stack(retention=3600, **{harness.clock_option: clock})
        except TypeError as exc:
            pytest.skip(f"the store has no retention: {exc}")
        travel = need(store, TimeTravelStorage)
        retention = need(store, RetentionStorage)
        now = datetime.fromtimestamp(clock.now, UTC)
        later = now + timedelta(hours=5)
        old = [
            msg(f"old {i}", "user" if i % 2 == 0 else "assistant", id=f"o{i}", created_at=now)
            for i in range(4)
        ]
        new = [
            msg("new", id="n0", created_at=later),
            msg("reply", "assistant", id="n1", created_at=later),
        ]
        await store.save_messages(KEY, old + new)
        assert await travel.rewind(KEY, "o1") == 4
        await store.save(KEY, msg("kept", id="k", created_at=later))
        clock.advance(5 * 3600)
        assert await retention.purge(now=later) == 4
        timeline = await travel.fetch_timeline(KEY)
        assert _ids(list(timeline.messages)) == ["n0", "n1", "k"]
        assert _ids(await store.fetch(KEY)) == ["k"]
        rows = await store.fetch_all_chats(KEY.user_id, KEY.session_id)
        assert [(r.message.id, bool(rewound_at(r.message))) for r in rows] == [
            ("n0", True),
            ("n1", True),
            ("k", False),
        ]

    # --- checkpoints -----------------------------------------------------------------------

    async def test_checkpoint_versions_are_kept_until_the_record_is_replaced(
        self, store: ChatStorage
    ) -> None:
        cps = need(store, CheckpointStorage)
        need(store, ReplaceableStorage)
        await store.save_messages(KEY, _turns(4))
        tail = await cps.fetch_since(KEY, 0)
        first = await _checkpoint(cps, KEY, "first", tail.seqs[1], 0)
        second = await _checkpoint(cps, KEY, "second", tail.seqs[3], 1)
        assert (first.version, second.version) == (1, 2)
        old = await cps.load_checkpoint(KEY, version=1)
        assert old is not None
        assert old.messages[0].text == "first"
        assert (old.covers_to, old.epoch) == (tail.seqs[1], tail.head.epoch)
        assert (await cps.load_checkpoint(KEY, version=2)).messages[0].text == "second"  # type: ignore[union-attr]
        assert await cps.load_checkpoint(KEY, version=3) is None
        with pytest.raises(InvalidArgumentError):
            await cps.load_checkpoint(KEY, version=0)
        await store.replace(KEY, _turns(2))  # type: ignore[attr-defined]
        assert await cps.load_checkpoint(KEY, version=1) is None  # renumbered: dropped
        assert (await cps.head(KEY)).checkpoint_version == 0

    async def test_rewind_keeps_a_checkpoint_of_kept_messages_and_voids_one_of_hidden(
        self, store: ChatStorage
    ) -> None:
        cps = need(store, CheckpointStorage)
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(6))
        tail = await cps.fetch_since(KEY, 0)
        await _checkpoint(cps, KEY, "up to m1", tail.seqs[1], 0)
        assert await travel.rewind(KEY, "m3") == 2  # the checkpoint covers only kept ones
        kept = await cps.load_checkpoint(KEY)
        head = await cps.head(KEY)
        assert kept is not None
        assert kept.messages[0].text == "up to m1"
        assert (kept.version, kept.epoch, head.checkpoint_version) == (2, head.epoch, 2)
        assert await travel.rewind(KEY, "m0") == 3  # now it covers a hidden message
        assert await cps.load_checkpoint(KEY) is None
        head = await cps.head(KEY)
        assert head.checkpoint_version == 2  # the next one is version 3, never a repeat
        assert (await cps.load_checkpoint(KEY, version=2)).messages[0].text == "up to m1"  # type: ignore[union-attr]
        made = await _checkpoint(cps, KEY, "after", (await cps.fetch_since(KEY, 0)).seqs[0], 2)
        assert made.version == 3
        await store.save(KEY, msg("new", "assistant", id="new"))
        hidden_seq = next(s for s, m in zip(tail.seqs, tail.messages, strict=True) if m.id == "m5")
        refused = SummaryCheckpoint((summary_message("s"),), hidden_seq, head.epoch, "t", T0)
        assert await cps.save_checkpoint(KEY, refused, expected_version=3) is None

    async def test_fork_carries_a_checkpoint_that_covers_the_copy(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        travel = need(store, TimeTravelStorage)
        await store.save_messages(KEY, _turns(6))
        tail = await cps.fetch_since(KEY, 0)
        old = await _checkpoint(cps, KEY, "up to m1", tail.seqs[1], 0)
        newer = await _checkpoint(cps, KEY, "up to m3", tail.seqs[3], old.version)
        assert await travel.fork(KEY, FORKED) == 6
        carried = await cps.load_checkpoint(FORKED)
        fork_tail = await cps.fetch_since(FORKED, 0)
        assert carried is not None
        assert _ids(list(carried.messages)) == _ids(list(newer.messages))
        assert carried.covers_to == fork_tail.seqs[3]  # renumbered to the fork's m3
        assert carried.epoch == fork_tail.head.epoch
        assert await travel.fork(KEY, SIBLING, at="m2") == 3  # an older version covers m0-m1
        older = await cps.load_checkpoint(SIBLING)
        assert older is not None
        assert older.messages[0].text == "up to m1"
        assert older.covers_to == (await cps.fetch_since(SIBLING, 0)).seqs[1]
        third = ChatKey(KEY.user_id, "session-3", KEY.agent_id)
        assert await travel.fork(KEY, third, at="m0") == 1  # nothing covers only m0
        assert await cps.load_checkpoint(third) is None

    # --- through a summarizing layer --------------------------------------------------------

    @pytest.mark.parametrize("scrub", [False, True], ids=["plain", "scrub"])
    async def test_a_fork_of_a_summarized_conversation_needs_no_summarizer_call(
        self, base: ChatStorage, scrub: bool
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        inner = scrubbed(base) if scrub else base
        if SummarizingChatStorage(inner).summaries != "store":
            pytest.skip("the stack keeps no checkpoints")
        need(inner, TimeTravelStorage)
        first = _Counting()
        layer = SummarizingChatStorage(inner, first, trigger_at=2, keep_last=1)
        await layer.save_messages(KEY, _turns(12))
        view = await layer.fetch(KEY)
        assert view[0].is_summary
        calls = first.calls
        assert calls >= 1
        assert await layer.fork(KEY, FORKED) == 12
        second = _Counting()
        fresh = SummarizingChatStorage(inner, second, trigger_at=2, keep_last=1)
        assert await fresh.fetch(FORKED) == view  # the same view, from the carried checkpoint
        assert second.calls == 0
        assert await layer.rewind(KEY, "m10") == 1  # the checkpoint covers only kept ones
        rewound = await layer.fetch(KEY)
        assert rewound[0].is_summary
        assert _ids(rewound[1:]) == ["m10"]
        assert await fresh.fetch(KEY) == rewound
        assert (first.calls, second.calls) == (calls, 0)  # the kept checkpoint served both

    async def test_compaction_after_a_rewind_covers_what_the_rewind_kept(
        self, base: ChatStorage, harness: StoreHarness
    ) -> None:
        """A rewind hides messages whose sequence numbers the key's head still counts: a
        summary given by hand, or made by the summarizer, then covers the kept messages (it
        was refused as "kept changing"); another worker serves the same view."""
        from storage.layers.summarizing import SummarizingChatStorage

        layer = SummarizingChatStorage(base, trigger_at=4, keep_last=1)
        if layer.summaries != "store" or find_ability(base, TimeTravelStorage) is None:
            pytest.skip("the stack keeps no checkpoints")
        await layer.save_messages(KEY, _turns(6))
        assert await layer.rewind(KEY, "m3") == 2
        view = await layer.compact(KEY, summary="The user asked twice.")
        assert [m.is_summary for m in view] == [True]
        assert "The user asked twice." in str(view[0].content)
        await layer.save(KEY, msg("after the summary", id="n1"))
        assert _ids((await layer.fetch(KEY))[1:]) == ["n1"]
        assert await layer.rewind(KEY, "n1") == 0
        await layer.save_messages(KEY, _turns(4, "x"))
        assert await layer.rewind(KEY, "x1") == 2
        summarized = await layer.compact(KEY)  # the summarizer, over what the rewind kept
        assert summarized[0].is_summary
        assert "x2" not in _ids(summarized)
        if harness.persistent:
            worker = SummarizingChatStorage(base, trigger_at=4, keep_last=1)
            assert await worker.fetch(KEY) == await layer.fetch(KEY)

    @pytest.mark.parametrize("scrub", [False, True], ids=["plain", "scrub"])
    async def test_provenance_rebuilds_the_view_a_reply_answered(
        self, base: ChatStorage, harness: StoreHarness, scrub: bool
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        inner = scrubbed(base) if scrub else base
        layer = SummarizingChatStorage(inner, trigger_at=2, keep_last=1)
        if layer.summaries != "store" or find_ability(inner, TimeTravelStorage) is None:
            pytest.skip("the stack keeps no checkpoints")
        travel = need(base, TimeTravelStorage)
        await layer.save_messages(KEY, [*_turns(12), msg("a question", id="q")])
        view = await layer.fetch(KEY)
        assert view[0].is_summary
        await layer.save(KEY, msg("the answer", "assistant", id="r"))
        found = await layer.provenance(KEY, "r")
        assert found is not None
        assert list(found.messages) == view  # exactly what the model was given
        assert found.kinds[0] == "summary"
        assert set(found.kinds[1:]) == {"verbatim"}
        assert found.checkpoint_version >= 1
        omitted = _ids(list(found.omitted))
        assert omitted
        assert set(omitted) <= {f"m{i}" for i in range(12)}
        assert await travel.provenance(KEY, "r") is None  # a store records no view
        # A window: the reply to a fetch with a limit answered that window.
        window = await layer.fetch(KEY, limit=2)
        await layer.save(KEY, msg("to the window", "assistant", id="w"))
        windowed = await layer.provenance(KEY, "w")
        assert windowed is not None
        assert (list(windowed.messages), windowed.limit) == (window, 2)
        # Later compactions, rewinds and other workers do not change the answer.
        await layer.save_messages(KEY, _turns(10, "x"))
        assert (await layer.fetch(KEY))[0].is_summary
        assert await layer.rewind(KEY, "x9") == 0  # the newest
        assert await layer.rewind(KEY, "x5") == 4
        again = await layer.provenance(KEY, "r")
        assert again is not None
        assert list(again.messages) == view
        if harness.persistent:
            worker = SummarizingChatStorage(inner, trigger_at=2, keep_last=1)
            other = await worker.provenance(KEY, "r")
            assert other is not None
            assert list(other.messages) == view
        # A reply saved without a fetch before it, and a message that is no reply: unknown.
        await layer.save(KEY, msg("unprompted", "assistant", id="u"))
        assert await layer.provenance(KEY, "u") is None
        assert await layer.provenance(KEY, "q") is None
        await layer.delete(KEY)
        assert await layer.provenance(KEY, "r") is None  # erased with the conversation

    @one_backend
    async def test_a_rewind_by_another_process_is_seen_by_the_next_fetch(
        self, harness: StoreHarness, base: ChatStorage
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        if harness.url is None or not harness.persistent:
            pytest.skip("no URL another process can open")
        need(base, TimeTravelStorage)
        layer = SummarizingChatStorage(base, trigger_at=2, keep_last=1)
        await layer.save_messages(KEY, _turns(12))
        assert (await layer.fetch(KEY))[-1].id == "m11"
        assert layer.is_active(KEY)
        spec = {"url": harness.url, "key": [KEY.user_id, KEY.session_id, KEY.agent_id]}
        result = await anyio.run_process(
            [sys.executable, "-m", "storage.testing.child", json.dumps({**spec, "rewind": "m7"})],
            check=False,
            env=_child_env(),
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
        assert result.stdout.strip() == b"rewound 4"
        view = await layer.fetch(KEY)  # the same instance, its view cached before the rewind
        assert view[-1].id == "m7"
        assert "m8" not in _ids(view)


async def _checkpoint(
    cps: CheckpointStorage, key: ChatKey, text: str, covers_to: int, expected: int
) -> SummaryCheckpoint:
    head = await cps.head(key)
    made = SummaryCheckpoint((summary_message(text),), covers_to, head.epoch, "t", T0)
    stored = await cps.save_checkpoint(key, made, expected_version=expected)
    assert stored is not None
    return stored
