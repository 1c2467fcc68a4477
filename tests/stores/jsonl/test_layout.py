"""JSONL store layout: one file per key, names no key can escape or collide with."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import MAX_NAME, JsonlChatStorage, decode_name, encode_name

pytestmark = pytest.mark.anyio

NAME_RE = re.compile(r"[a-z0-9_%~-]+")
RESERVED = {"con", "prn", "aux", "nul"} | {f"{d}{i}" for d in ("com", "lpt") for i in range(10)}

HOSTILE = [
    "a",
    "A",
    "..",
    ".",
    "../..",
    "/",
    "a/b",
    "a\\b",
    "\\",
    "%",
    "%2F",
    "%252f",
    "%2f",
    "~",
    "CON",
    "con",
    "Con",
    "nul",
    "NUL.txt",
    "com1",
    "LPT9",
    "aux",
    " ",
    "  ",
    "\t",
    "\n",
    "-",
    "_",
    ".hidden",
    "a.",
    "a ",
    "😀",
    "👩‍👩‍👧",
    "שלום",
    "e\u0301",
    "\u00e9",
    "ǅ",
    "ß",
    "SS",
    "İ",
    "i̇",
    "K",
    "\u212a",
    "x" * 300,
    "X" * 300,
    "é" * 200,
    "*",
    "?",
    ":",
    "a:b",
    "|",
    "<>",
    '"',
    "\u2028",
    "\ufeff",
    "a\x01b",
]

part_strategy = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(
        # Lone surrogates are refused by ChatKey itself.
        st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=40,
    ),
    st.text(st.sampled_from("aA.%/\\~é😀 -_"), min_size=1, max_size=12),
    st.text(st.sampled_from("xyzé"), min_size=150, max_size=320),
)


def variants(part: str) -> list[str]:
    """The part and its case variants: a case-insensitive file system must keep them apart."""
    return list(dict.fromkeys([part, part.upper(), part.lower(), part.swapcase()]))


# --- names -----------------------------------------------------------------------------------


@given(part_strategy)
@settings(max_examples=400)
def test_encoded_names_are_safe_and_reversible(part: str) -> None:
    name = encode_name(part)
    assert NAME_RE.fullmatch(name), name
    assert name == name.lower()  # nothing can differ only by case
    assert len(name.encode()) <= MAX_NAME
    assert name not in RESERVED
    assert not name.startswith(".")
    if "~" in name:
        assert name.endswith(hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest())
        assert decode_name(name) is None
    else:
        assert decode_name(name) == part


@given(part_strategy, part_strategy)
@settings(max_examples=400)
def test_distinct_parts_never_share_a_name_even_ignoring_case(a: str, b: str) -> None:
    for x in variants(a):
        for y in variants(b):
            if x != y:
                assert encode_name(x).casefold() != encode_name(y).casefold(), (x, y)


@pytest.mark.parametrize(
    ("part", "name"),
    [
        ("abc-1_2", "abc-1_2"),
        ("A", "%41"),
        ("..", "%2e%2e"),
        ("a/b", "a%2fb"),
        ("%2F", "%252%46"),
        ("CON", "%43%4f%4e"),
        ("con", "%63on"),
        ("com1", "%63om1"),
        ("😀", "%f0%9f%98%80"),
    ],
)
def test_known_names(part: str, name: str) -> None:
    assert encode_name(part) == name
    assert decode_name(name) == part


def test_names_we_do_not_make_are_not_decoded() -> None:
    assert decode_name("%63%6f%6e") is None  # "con" is written "%63on"
    assert decode_name("%41%") is None
    assert decode_name("ABC") is None
    assert decode_name("%ff") is None
    assert decode_name("abc~" + "0" * 64) is None


# --- the store under hostile keys -------------------------------------------------------------


def files_under(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, files in os.walk(root) for f in files]


def assert_contained(root: Path) -> None:
    real_root = os.path.realpath(root)
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            assert os.path.realpath(path).startswith(real_root + os.sep), path
            assert not path.is_symlink()
            assert len(name.encode()) <= 255, name
            stem = name.removeprefix(".").split(".")[0]
            assert stem == "" or NAME_RE.fullmatch(stem), name


@contextmanager
def fresh_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp) / "store"


key_strategy = st.lists(
    st.tuples(part_strategy, part_strategy, part_strategy), min_size=1, max_size=6
)


@given(keys=key_strategy)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_fuzzed_keys_stay_under_root_and_apart(
    anyio_backend: str, keys: list[tuple[str, str, str]]
) -> None:
    expanded = list(
        dict.fromkeys(
            ChatKey(u, s, a)
            for user, session, agent in keys
            for u in variants(user)
            for s in variants(session)[:2]
            for a in variants(agent)[:2]
        )
    )
    with fresh_dir() as root:
        async with JsonlChatStorage(root) as store:
            for n, key in enumerate(expanded):
                assert len(await store.save(key, ChatMessage("user", f"m{n}"))) == 1
            assert_contained(root)
            data_files = [p for p in files_under(root) if p.suffix == ".jsonl"]
            assert len(data_files) == len(expanded)
            assert len({str(p).casefold() for p in data_files}) == len(expanded)
            for n, key in enumerate(expanded):
                assert [m.text for m in await store.fetch(key)] == [f"m{n}"], key
                assert [m.text for m in await store.fetch(key, limit=1)] == [f"m{n}"], key
            for user, session in {(k.user_id, k.session_id) for k in expanded}:
                expected = sorted(
                    (k.agent_id, f"m{n}")
                    for n, k in enumerate(expanded)
                    if (k.user_id, k.session_id) == (user, session)
                )
                merged = await store.fetch_all_chats(user, session)
                assert sorted((m.agent_id, m.message.text) for m in merged) == expected
            listed = await store.list_keys()
            assert sorted(listed, key=repr) == sorted(expanded, key=repr)
            victim = expanded[0].user_id
            await store.delete_user(victim)
            for n, key in enumerate(expanded):
                texts = [m.text for m in await store.fetch(key)]
                assert texts == ([] if key.user_id == victim else [f"m{n}"]), key
            assert_contained(root)


async def test_long_ids_are_hashed_and_recovered(tmp_path: Path) -> None:
    long_agent = "agent/" + "ä" * 300
    key = ChatKey("u" * 400, "S" * 256, long_agent)
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(key, ChatMessage("user", "hi"))
        names = [p.name for p in files_under(tmp_path)]
        assert all(len(n.encode()) <= 255 for n in names)
        assert any(n.endswith(".key") for n in names)  # the full key is kept beside the file
        (merged,) = await store.fetch_all_chats(key.user_id, key.session_id)
        assert merged.agent_id == long_agent
        assert await store.list_keys() == [key]
        assert await store.list_keys(user_id=key.user_id, session_id=key.session_id) == [key]
        await store.delete(key)
        assert files_under(tmp_path) == []


async def test_permissions_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        root = tmp_path / "store"
        async with JsonlChatStorage(root, fsync="always") as store:
            await store.save(ChatKey("alice", "s1", "a" * 300), ChatMessage("user", "secret"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            assert stat.S_IMODE((Path(directory) / name).stat().st_mode) == 0o700, name
        for name in files:
            assert stat.S_IMODE((Path(directory) / name).stat().st_mode) == 0o600, name
    assert len(files_under(root)) == 3  # .lock, the data file, the key sidecar


async def test_layout_is_one_file_per_key(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(ChatKey("Alice", "s-1", "billing"), ChatMessage("user", "a"))
        await store.save(ChatKey("Alice", "s-1", "tech"), ChatMessage("user", "b"))
        await store.save(ChatKey("bob", "s.2", "billing"), ChatMessage("user", "c"))
    assert sorted(str(p.relative_to(tmp_path)) for p in files_under(tmp_path)) == [
        "%41lice/s-1/.lock",
        "%41lice/s-1/billing.jsonl",
        "%41lice/s-1/tech.jsonl",
        "bob/s%2e2/.lock",
        "bob/s%2e2/billing.jsonl",
    ]


async def test_list_keys_filters(tmp_path: Path) -> None:
    keys = [ChatKey("u1", "s1", "a"), ChatKey("u1", "s2", "b"), ChatKey("u2", "s1", "c")]
    async with JsonlChatStorage(tmp_path) as store:
        for key in reversed(keys):
            await store.save(key, ChatMessage("user", "x"))
        assert await store.list_keys() == keys
        assert await store.list_keys(user_id="u1") == keys[:2]
        assert await store.list_keys(session_id="s1") == [keys[0], keys[2]]
        assert await store.list_keys(user_id="u2", session_id="s2") == []
