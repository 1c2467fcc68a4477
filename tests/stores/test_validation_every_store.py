"""One rule for keys and text on every store, and bounded nesting.

A lone surrogate (``"\\ud800"``) anywhere - a key part, ``name``, ``tool_call_id``, content,
a part's text or key, a tool call, metadata, an extra field - is refused with
``InvalidKeyError`` / ``InvalidMessageError`` naming the field, before anything is written.
Content parts, metadata and extra fields nest at most ``MAX_DEPTH`` (64) levels; deeper input
is refused at validation, and no input raises ``RecursionError``: not on construction, not on
save, not on a later fetch from a deep call stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from storage.errors import InvalidKeyError, InvalidMessageError
from storage.message import MAX_DEPTH, ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.testing.stack_depth import at_headroom
from tests.conformance.stacks import BASES, _make, _scrubbed

T = TypeVar("T")
BAD = "ok\ud800ok"
KEY = ChatKey("u", "s", "a")
STORES = {name: factory for name, (factory, _) in BASES.items()} | {
    "scrub::memory": _scrubbed(BASES["memory"][0]),
    "scrub::sqlite": _scrubbed(BASES["sqlite"][0]),
}
CASES = [
    pytest.param((name, backend), id=f"{name}-{backend}")
    for name, (_, backends) in {**BASES, "scrub::memory": BASES["memory"]}.items()
    for backend in backends
] + [pytest.param(("scrub::sqlite", "asyncio"), id="scrub::sqlite-asyncio")]


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def anyio_backend(case: tuple[str, str]) -> str:
    return case[1]


@pytest.fixture
async def store(
    case: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[ChatStorage]:
    made = await _make(STORES[case[0]], tmp_path, request)
    try:
        yield made
    finally:
        await made.aclose()


def nested(depth: int, leaf: Any = "x") -> Any:
    """``depth`` levels of containers, alternating dict and list (built without recursion)."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def part(depth: int) -> dict[str, Any]:
    """A content part that is itself level 1, nesting ``depth`` levels in all."""
    return {"type": "text", "text": "hi", "x": nested(depth - 1)}


# --- lone surrogates -------------------------------------------------------------------------

KEY_PARTS = ["user_id", "session_id", "agent_id"]


@pytest.mark.parametrize("field", KEY_PARTS)
def test_lone_surrogate_in_key_part_is_refused_naming_it(field: str) -> None:
    parts = {"user_id": "u", "session_id": "s", "agent_id": "a", field: BAD}
    with pytest.raises(InvalidKeyError, match=f"{field} holds a lone surrogate"):
        ChatKey(**parts)


@pytest.mark.anyio
async def test_lone_surrogate_in_user_or_session_argument_is_refused(store: ChatStorage) -> None:
    with pytest.raises(InvalidKeyError, match="user_id holds a lone surrogate"):
        await store.fetch_all_chats(BAD, "s")
    with pytest.raises(InvalidKeyError, match="session_id holds a lone surrogate"):
        await store.fetch_all_chats("u", BAD)
    with pytest.raises(InvalidKeyError, match="user_id holds a lone surrogate"):
        await store.delete_user(BAD)


def _call(**fields: str) -> ToolCall:
    values = {"id": "c1", "name": "f", "arguments": "{}"} | fields
    return ToolCall(values["id"], values["name"], values["arguments"])


