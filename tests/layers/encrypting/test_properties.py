"""Properties of the encrypting layer (hypothesis): it is invisible to every read (the same
windows and merged views as the bare store, the exact messages back, from a cold instance
too), and a stored row opens only under its own conversation key and message id."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from storage.layers.encrypting import EncryptingChatStorage, new_master_key
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage

MASTER = new_master_key()
TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)
PART = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=6
)
KEYS = st.builds(ChatKey, PART, PART, PART)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def turns(draw: Any) -> list[ChatMessage]:
    """A valid history: user turns, some with a tool call and its result."""
    out: list[ChatMessage] = []
    for n in range(draw(st.integers(1, 4))):
        out.append(
            ChatMessage(
                "user",
                draw(TEXT),
                name=draw(st.none() | TEXT),
                metadata=draw(st.dictionaries(TEXT, JSON, max_size=2)),
            )
        )
        if draw(st.booleans()):
            call = ToolCall(f"call_{n}", draw(PART), draw(TEXT))
            out.append(ChatMessage("assistant", draw(st.none() | TEXT), (call,)))
            out.append(ChatMessage("tool", draw(TEXT), tool_call_id=call.id))
        out.append(
            ChatMessage(
                "assistant",
                draw(TEXT),
                extra=draw(
                    st.dictionaries(st.sampled_from(["refusal", "audio"]), JSON, max_size=1)
                ),
            )
        )
    return out


def run(fn: Any, *args: Any) -> Any:
    return anyio.run(fn, *args)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=KEYS, history=turns(), limit=st.none() | st.integers(0, 12))
def test_the_layer_is_invisible_to_every_read(
    key: ChatKey, history: list[ChatMessage], limit: int | None
) -> None:
    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            plain = InMemoryChatStorage()
            base = InMemoryChatStorage()
            layer = EncryptingChatStorage(
                base, keys=MASTER, keyring=Path(tmp) / "k.db", create_keyring=True
            )
            stored = await layer.save_messages(key, history)
            await plain.save_messages(key, stored)
            assert stored == [
                attrs.evolve(m, created_at=s.created_at)
                for m, s in zip(history, stored, strict=True)
            ]
            assert await layer.fetch(key, limit=limit) == await plain.fetch(key, limit=limit)
            cold = EncryptingChatStorage(
                base, keys=MASTER, keyring=Path(tmp) / "k.db", create_keyring=True
            )
            assert await cold.fetch(key, limit=limit) == await plain.fetch(key, limit=limit)
            assert await cold.fetch_all_chats(key.user_id, key.session_id) == (
                await plain.fetch_all_chats(key.user_id, key.session_id)
            )
            await cold.aclose()

    run(check)


@settings(max_examples=40, deadline=None)
@given(key=KEYS, other=KEYS, text=TEXT)
def test_a_row_opens_only_under_its_own_key(key: ChatKey, other: ChatKey, text: str) -> None:
    if other == key:
        return

    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            base = InMemoryChatStorage()
            layer = EncryptingChatStorage(
                base, keys=MASTER, keyring=Path(tmp) / "k.db", create_keyring=True
            )
            await layer.save(key, ChatMessage("user", text))
            await layer.save(other, ChatMessage("user", "the other's own"))
            (row,) = await base.fetch(key)
            await base.save(other, row)
            with pytest.raises(CorruptRecordError):
                await layer.fetch(other)
            await layer.aclose()

    run(check)
