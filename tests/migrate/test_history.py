"""``migrate`` and ``verify`` carry a conversation's history: rewinds (the same view, the
same rewound messages listed by ``fetch_all_chats``), every checkpoint version and the view
provenance of every reply, so the migrated store answers ``fetch``, ``fetch_all_chats`` and
``provenance`` as the source does, with no summarizer call; memory, SQLite, JSONL and
PostgreSQL, idempotent, a half-written target repaired, a differing rewind named."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from storage import open_storage
from storage.abilities import TimeTravelStorage, find_ability, rewound_at
from storage.message import ChatKey, ChatMessage
from storage.migrate import migrate, read_snapshot, record_side, verify
from tests.migrate.test_migrate import url

pytestmark = pytest.mark.anyio

KEY = ChatKey("ada", "trip", "assistant")
PLAIN = ChatKey("ada", "trip", "planner")  # versions, no rewind
VIEW = "summarize?trigger_at=3&keep_last=1::{}"


def turn(key: ChatKey, n: int) -> tuple[ChatMessage, ChatMessage]:
    return (
        ChatMessage("user", f"question {n} about {key.agent_id}", id=f"{key.agent_id}-u{n}"),
        ChatMessage("assistant", f"answer {n}", id=f"{key.agent_id}-a{n}"),
    )


async def converse(stack: Any, key: ChatKey, turns: range) -> None:
    """As an orchestrator: the question, a fetch, the reply (linked to that view)."""
    for n in turns:
        question, answer = turn(key, n)
        await stack.save(key, question)
        await stack.fetch(key)
        await stack.save(key, answer)


async def history(stack: Any) -> None:
    """KEY: summarized several times, rewound (the checkpoint dropped), summarized again,
    rewound again keeping the checkpoint, one more turn; PLAIN: versions only."""
    travel = find_ability(stack, TimeTravelStorage)
    assert travel is not None
    await converse(stack, KEY, range(10))
    assert await travel.rewind(KEY, "assistant-a2") == 14
    await converse(stack, KEY, range(10, 20))
    assert await travel.rewind(KEY, "assistant-a17") == 4
    await converse(stack, KEY, range(20, 21))
    await converse(stack, PLAIN, range(9))


async def answers(stack: Any, key: ChatKey) -> dict[str, Any]:
    """What a user of the stack sees of ``key``: its view, every message with its rewound
    marker, and the view each reply answered."""
    travel = find_ability(stack, TimeTravelStorage)
    assert travel is not None
    timeline = await travel.fetch_timeline(key)
    provenance = {}
    for message in timeline.messages:
        if message.role == "assistant":
            found = await travel.provenance(key, message.id)
            provenance[message.id] = None if found is None else list(found.messages)
    rows = await stack.fetch_all_chats(key.user_id, key.session_id)
    return {
        "view": await stack.fetch(key),
        "all": [
            (row.message.id, rewound_at(row.message) is not None)
            for row in rows
            if row.agent_id == key.agent_id
        ],
        "provenance": provenance,
    }


def calls(stack: Any) -> int:
    from storage.config.stack import components

    return sum(int(getattr(c, "summarizer_calls", 0)) for c in components(stack))


async def check_copy(source_url: str, target_url: str) -> None:
    async with (
        open_storage(VIEW.format(source_url)) as source,
        open_storage(VIEW.format(target_url)) as target,
    ):
        await history(source)
        expected = {key: await answers(source, key) for key in (KEY, PLAIN)}
        src = await read_snapshot(record_side(source), KEY)
        assert len(src.rewinds) == 2
        assert len(src.versions) >= 4  # compactions before, between and after the rewinds
        assert {v.epoch for v in src.versions} >= {src.head.epoch if src.head else ""}
        report = await migrate(source, target, batch=3)
        assert report.keys_changed == 2
        done = await verify(source, target, views=True)
        assert done.equal, done.difference
        before = calls(target)
        for key in (KEY, PLAIN):
            got = await answers(target, key)
            assert got["view"] == expected[key]["view"]
            assert got["all"] == expected[key]["all"]
            assert got["provenance"] == expected[key]["provenance"]
        assert calls(target) == before == 0
        known = [p for p in expected[KEY]["provenance"].values() if p is not None]
        assert len(known) >= 15
        assert any(m.is_summary for p in known for m in p)
        dst = await read_snapshot(record_side(target), KEY)
        assert dst.version_marks() == src.version_marks()
        assert dst.rewind_marks() == src.rewind_marks()
        # Idempotent: a second run changes nothing.
        again = await migrate(source, target)
        assert again.keys_changed == 0


PAIRS = [("sqlite", "memory"), ("memory", "jsonl"), ("jsonl", "sqlite")]


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS, ids=lambda k: str(k))
async def test_rewinds_versions_and_provenance_are_copied(
    src_kind: str, dst_kind: str, tmp_path: Path
) -> None:
    await check_copy(url(src_kind, tmp_path, "src"), url(dst_kind, tmp_path, "dst"))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncpg is asyncio-only
async def test_sqlite_to_postgres_keeps_the_history(tmp_path: Path, postgres_dsn: str) -> None:
    await check_copy(
        f"sqlite:///{tmp_path}/src.db", f"{postgres_dsn}?schema=hist_{uuid.uuid4().hex[:8]}"
    )


async def test_a_half_written_or_different_target_is_written_again(tmp_path: Path) -> None:
    async with (
        open_storage(VIEW.format(f"sqlite:///{tmp_path}/src.db")) as source,
        open_storage(VIEW.format(f"sqlite:///{tmp_path}/dst.db")) as target,
    ):
        await history(source)
        travel = find_ability(target, TimeTravelStorage)
        assert travel is not None
        # A copy cut short after the first rewind, as a kill would leave it.
        await converse(target, KEY, range(10))
        await travel.rewind(KEY, "assistant-a2")
        found = await verify(source, target)
        assert found.difference is not None
        assert found.difference.key == KEY
        assert "rewind" in found.difference.what or "message" in found.difference.what
        report = await migrate(source, target)
        assert report.keys_changed == 2
        assert (await verify(source, target, views=True)).equal
        # A target rewound elsewhere than the source is named, and repaired.
        assert await travel.rewind(KEY, "assistant-u20") == 1
        found = await verify(source, target)
        assert found.difference is not None
        assert "rewind" in found.difference.what
        await migrate(source, target)
        assert (await verify(source, target, views=True)).equal
