"""The ``mirror`` layer in one process: every write path reaches the secondary; an outage of
the secondary fails no call, is marked durably, logged once per conversation, counted and
repaired by the next write there (or ``repair()``, or after a restart); workers see each
other's marks; a resting or hanging secondary costs no call its timeout; URL, TOML and dict
config; abilities. Real servers stopped mid-run: tests/layers/mirroring/test_servers.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.lowlevel
import pytest

from storage import open_storage
from storage.abilities import (
    ABILITIES,
    ConversationRecord,
    SummaryCheckpoint,
    find_ability,
)
from storage.cli.transfer import collect_stats
from storage.config.stack import Stack
from storage.errors import ConfigError, StorageUnavailableError
from storage.layers.mirroring import MirrorChatStorage
from storage.message import ChatKey, ChatMessage
from storage.migrate import migrate, record_side, verify
from storage.migrate.journal import JOURNAL_USER, Mark
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.testing import FakeClock
from tests.migrate.data import SUMMARY_META, T0, ListingOnly, conversation
from tests.paths import code_blocks

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
OTHER = ChatKey("u", "s2", "a")


class Outage(InMemoryChatStorage):
    """A real in-memory store whose every write fails while ``down`` (as a store whose
    server went away: ``StorageUnavailableError``), and hangs while ``hanging``; with
    ``round_trip``, every call waits a turn of the event loop, as a server's does."""

    down = False
    hanging = False
    round_trip = False
    writes = 0

    async def _call(self, hook: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.round_trip:
            await anyio.lowlevel.checkpoint()
        if hook.__name__ not in (
            "_list_keys",
            "_fetch_records",
            "_load_checkpoint",
            "_checkpoint_version",
            "_timeline",
        ):
            self.writes += 1
            if self.hanging:
                await anyio.sleep_forever()
            if self.down:
                raise StorageUnavailableError("outage://: the secondary is down")
        return await super()._call(hook, *args, **kwargs)


def mirror(
    tmp_path: Path, secondary: Outage, clock: FakeClock | None = None, **options: Any
) -> MirrorChatStorage:
    """A mirror over a SQLite primary keeping 30 days (on ``clock``, which starts before
    the messages' times: nothing is purged but by ``purge(now=...)``)."""
    clock = clock or FakeClock()
    primary = SQLiteChatStorage(str(tmp_path / "primary.db"), retention="30d", clock=clock)
    return MirrorChatStorage(primary, secondary=secondary, clock=clock, **options)


def primary_of(layer: MirrorChatStorage) -> SQLiteChatStorage:
    assert isinstance(layer.inner, SQLiteChatStorage)
    return layer.inner


async def equal(layer: MirrorChatStorage) -> bool:
    report = await verify(layer.inner, layer.secondary)
    return report.equal


def summary_of(seq: int, epoch: str) -> SummaryCheckpoint:
    summary = ChatMessage("system", "the first turn", metadata=SUMMARY_META, created_at=T0)
    return SummaryCheckpoint((summary,), seq, epoch, "manual", T0)


async def _checkpoint(layer: MirrorChatStorage, key: ChatKey) -> None:
    tail = await layer.fetch_since(key, 0)
    stored = await layer.save_checkpoint(
        key,
        summary_of(tail.seqs[1], tail.head.epoch),
        expected_version=tail.head.checkpoint_version,
    )
    assert stored is not None


async def _replace(layer: MirrorChatStorage, key: ChatKey) -> None:
    head = await layer.head(key)
    kept = (await layer.fetch(key))[:2]
    await layer.replace(key, kept, expected_version=head.version)


async def _save_if(layer: MirrorChatStorage, key: ChatKey) -> None:
    head = await layer.head(key)
    await layer.save_messages_if(
        key, [ChatMessage("user", "conditional")], expected_version=head.version
    )


WRITES: dict[str, Callable[[MirrorChatStorage, ChatKey], Awaitable[Any]]] = {
    "save": lambda m, k: m.save(k, ChatMessage("user", "one more")),
    "save_messages": lambda m, k: m.save_messages(k, conversation(9, turns=1)),
    "save_record": lambda m, k: m.save_record(k, ConversationRecord("status", {"ok": True})),
    "save_checkpoint": _checkpoint,
    "replace": _replace,
    "save_messages_if": _save_if,
    "rewind": lambda m, k: m.rewind(k, "c1-r0"),
    "delete": lambda m, k: m.delete(k),
}


async def test_every_write_path_reaches_the_secondary(tmp_path: Path) -> None:
    clock = FakeClock()
    secondary = Outage(retention="30d", clock=clock)
    async with mirror(tmp_path, secondary, clock) as layer:
        await layer.inner.save(ChatKey("x", "y", "z"), ChatMessage("user", "primary only"))
        await layer.inner.delete(ChatKey("x", "y", "z"))  # the primary's sequence runs ahead
        for name, write in WRITES.items():
            await layer.save_messages(KEY, conversation(1))
            await write(layer, KEY)
            assert await equal(layer), name
            if name == "save_checkpoint":
                ours = await layer.load_checkpoint(KEY)
                theirs = await secondary.load_checkpoint(KEY)
                assert ours is not None
                assert theirs is not None
                assert theirs.covers_to != ours.covers_to  # each store's own sequence
        assert await secondary.list_keys() == []  # the last write was a delete
        await layer.save_messages(OTHER, conversation(2))
        await layer.delete_user("u")
        assert await secondary.list_keys() == []
        await layer.save(KEY, ChatMessage("user", "old", created_at=T0))
        await layer.save(OTHER, ChatMessage("user", "new"))
        assert await layer.purge(now=T0 + timedelta(days=31)) == 1
        assert await equal(layer)
        assert [m.content for m in await secondary.fetch(OTHER)] == ["new"]
        assert (layer.secondary_failures, layer.missed) == (0, 0)


@pytest.mark.parametrize("write", sorted(WRITES))
async def test_an_outage_fails_no_call_is_marked_once_and_repaired_by_the_next_write(
    write: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secondary = Outage()
    clock = FakeClock()
    async with mirror(tmp_path, secondary, clock) as layer:
        await layer.save_messages(KEY, conversation(1))
        secondary.down = True
        caplog.set_level(logging.WARNING, logger="storage.layers.mirroring")
        await WRITES[write](layer, KEY)  # no error
        clock.advance(10)
        await layer.save(KEY, ChatMessage("user", "while it is down"))
        assert layer.secondary_failures == 2
        assert layer.missed == 1
        warned = [r for r in caplog.records if "missed" in r.getMessage()]
        assert len(warned) == 1  # once per conversation
        assert str(KEY) in warned[0].getMessage()
        assert not await equal(layer)
        journal = await primary_of(layer).list_keys(JOURNAL_USER)
        assert [Mark.decode(k.agent_id) for k in journal] == [Mark.of_key(KEY)]
        assert await layer.list_keys() == [KEY]  # the journal is not a conversation

        secondary.down = False
        clock.advance(10)
        await layer.save(KEY, ChatMessage("user", "back"))
        assert (layer.missed, layer.repairs) == (0, 1)
        assert await equal(layer)
        assert await primary_of(layer).list_keys(JOURNAL_USER) == []


async def test_a_fork_reaches_the_secondary_as_the_primary_made_it(tmp_path: Path) -> None:
    secondary = Outage()
    clock = FakeClock()
    async with mirror(tmp_path, secondary, clock) as layer:
        await layer.inner.save(ChatKey("x", "y", "z"), ChatMessage("user", "primary only"))
        await layer.inner.delete(ChatKey("x", "y", "z"))  # the primary's sequence runs ahead
        await layer.save_messages(KEY, conversation(1))
        await _checkpoint(layer, KEY)
        assert await layer.fork(KEY, OTHER, at="c1-r1") == 6
        assert await equal(layer)
        assert [m.id for m in await secondary.fetch(OTHER)] == [
            m.id for m in await layer.fetch(OTHER)
        ]
        carried = await secondary.load_checkpoint(OTHER)
        assert carried is not None  # the summary came along: no summarizer call there
        assert carried.messages == (await layer.load_checkpoint(OTHER) or carried).messages
        third = ChatKey("u", "s3", "a")
        secondary.down = True
        assert await layer.fork(KEY, third) == 8  # no error
        assert layer.missed == 1
        assert not await equal(layer)
        secondary.down = False
        clock.advance(10)
        await layer.save(third, ChatMessage("user", "back"))
        assert (layer.missed, layer.repairs) == (0, 1)
        assert await equal(layer)


async def test_a_missed_erasure_and_purge_are_repaired(tmp_path: Path) -> None:
    clock = FakeClock()
    secondary = Outage(retention="30d", clock=clock)
    async with mirror(tmp_path, secondary, clock) as layer:
        await layer.save_messages(KEY, conversation(1))
        await layer.save(OTHER, ChatMessage("user", "old", created_at=T0))
        secondary.down = True
        await layer.delete_user("u")
        await layer.save(OTHER, ChatMessage("user", "old", id="o2", created_at=T0))
        assert await layer.purge(now=T0 + timedelta(days=31)) == 1
        assert {m.kind for m in layer._misses.marked} == {"user", "key", "purge"}
        secondary.down = False
        clock.advance(10)
        await layer.save(KEY, ChatMessage("user", "after"))  # the user's erasure first
        assert [m.content for m in await secondary.fetch(KEY)] == ["after"]
        assert await layer.repair() == 2  # the purge and the other conversation
        assert layer.missed == 0
        assert await equal(layer)


async def test_marks_survive_a_restart_and_migrate_repairs_them(tmp_path: Path) -> None:
    secondary = Outage()
    async with mirror(tmp_path, secondary) as layer:
        await layer.save_messages(KEY, conversation(1))
        secondary.down = True
        await layer.save_messages(OTHER, conversation(2))
        await layer.save(KEY, ChatMessage("user", "lost on the secondary"))
        name = layer.secondary_name
    secondary.down = False
    async with mirror(tmp_path, secondary) as restarted:
        await restarted._misses.refresh()
        assert restarted.missed == 2  # read back from the primary's journal
        assert not await equal(restarted)
    async with SQLiteChatStorage(str(tmp_path / "primary.db")) as primary:
        stats = await collect_stats(Stack(primary))  # the marks are not conversations
        assert (stats.users, stats.conversations) == (1, 2)
        report = await migrate(primary, secondary, journal=name)
        assert report.marks_repaired == 2
        assert (await verify(primary, secondary)).equal
        assert await primary.list_keys(JOURNAL_USER) == []


async def test_a_worker_repairs_what_another_worker_missed(tmp_path: Path) -> None:
    secondary = Outage()
    clock = FakeClock()
    async with mirror(tmp_path, secondary, clock) as a, mirror(tmp_path, secondary, clock) as b:
        await a.save_messages(KEY, conversation(1))
        await b.save(OTHER, ChatMessage("user", "b has read the journal"))
        secondary.down = True
        await a.save(KEY, ChatMessage("user", "missed through a"))
        secondary.down = False
        clock.advance(a.retry_after + 1)
        await b.save(KEY, ChatMessage("user", "through b, before b reads the journal again"))
        assert not await equal(a)  # the secondary lacks a's message
        clock.advance(b.recheck)
        await b.save(KEY, ChatMessage("user", "through b, after"))
        assert (b.repairs, b.missed) == (1, 0)
        assert await equal(a)


async def test_a_resting_or_hanging_secondary_costs_no_call_its_timeout(tmp_path: Path) -> None:
    secondary = Outage()
    clock = FakeClock()
    async with mirror(tmp_path, secondary, clock, timeout=0.2, retry_after=30) as layer:
        secondary.hanging = True
        with anyio.fail_after(10):
            await layer.save(KEY, ChatMessage("user", "cut off after 0.2 s"))
        assert layer.secondary_failures == 1
        tried = secondary.writes
        secondary.hanging = False
        await layer.save(KEY, ChatMessage("user", "resting: not even tried"))
        await layer.save(OTHER, ChatMessage("user", "nor this"))
        assert secondary.writes == tried
        assert (layer.skipped, layer.missed) == (2, 2)
        clock.advance(30)
        await layer.save(KEY, ChatMessage("user", "tried again"))
        await layer.save(OTHER, ChatMessage("user", "and this"))
        assert (layer.missed, layer.repairs) == (0, 2)
        assert await equal(layer)


async def test_config_by_url_and_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secondary = f"sqlite:///{tmp_path}/secondary.db?busy_timeout=2"  # '?', '&': encoded
    chain = f"mirror?secondary={quote(secondary, safe='')}&timeout=2&retry_after=1m"
    async with open_storage(f"{chain}::sqlite:///{tmp_path}/p.db") as stack:
        layer = stack.find(MirrorChatStorage)
        assert layer is not None
        assert (layer.timeout, layer.retry_after, layer.recheck) == (2.0, 60.0, 30.0)
        assert layer.secondary_name == secondary
        await stack.save(KEY, ChatMessage("user", "both"))
        assert await equal(layer)
    toml = tmp_path / "stack.toml"
    toml.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n\n'
        f'[[layers]]\ntype = "mirror"\nsecondary = "scrub?secret=s3cr3t-value::{secondary}"\n'
    )
    async with open_storage(toml) as stack:
        layer = stack.find(MirrorChatStorage)
        assert layer is not None
        assert layer.secondary_name.startswith("scrub?secret=***::sqlite:")  # redacted
        mirrored = layer.secondary
        assert isinstance(mirrored, Stack)  # built from its URL
        assert record_side(mirrored).storage is not mirrored.base  # scrubbed


async def test_config_by_dict_and_env_redacts_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECONDARY_URL", "redis://:hunter2-pw@127.0.0.1:1/0")
    config = {
        "store": {"url": f"sqlite:///{tmp_path}/p.db"},
        "layers": [{"type": "mirror", "secondary_env": "SECONDARY_URL"}],
    }
    async with open_storage(config) as stack:
        text = stack.describe()
        assert "MirrorChatStorage(secondary=redis://:***@127.0.0.1:1/0" in text
        assert "hunter2" not in text + repr(stack)


async def test_abilities_and_what_is_refused(tmp_path: Path) -> None:
    async with open_storage(f"mirror?secondary=memory://::sqlite:///{tmp_path}/p.db") as stack:
        for ability in ABILITIES:
            assert find_ability(stack, ability) is not None, ability.__name__
        assert await stack.list_keys(JOURNAL_USER) == []
    with pytest.raises(ConfigError, match="does not offer SequencedStorage"):
        MirrorChatStorage(InMemoryChatStorage(), secondary=ListingOnly())
    # the record of a secondary is below its view layers (as for migrate)
    views = quote("summarize::memory://", safe="")
    async with open_storage(f"mirror?secondary={views}::sqlite:///{tmp_path}/p.db") as stack:
        layer = stack.find(MirrorChatStorage)
        assert layer is not None
        assert layer._sec.storage is layer.secondary.base  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown store 'nosuch'"):
        open_storage(f"mirror?secondary=nosuch://x::sqlite:///{tmp_path}/p.db")


async def test_migrate_while_the_mirror_writes_the_same_conversations(tmp_path: Path) -> None:
    """The cut-over: history written before the mirror, new turns mirrored while migrate
    copies; when migrate returns the secondary holds exactly what the primary holds."""
    secondary = Outage()
    secondary.round_trip = True  # migrate's reads and writes interleave with the mirror's
    keys = [ChatKey("u", f"s{n}", "a") for n in range(12)]
    async with mirror(tmp_path, secondary) as layer:
        for n, key in enumerate(keys):
            await primary_of(layer).save_messages(key, conversation(n, turns=6))

        async def writer() -> None:
            for turn in range(8):
                for key in keys:
                    await layer.save(key, ChatMessage("user", f"live {turn}"))
                    await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            report = await migrate(primary_of(layer), secondary, batch=2)
        assert report.keys == len(keys)
        assert await equal(layer)


def test_the_docs_cut_over_config_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = next(b for b in code_blocks("toml") if "mirror" in b)
    config = tmp_path / "cut-over.toml"
    config.write_text(block)
    monkeypatch.setenv("CHATLAYERS_NEW_DSN", "memory://")
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "readme-secret")
    stack = open_storage(config)  # nothing is opened yet
    names = [type(c).__name__ for c in stack.components()]
    assert names == [
        "SummarizingChatStorage",
        "TransformingChatStorage",
        "MirrorChatStorage",
        "SQLiteChatStorage",
    ]
    layer = stack.find(MirrorChatStorage)
    assert layer is not None
    assert (layer.secondary_name, layer.timeout, layer.retry_after) == ("memory://", 5.0, 5.0)
