"""``migrate`` and ``verify`` in code, between the file and memory stores (servers and the
command line: tests/cli/test_migrate.py): ids, order, times, records in their place,
checkpoints remapped, idempotence, a diverged target, every kind of difference named, and
scrubbing or encrypting targets."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from storage import open_storage
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.cli import main
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.layers.encrypting import new_master_key
from storage.message import ChatKey, ChatMessage
from storage.migrate import migrate, read_snapshot, record_side, verify
from tests.migrate.data import KEYS, SUMMARY_META, T0, ListingOnly, seed, unrelated
from tests.paths import REPO

pytestmark = pytest.mark.anyio

TAU = REPO / "examples" / "data" / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
SECRET = "migrate-secret-0123456789"


def url(kind: str, root: Path, name: str) -> str:
    return {
        "memory": "memory://",
        "sqlite": f"sqlite:///{root}/{name}.db",
        "jsonl": f"jsonl://{root}/{name}",
    }[kind]


PAIRS = [("memory", "sqlite"), ("jsonl", "sqlite"), ("sqlite", "jsonl"), ("sqlite", "memory")]


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS, ids=lambda k: str(k))
async def test_everything_is_copied_with_checkpoints_remapped(
    src_kind: str, dst_kind: str, tmp_path: Path
) -> None:
    async with (
        open_storage(url(src_kind, tmp_path, "src")) as source,
        open_storage(url(dst_kind, tmp_path, "dst")) as target,
    ):
        await seed(source)
        await unrelated(target)  # the target's sequence numbers run ahead of the source's
        await target.delete_user("someone-else")
        report = await migrate(source, target, batch=2)
        assert (report.keys, report.keys_changed) == (3, 3)
        assert report.messages == report.messages_copied == 3 * 8
        assert report.checkpoints == report.checkpoints_copied == 2
        assert report.records == report.records_copied == 6
        assert (await verify(source, target)).equal

        src, dst = record_side(source), record_side(target)
        for key in KEYS:
            a, b = await read_snapshot(src, key), await read_snapshot(dst, key)
            assert b.messages == a.messages  # ids, order, created_at, tool calls, metadata
            assert [r.id for r in b.records] == ["r" + key_index(key), "s" + key_index(key)]
            assert b.seqs is not None
            # the first record sits after the third message, as in the source
            assert b.seqs[2] < b.records[0].seq < b.seqs[3]
            assert b.records[1].seq > b.seqs[-1]
            assert [attrs.evolve(r, seq=0) for r in b.records] == [
                attrs.evolve(r, seq=0) for r in a.records
            ]
            if a.checkpoint is None:
                assert b.checkpoint is None
                continue
            assert b.checkpoint is not None
            assert b.checkpoint.messages == a.checkpoint.messages
            assert b.covered_id() == a.covered_id() == a.messages[1].id
            assert b.checkpoint.covers_to == b.seqs[1]  # the target's own sequence number
            assert b.head is not None
            assert b.checkpoint.epoch == b.head.epoch
        if dst_kind == "sqlite":  # other sequence numbers than the source's: remapped
            a0 = await read_snapshot(src, KEYS[0])
            b0 = await read_snapshot(dst, KEYS[0])
            assert a0.checkpoint
            assert b0.checkpoint
            assert a0.checkpoint.covers_to != b0.checkpoint.covers_to

        again = await migrate(source, target)
        assert (again.keys, again.keys_changed, again.messages_copied) == (3, 0, 0)
        assert (again.checkpoints_copied, again.records_copied) == (0, 0)


def key_index(key: ChatKey) -> str:
    return str(KEYS.index(key))


REPLAY = "summarize?trigger_tokens=4000::scrub::sqlite:///{}"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tau-bench conversations replayed through a summarizing stack (built once)."""
    db = tmp_path_factory.mktemp("replayed") / "src.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHATLAYERS_PII_SECRET", SECRET)
        assert main(["replay", "--url", REPLAY.format(db), str(TAU)]) == 0
    return db


