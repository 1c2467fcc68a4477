"""JSONL store: unicode, bad input, tail reads, deletion, policies."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

import anyio
import pytest

from storage.errors import InvalidMessageError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.jsonl import JsonlChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
LOGGER = "storage.stores.jsonl"


def data_file(root: Path, key: ChatKey = KEY) -> Path:
    return root / key.user_id / key.session_id / f"{key.agent_id}.jsonl"


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages]


# --- unicode ----------------------------------------------------------------------------------

UNICODE = [
    "emoji 😀🎉",
    "zwj family 👩‍👩‍👧‍👦 and flag 🏳️‍🌈",
    "rtl שלום עולם and مرحبا",
    "combining e\u0301 a\u0308 \u1e9b\u0323",
    "cjk 漢字かなカナ 한국어",
    "line\u2028separator\u2029paragraph\x85nel\rcr\vvt\ffeed",
    "bom \ufeff and nbsp \u00a0 and rlo \u202e",
    "astral \U0001d518\U0001d52b\U0001d526 \U0010fffd",
]


async def test_unicode_round_trips_byte_exact_and_raw_in_the_file(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        messages = [ChatMessage("user", text) for text in UNICODE]
        await store.save_messages(KEY, messages)
        await store.save(KEY, ChatMessage("assistant", "single 😀", metadata={"ключ": "值 👍"}))
        for fetched in (await store.fetch(KEY), await JsonlChatStorage(tmp_path).fetch(KEY)):
            for text, message in zip(UNICODE, fetched, strict=False):
                assert message.text.encode("utf-8") == text.encode("utf-8")
            assert fetched[-1].metadata["ключ"] == "值 👍"
        assert texts(await store.fetch(KEY, limit=3))[0].encode() == UNICODE[-2].encode()
    raw = data_file(tmp_path).read_bytes()
    assert raw.count(b"\n") == 1 + len(UNICODE) + 1  # header; no separator split a line
    raw.decode("utf-8")  # strict: the file is UTF-8
    for text in UNICODE[:5]:
        assert text.encode("utf-8") in raw  # stored as UTF-8, not \u escapes: greppable


async def test_lone_surrogate_refused_before_writing(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(KEY, ChatMessage("user", "before"))
        before = data_file(tmp_path).read_bytes()
        bad = [
            ChatMessage("user", "ok"),
            ChatMessage("user", "lone \ud83d surrogate"),
        ]
        with pytest.raises(InvalidMessageError, match="message 1: content holds a lone surrogate"):
            await store.save_messages(KEY, bad)
        with pytest.raises(InvalidMessageError, match="surrogate"):
            await store.save(KEY, ChatMessage("user", "x", metadata={"k": "\udc80"}))
        call = ToolCall("c1", "f", '{"a": "\ud800"}')
        with pytest.raises(InvalidMessageError, match="surrogate"):
            await store.save(KEY, ChatMessage("assistant", None, (call,)))
        assert data_file(tmp_path).read_bytes() == before
        assert texts(await store.fetch(KEY)) == ["before"]


async def test_nul_in_content_is_stored_losslessly_and_escaped(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(KEY, ChatMessage("user", "a\x00b", metadata={"n": "\x00"}))
        (fetched,) = await store.fetch(KEY)
        assert fetched.content == "a\x00b"
        assert fetched.metadata["n"] == "\x00"
    assert b"\x00" not in data_file(tmp_path).read_bytes()


# --- reads ------------------------------------------------------------------------------------


async def test_limit_reads_only_the_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Overwrite the first half of a long file with NUL bytes: a tail read never notices."""
    async with JsonlChatStorage(tmp_path) as store:
        for chunk in range(10):
            await store.save_messages(
                KEY, [ChatMessage("user", f"m{chunk * 500 + i}") for i in range(500)]
            )
    path = data_file(tmp_path)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.write(b"\x00" * (size // 2))
    caplog.set_level(logging.WARNING, LOGGER)
    async with JsonlChatStorage(tmp_path, cache_bytes=0) as store:
        assert texts(await store.fetch(KEY, limit=20)) == [f"m{i}" for i in range(4980, 5000)]
        assert caplog.records == []  # the damaged head was never read
        everything = await store.fetch(KEY)
        assert texts(everything)[-1] == "m4999"
        assert len(everything) < 5000
        assert caplog.records  # a whole read does meet it


async def test_long_lines_and_windows(tmp_path: Path) -> None:
    big = "x" * 3_000_000
    async with JsonlChatStorage(tmp_path, cache_bytes=1024) as store:
        await store.save_messages(KEY, [ChatMessage("user", t) for t in ("first", big, "last")])
        assert texts(await store.fetch(KEY, limit=1)) == ["last"]
        assert [len(t) for t in texts(await store.fetch(KEY, limit=2))] == [len(big), 4]
        assert texts(await store.fetch(KEY, limit=300))[0] == "first"
        assert texts(await store.fetch(KEY))[1] == big


@pytest.mark.parametrize("cache_bytes", [0, 600, 32 << 20])
async def test_reads_are_the_same_whatever_the_cache(tmp_path: Path, cache_bytes: int) -> None:
    async with JsonlChatStorage(tmp_path, cache_bytes=cache_bytes) as store:
        keys = [ChatKey("u", "s", f"a{k}") for k in range(3)]
        expected: dict[ChatKey, list[str]] = {k: [] for k in keys}
        for n in range(60):
            key = keys[n % 3]
            await store.save(key, ChatMessage("user", f"m{n}"))
            expected[key].append(f"m{n}")
            for k in keys:
                assert texts(await store.fetch(k, limit=4)) == expected[k][-4:]
            assert texts(await store.fetch(key)) == expected[key]
        merged = await store.fetch_all_chats("u", "s")
        assert [m.message.text for m in merged] == [f"m{n}" for n in range(60)]


# --- several stores on one directory (as several processes) -----------------------------------


async def test_stale_cached_view_after_another_store_deletes_and_recreates(tmp_path: Path) -> None:
    a, b = JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)
    old = [ChatMessage("user", f"old{i}") for i in range(3)]
    await a.save_messages(KEY, old)
    await b.delete(KEY)
    # b writes a longer conversation in the same place; a's cached ids are stale.
    await b.save_messages(KEY, [ChatMessage("user", f"new{i} " + "y" * 50) for i in range(5)])
    assert len(await a.save(KEY, old[0])) == 1  # deleted, so not a duplicate any more
    assert await b.save(KEY, old[0]) == []
    assert texts(await b.fetch(KEY))[-1] == "old0"
    await a.aclose()
    await b.aclose()


async def test_many_tasks_over_two_stores(tmp_path: Path) -> None:
    stores = [JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)]
    shared = [ChatMessage("user", f"shared{i}") for i in range(20)]

    async def writer(w: int) -> None:
        store = stores[w % 2]
        for i in range(20):
            await store.save(ChatKey("u", "s", f"a{w % 3}"), ChatMessage("user", f"w{w}-{i}"))
            await store.save(KEY, shared[(i + w) % 20])  # retried by every writer

    async with anyio.create_task_group() as tg:
        for w in range(6):
            tg.start_soon(writer, w)
    merged = await stores[0].fetch_all_chats("u", "s")
    assert len(merged) == 6 * 20 + 20
    for w in range(6):
        mine = [m.message.text for m in merged if m.message.text.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(20)]
    assert sorted(texts(await stores[1].fetch(KEY))) == sorted(m.text for m in shared)
    for store in stores:
        await store.aclose()