# (what the error names, message with a lone surrogate there)
BAD_MESSAGES: list[tuple[str, Callable[[], ChatMessage]]] = [
    ("content", lambda: ChatMessage("user", BAD)),
    ("name", lambda: ChatMessage("user", "hi", name=BAD)),
    ("tool_call_id", lambda: ChatMessage("tool", "r", tool_call_id=BAD)),
    ("tool_call_id", lambda: ChatMessage("assistant", "r", tool_call_id=BAD)),
    (r"content\[0\]\['text'\]", lambda: ChatMessage("user", [{"type": "text", "text": BAD}])),
    (r"a key of content\[1\]", lambda: ChatMessage("user", [{"text": "a"}, {BAD: "v"}])),
    (
        r"content\[0\]\['image_url'\]\['url'\]",
        lambda: ChatMessage("user", [{"type": "image_url", "image_url": {"url": BAD}}]),
    ),
    (r"tool_calls\[0\]\.id", lambda: ChatMessage("assistant", None, [_call(id=BAD)])),
    (r"tool_calls\[0\]\.name", lambda: ChatMessage("assistant", None, [_call(name=BAD)])),
    (
        r"tool_calls\[0\]\.arguments",
        lambda: ChatMessage("assistant", None, [_call(arguments=f'{{"a": "{BAD}"}}')]),
    ),
    (r"metadata\['k'\]\[1\]", lambda: ChatMessage("user", "x", metadata={"k": ["a", BAD]})),
    (r"a key of metadata", lambda: ChatMessage("user", "x", metadata={BAD: 1})),
    (
        r"extra\['audio'\]\['transcript'\]",
        lambda: ChatMessage.from_openai(
            {"role": "assistant", "content": None, "audio": {"id": "a1", "transcript": BAD}}
        ),
    ),
    (
        r"extra\['refusal'\]",
        lambda: ChatMessage.from_openai({"role": "assistant", "content": None, "refusal": BAD}),
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("field", "make"), BAD_MESSAGES, ids=[f"{i}-{f}" for i, (f, _) in enumerate(BAD_MESSAGES)]
)
async def test_lone_surrogate_anywhere_in_a_message_is_refused_naming_the_field(
    store: ChatStorage, field: str, make: Callable[[], ChatMessage]
) -> None:
    good = ChatMessage("user", "stored first?")
    with pytest.raises(InvalidMessageError, match=rf"message 1: {field}.* lone surrogate"):
        await store.save_messages(KEY, [good, make()])
    assert await store.fetch(KEY) == []  # the whole batch was refused
    assert [m.content for m in await store.save(KEY, good)] == ["stored first?"]


# --- nesting -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_nesting_up_to_the_limit_round_trips(store: ChatStorage) -> None:
    deep_part = part(MAX_DEPTH)
    message = ChatMessage(
        "user",
        [deep_part],
        metadata={"deep": nested(MAX_DEPTH - 1)},
    )
    await store.save(KEY, message)
    (back,) = await store.fetch(KEY)
    assert back.to_openai()["content"] == [deep_part]
    assert (
        back.metadata["deep"] == ChatMessage("user", metadata={"deep": nested(63)}).metadata["deep"]
    )


@pytest.mark.anyio
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 50_000])
@pytest.mark.parametrize("where", ["content", "metadata", "extra"])
async def test_nesting_past_the_limit_is_refused_never_recursion_error(
    store: ChatStorage, depth: int, where: str
) -> None:
    if where == "content":
        message = ChatMessage("user", [part(depth)])
        named = r"content\[0\]"
    elif where == "metadata":
        message = ChatMessage("user", "x", metadata={"m": nested(depth - 1)})
        named = "metadata"
    else:
        message = ChatMessage.from_openai({"role": "user", "content": "x", "y": nested(depth - 1)})
        named = "extra"
    with pytest.raises(InvalidMessageError, match=rf"message 0: {named}.* deeper than 64 levels"):
        await store.save(KEY, message)
    assert await store.fetch(KEY) == []


def test_deep_input_builds_and_converts_without_recursion_error() -> None:
    deep = nested(200_000)
    message = ChatMessage("user", [{"type": "text", "x": deep}], metadata={"m": deep})
    wire = message.to_openai()  # thaw: no RecursionError either
    depth = 0
    node: Any = wire["content"][0]["x"]
    while isinstance(node, list | dict):
        node = node[0] if isinstance(node, list) else node["k"]
        depth += 1
    assert depth == 200_000
    assert node == "x"
    again = ChatMessage.from_openai(wire)
    assert again.to_openai()["content"][0]["x"] is not deep  # new objects every call


@pytest.mark.anyio
async def test_fetch_of_deepest_allowed_message_from_a_deep_call_stack(
    store: ChatStorage,
) -> None:
    message = ChatMessage("user", [part(MAX_DEPTH)], metadata={"m": nested(MAX_DEPTH - 1)})
    await store.save(KEY, message)
    # Decoding the deepest allowed record needs a bounded number of frames: JSON's own
    # MAX_DEPTH + a few levels; freeze/thaw add a constant, whatever the depth.
    fetched = await at_headroom(250, lambda: store.fetch(KEY))
    assert fetched[0].to_openai()["content"] == message.to_openai()["content"]
    merged = await at_headroom(250, lambda: store.fetch_all_chats("u", "s"))
    assert merged[0].message.id == message.id
    assert (await at_headroom(250, lambda: store.fetch(KEY, limit=1)))[0].id == message.id


@pytest.mark.anyio
async def test_deeply_nested_tool_arguments_are_stored_as_text(store: ChatStorage) -> None:
    arguments = "[" * 100_000 + "]" * 100_000  # valid JSON that json.loads cannot parse
    message = ChatMessage("assistant", None, [_call(arguments=arguments)])
    (stored,) = await store.save(KEY, message)
    assert stored.tool_calls[0].arguments == arguments
    (back,) = await store.fetch(KEY)
    assert back.tool_calls[0].arguments == arguments
