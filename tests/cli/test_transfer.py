"""Export then import into another store type gives identical fetches (memory, sqlite, jsonl)."""

from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage.abilities import ListableStorage, find_ability
from storage.cli.conversation_file import read_conversations
from storage.cli.transfer import collect_stats, export_conversations, import_conversations
from storage.config import open_storage
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.message import ChatKey
from tests.cli.test_cli import UnlistedStore
from tests.paths import REPO

pytestmark = pytest.mark.anyio

DATA = REPO / "examples" / "data"
TAU = DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
SWE = DATA / "swe_agent_marshmallow_1867_fc.openai.jsonl"
STORES = ("memory", "sqlite", "jsonl")
T0 = datetime(2024, 5, 15, 15, 0, tzinfo=UTC)


def url_for(kind: str, root: Path) -> str:
    return {
        "memory": "memory://",
        "sqlite": f"sqlite:///{root}/chats.db",
        "jsonl": f"jsonl://{root}/jsonl",
    }[kind]


def tricky_file(path: Path) -> Path:
    """Keys with separators and unicode, content parts, null content, extra fields, metadata."""
    lines = [
        {
            "user_id": "u#1:/..",
            "session_id": "s*%/é🙂",
            "agent_id": "agent:a",
            "messages": [
                {"role": "system", "content": "be brief"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "data:x"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "1"},
                {"role": "assistant", "content": "done", "refusal": None},
            ],
            "chatlayers": {
                "ids": ["m1", "m2", "m3", "m4", "m5"],
                "created_at": [(T0 + timedelta(seconds=i)).isoformat() for i in range(4)]
                + [T0.isoformat()],
                "metadata": [None, {"tag": "x"}, None, None, {"n": [1, 2]}],
            },
        },
        {
            "user_id": "u#1:/..",
            "session_id": "s*%/é🙂",
            "agent_id": "other",
            "messages": [{"role": "user", "content": "same session, another agent"}],
            "chatlayers": {"ids": ["o1"], "created_at": [(T0 + timedelta(seconds=2)).isoformat()]},
        },
    ]
    path.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n")
    return path


async def keys_of(stack: Stack) -> list[ChatKey]:
    listable = find_ability(stack, ListableStorage)
    assert isinstance(listable, ListableStorage)
    return await listable.list_keys()


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(STORES, 2)))
async def test_export_import_gives_identical_fetches(
    source: str, target: str, tmp_path: Path
) -> None:
    conversations = read_conversations([TAU, SWE, tricky_file(tmp_path / "tricky.jsonl")])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        open_storage(url_for(source, tmp_path / "a")) as src,
        open_storage(url_for(target, tmp_path / "b")) as dst,
    ):
        stored, skipped = await import_conversations(src, conversations)
        assert (stored, skipped) == (1384 + 24 + 6, 0)
        buffer = io.StringIO()
        assert await export_conversations(src, buffer) == (53, 1414)
        exported = tmp_path / "export.jsonl"
        exported.write_text(buffer.getvalue())
        assert await import_conversations(dst, read_conversations([exported])) == (1414, 0)
        keys = await keys_of(src)
        assert keys == await keys_of(dst)
        assert len(keys) == 53
        for key in keys:
            assert await src.fetch(key) == await dst.fetch(key), key
            assert await src.fetch(key, limit=5) == await dst.fetch(key, limit=5)
            assert await src.fetch_all_chats(
                key.user_id, key.session_id
            ) == await dst.fetch_all_chats(key.user_id, key.session_id)
        again = io.StringIO()
        await export_conversations(dst, again)
        assert again.getvalue() == buffer.getvalue()
        assert await collect_stats(src) == await collect_stats(dst)


async def test_tricky_messages_survive_exactly(tmp_path: Path) -> None:
    source = tricky_file(tmp_path / "t.jsonl")
    conversations = read_conversations([source])
    async with open_storage(url_for("sqlite", tmp_path)) as stack:
        await import_conversations(stack, conversations)
        out = io.StringIO()
        await export_conversations(stack, out, user_id="u#1:/..")
    exported = [json.loads(line) for line in out.getvalue().splitlines()]
    original = [json.loads(line) for line in source.read_text().splitlines()]
    by_agent = {r["agent_id"]: r for r in exported}
    for line in original:
        record = by_agent[line["agent_id"]]
        assert record["messages"] == line["messages"]  # the OpenAI dicts, lossless
        assert record["chatlayers"]["ids"] == line["chatlayers"]["ids"]
        assert [datetime.fromisoformat(t) for t in record["chatlayers"]["created_at"]] == [
            datetime.fromisoformat(t) for t in line["chatlayers"]["created_at"]
        ]
    assert by_agent["agent:a"]["chatlayers"]["metadata"] == [
        None,
        {"tag": "x"},
        None,
        None,
        {"n": [1, 2]},
    ]


async def test_import_through_a_scrubbing_stack_scrubs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "s" * 32)
    path = tmp_path / "pii.jsonl"
    path.write_text(
        json.dumps({"id": "c", "messages": [{"role": "user", "content": "ada@example.org"}]}) + "\n"
    )
    async with open_storage(f"scrub::sqlite:///{tmp_path}/c.db") as stack:
        await import_conversations(stack, read_conversations([path]))
        out = io.StringIO()
        await export_conversations(stack, out)
    assert "ada@example.org" not in out.getvalue()
    assert "<EMAIL_ADDRESS_" in out.getvalue()


async def test_export_needs_a_listable_store() -> None:
    async with Stack(UnlistedStore("unlisted://")) as stack:
        with pytest.raises(ConfigError, match="does not implement list_keys"):
            await export_conversations(stack, io.StringIO())