# --- deletion ---------------------------------------------------------------------------------


async def test_delete_removes_files_and_empty_directories(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with JsonlChatStorage(root) as store:
        other = ChatKey("u", "s", "b")
        elsewhere = ChatKey("v", "t", "a")
        long_key = ChatKey("u", "s", "z" * 400)
        for key in (KEY, other, elsewhere, long_key):
            await store.save(key, ChatMessage("user", "x"))
        await store.delete(long_key)
        session_dir = root / "u" / "s"
        # The session's last activity (the deleted key's message) stays in its summary.
        assert sorted(os.listdir(session_dir)) == [".lock", ".summary", "a.jsonl", "b.jsonl"]
        await store.delete(KEY)
        assert sorted(os.listdir(session_dir)) == [".lock", ".summary", "b.jsonl"]
        await store.delete(other)
        assert not (root / "u").exists()  # the session and the user directory went with it
        await store.delete(other)
        await store.delete_user("v")
        assert list(root.iterdir()) == []
        assert root.is_dir()
        await store.delete_user("nobody")
        assert len(await store.save(KEY, ChatMessage("user", "again"))) == 1
        assert texts(await store.fetch(KEY)) == ["again"]


async def test_delete_user_with_many_sessions(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        for s in range(5):
            for a in range(3):
                await store.save(ChatKey("victim", f"s{s}", f"a{a}"), ChatMessage("user", "x"))
        await store.save(ChatKey("victim2", "s0", "a0"), ChatMessage("user", "keep"))
        await store.delete_user("victim")
        assert os.listdir(tmp_path) == ["victim2"]
        assert await store.fetch(ChatKey("victim", "s0", "a0")) == []
        assert await store.list_keys() == [ChatKey("victim2", "s0", "a0")]


# --- policies, errors, lifecycle --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["always", "batch", "never"])
async def test_every_fsync_policy_stores(tmp_path: Path, policy: str) -> None:
    interval = 0.0 if policy == "batch" else 1.0  # fsync on every save, through the batch path
    store = JsonlChatStorage(tmp_path, fsync=policy, fsync_interval=interval)  # type: ignore[arg-type]
    for n in range(3):
        await store.save(ChatKey("u", "s", f"a{n}"), ChatMessage("user", f"m{n}"))
    await store.save_messages(KEY, [ChatMessage("user", "b1"), ChatMessage("user", "b2")])
    assert policy in store.describe()
    await store.aclose()
    async with JsonlChatStorage(tmp_path) as again:
        assert texts(await again.fetch(KEY)) == ["b1", "b2"]
        assert texts(await again.fetch(ChatKey("u", "s", "a2"))) == ["m2"]


def test_bad_options_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync must be"):
        JsonlChatStorage(tmp_path, fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache_bytes"):
        JsonlChatStorage(tmp_path, cache_bytes=-1)
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageUnavailableError, match="file"):
        JsonlChatStorage(tmp_path / "file")


def test_building_a_store_touches_nothing(tmp_path: Path) -> None:
    from storage import open_storage

    JsonlChatStorage(tmp_path / "direct")
    open_storage(f"jsonl://{tmp_path}/url/nested")
    open_storage(f"summarize::jsonl://{tmp_path}/stack")
    assert list(tmp_path.iterdir()) == []


async def test_reads_of_a_missing_directory_find_an_empty_store_and_make_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    other = ChatKey("u", "t", "a")
    async with JsonlChatStorage(root, retention="1d") as store:
        assert await store.fetch(KEY) == []
        assert await store.fetch(KEY, limit=3) == []
        assert (await store.head(KEY)).last_seq == 0
        assert (await store.fetch_since(KEY, 0)).messages == ()
        assert (await store.fetch_timeline(KEY)).messages == ()
        assert await store.fetch_all_chats("u", "s") == []
        assert await store.list_keys() == []
        assert (await store.list_sessions("u")).sessions == ()
        assert await store.search("u", "anything") == []
        assert await store.load_checkpoint(KEY) is None
        assert await store.fetch_records(KEY) == []
        assert await store.fork(KEY, other) == 0
        assert await store.purge() == 0
        assert await store.compact(KEY) is None
        assert await store.compact_all() == []
        await store.release_lease(KEY, "worker")
        await store.delete(KEY)
        await store.delete_user("u")
    assert not root.exists()


@pytest.mark.parametrize("umask", [0, 0o022])
async def test_the_first_write_makes_the_directory_private(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "parent" / "store"
    store = JsonlChatStorage(root, fsync="always")
    old = os.umask(umask)
    try:
        await store.save(KEY, ChatMessage("user", "x"))
    finally:
        os.umask(old)
    assert root.stat().st_mode & 0o777 == 0o700
    assert texts(await store.fetch(KEY)) == ["x"]
    await store.aclose()


def test_create_false_refuses_a_missing_directory(tmp_path: Path) -> None:
    from storage import open_storage

    with pytest.raises(StorageUnavailableError, match=r"no JSONL store at .*check the path"):
        JsonlChatStorage(tmp_path / "typo", create=False)
    with pytest.raises(StorageUnavailableError, match="no JSONL store"):
        open_storage(f"jsonl://{tmp_path}/typo?create=false")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "there").mkdir()
    assert JsonlChatStorage(tmp_path / "there", create=False).root == str(tmp_path / "there")


async def test_unwritable_place_raises_unavailable_and_stores_nothing(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        (tmp_path / "blocked").write_text("a file where the user directory would go")
        key = ChatKey("blocked", "s", "a")
        with pytest.raises(StorageUnavailableError, match="blocked") as info:
            await store.save(key, ChatMessage("user", "x"))
        assert isinstance(info.value.__cause__, OSError)
        with pytest.raises(StorageUnavailableError, match="Not a directory"):
            await store.fetch(key)
        assert len(await store.save(KEY, ChatMessage("user", "fine"))) == 1


async def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    await store.save(KEY, ChatMessage("user", "x"))
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StorageUnavailableError, match="closed"):
        await store.fetch(KEY)
    with pytest.raises(StorageUnavailableError, match="closed"):
        await store.save(KEY, ChatMessage("user", "y"))
    assert json.loads(data_file(tmp_path).read_bytes().splitlines()[1])["m"]["content"] == "x"


async def test_files_written_are_private_even_under_a_loose_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        async with JsonlChatStorage(tmp_path / "store") as store:
            await store.save(KEY, ChatMessage("user", "x"))
            await store.compact(KEY)
    finally:
        os.umask(old)
    for path in (tmp_path / "store" / "u", tmp_path / "store" / "u" / "s"):
        assert path.stat().st_mode & 0o777 == 0o700
    for path in (data_file(tmp_path / "store"), tmp_path / "store" / "u" / "s" / ".lock"):
        assert path.stat().st_mode & 0o777 == 0o600


async def test_save_waits_for_a_lock_held_elsewhere_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    store = JsonlChatStorage(tmp_path)
    await store.save(KEY, ChatMessage("user", "first"))
    fd = os.open(tmp_path / "u" / "s" / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another process in the middle of a write
    saved = anyio.Event()

    async def saver() -> None:
        await store.save(KEY, ChatMessage("user", "second"))
        saved.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(saver)
            ticks = 0
            for _ in range(20):
                await anyio.sleep(0.005)
                ticks += 1
            assert ticks == 20  # the loop kept running while the save waited
            assert not saved.is_set()
            assert texts(await store.fetch(KEY)) == ["first"]  # reads take no lock
            os.close(fd)
            fd = -1
            with anyio.fail_after(30):
                await saved.wait()
    finally:
        if fd >= 0:
            os.close(fd)
    assert texts(await store.fetch(KEY)) == ["first", "second"]
    await store.aclose()