@pytest.fixture
def summarized(replayed: Path, tmp_path: Path) -> Path:
    """A copy of the replayed database for one test."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{replayed}{suffix}").exists():
            shutil.copy(f"{replayed}{suffix}", tmp_path / f"src.db{suffix}")
    return tmp_path / "src.db"


async def test_a_summarized_conversation_serves_the_same_view_with_no_summarizer_call(
    summarized: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    stack = REPLAY.format(summarized)
    async with (
        open_storage(stack) as source,
        open_storage(f"sqlite:///{tmp_path}/dst.db") as target,
    ):
        report = await migrate(source, target)
    assert report.checkpoints_copied == report.checkpoints > 10
    async with (
        open_storage(stack) as source,
        open_storage(f"summarize?trigger_tokens=4000::sqlite:///{tmp_path}/dst.db") as target,
    ):
        layer = target.find_all(lambda c: hasattr(c, "summarizer_calls"))
        (summarizing,) = list(layer)
        served = 0
        for key in await record_side(source).keys():
            view = await target.fetch(key)
            assert view == await source.fetch(key)
            served += any(m.is_summary for m in view)
        assert served == report.checkpoints
        assert summarizing.summarizer_calls == 0  # type: ignore[attr-defined]
        checked = await verify(source, target, views=True)
        assert checked.equal
        assert checked.views == report.keys
        assert checked.summarized_views == report.checkpoints
        assert summarizing.summarizer_calls == 0  # type: ignore[attr-defined]
        assert not summarizing.serve_only  # type: ignore[attr-defined]  # set back after the run


async def test_a_diverged_target_is_rewritten_and_a_deleted_conversation_reported(
    tmp_path: Path,
) -> None:
    async with (
        open_storage(f"sqlite:///{tmp_path}/src.db") as source,
        open_storage(f"sqlite:///{tmp_path}/dst.db") as target,
    ):
        await seed(source)
        await migrate(source, target)
        key = KEYS[0]
        await target.save(key, ChatMessage("user", "written to the target only", id="stray"))
        assert _what(await verify(source, target)) == (
            f"{key}: 8 messages in the source, 9 in the target (first only in the target: "
            "message 8, id 'stray')"
        )
        report = await migrate(source, target)
        assert (report.rewritten, report.keys_changed) == (1, 1)
        assert (await verify(source, target)).equal  # checkpoint back, records kept


def _what(report: Any) -> str:
    assert report.difference is not None
    return str(report.difference)


async def test_verify_names_the_first_difference(tmp_path: Path) -> None:
    async with (
        open_storage(f"sqlite:///{tmp_path}/src.db") as source,
        open_storage(f"sqlite:///{tmp_path}/dst.db") as target,
    ):
        await seed(source)
        assert _what(await verify(source, target)).endswith("not in the target")
        await migrate(source, target)
        assert (await verify(source, target)).equal
        dst = record_side(target)
        key = KEYS[1]
        snap = await read_snapshot(dst, key)
        assert dst.replaceable is not None
        assert dst.checkpoints is not None

        # content of one message
        changed = [*snap.messages]
        changed[4] = attrs.evolve(changed[4], content="edited")
        await dst.replaceable.replace(key, changed)
        what = _what(await verify(source, target))
        assert what == f"{key}: message 4 (id {changed[4].id!r}): content differs"

        # order (the replace also dropped the checkpoint: order is named first)
        await dst.replaceable.replace(key, [snap.messages[1], snap.messages[0], *snap.messages[2:]])
        assert "message 0: id 'c1-u0' in the source, 'c1-r0' in the target" in _what(
            await verify(source, target)
        )

        # the checkpoint
        await dst.replaceable.replace(key, snap.messages)
        assert _what(await verify(source, target)) == (
            f"{key}: a summary checkpoint only in the source"
        )
        tail = await dst.replaceable.fetch_since(key, 0)  # type: ignore[attr-defined]
        summary = ChatMessage("system", "another", id="x", metadata=SUMMARY_META, created_at=T0)
        cp = SummaryCheckpoint((summary,), tail.seqs[1], tail.head.epoch, "manual", T0)
        await dst.checkpoints.save_checkpoint(key, cp, expected_version=0)
        assert "summary message 0: id 'sum1' in the source, 'x' in the target" in _what(
            await verify(source, target)
        )
        await migrate(source, target)
        assert (await verify(source, target)).equal

        # a record
        assert dst.records is not None
        await dst.records.save_record(key, ConversationRecord("extra", {}, id="late"))
        assert _what(await verify(source, target)) == (
            f"{key}: 2 records in the source, 3 in the target"
        )
        await target.delete(key)
        await migrate(source, target)

        # a conversation only in the target
        stray = ChatKey("zz-only-there", "s", "a")
        await target.save(stray, ChatMessage("user", "hi"))
        assert _what(await verify(source, target)) == f"{stray}: only in the target"


async def test_a_target_that_cannot_keep_checkpoints_is_refused(tmp_path: Path) -> None:
    async with (
        open_storage(f"sqlite:///{tmp_path}/src.db") as source,
        open_storage(f"summarize?summaries=memory::sqlite:///{tmp_path}/dst.db") as target,
    ):
        await seed(source)
        # summarize:: over a store is fine (the store below keeps the checkpoints) ...
        assert (await migrate(source, target)).checkpoints_copied == 2
    # (the record of a stack is below its view layers)
    async with open_storage("strict::summarize::memory://") as views:
        assert record_side(views).storage is views.base
    # ... but a target that cannot keep them at all is refused before anything is written
    bare = Stack(ListingOnly())
    async with open_storage(f"sqlite:///{tmp_path}/src.db") as source:
        with pytest.raises(ConfigError, match="cannot keep summary checkpoints"):
            await migrate(source, bare)


async def test_scrubbed_data_through_scrub_is_unchanged_and_encrypt_seals_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source holds scrubbed text (placeholders): a ``scrub::`` target scrubs it again,
    which changes nothing (placeholders are never matched again, whatever the secret), so
    the copy verifies equal; an ``encrypt::`` target seals it (the file holds no text) and
    reads it back equal through the layer."""
    monkeypatch.setenv("MK", new_master_key())
    pii = "write to jane.doe@example.com or call +1 415 555 2671"
    async with open_storage(f"scrub?secret={SECRET}::sqlite:///{tmp_path}/src.db") as source:
        await seed(source)
        key = ChatKey("pii-user", "s", "a")
        await source.save(key, ChatMessage("user", pii, id="pii"))
        scrubbed = (await source.fetch(key))[0].content
        assert isinstance(scrubbed, str)
        assert "<EMAIL_ADDRESS_" in scrubbed
        again = f"scrub?secret=another-secret-0987654321::sqlite:///{tmp_path}/scrubbed.db"
        async with open_storage(again) as target:
            assert (await migrate(source, target)).messages_copied == 25
            assert (await verify(source, target)).equal
        keyring = f"sqlite:///{tmp_path}/keyring.db"
        sealed = f"encrypt?create_keyring=true&key_env=MK&keyring={keyring}::sqlite:///{tmp_path}/sealed.db"
        async with open_storage(sealed) as target:
            assert (await migrate(source, target)).messages_copied == 25
            assert (await verify(source, target)).equal
            assert (await target.fetch(key))[0].content == scrubbed
    raw = _files_bytes(tmp_path, "sealed.db")
    assert b"question 0.1" not in raw
    assert b"EMAIL_ADDRESS" not in raw
    assert _files_bytes(tmp_path, "keyring.db")


def _files_bytes(root: Path, prefix: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.iterdir()) if p.name.startswith(prefix))
