"""The quality measure (storage/eval/measure.py, baselines.py): what it counts, and that a
summary that forgets scores lower than one that keeps the facts."""

from __future__ import annotations

from collections.abc import Set
from pathlib import Path

import pytest

from storage import InMemoryChatStorage, SummarizingChatStorage
from storage.cli.conversation_file import Conversation
from storage.errors import ConfigError
from storage.eval.baselines import keep_last_messages, message_chars, truncate_to_chars
from storage.eval.measure import evaluate, evaluate_urls, fresh_spec
from storage.message import ChatKey, ChatMessage, ToolCall

PROMPT = ChatMessage("system", "You are a support agent.")


def conversation() -> Conversation:
    """The customer gives two ids early; the assistant needs them three turns later."""
    call = ToolCall("c1", "get_order", '{"order_id": "ORD-55555"}')
    messages = [
        PROMPT,
        ChatMessage("user", "I am cus_123456, my order is ORD-55555."),
        ChatMessage("assistant", "Thanks, noted."),
        ChatMessage("user", "Is it shipped?"),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", '{"status": "shipped"}', tool_call_id="c1"),
        ChatMessage("assistant", "Yes, it shipped."),
        ChatMessage("user", "Remind me of my ids?"),
        ChatMessage("assistant", "You are cus_123456 and your order is ORD-55555."),
    ]
    return Conversation(ChatKey("u", "s", "a"), messages, "test.jsonl:1")


def summary_saying(text: str):  # type: ignore[no-untyped-def]
    async def summarize(buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        users = [i for i, m in enumerate(buffer) if m.role == "user"]
        keep = buffer[users[-keep_last] :] if keep_last and len(users) >= keep_last else []
        summary = ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})
        return [summary, *keep]

    return summarize


async def measure(summary: str) -> tuple[int, int, int, int]:
    stack = SummarizingChatStorage(
        InMemoryChatStorage(), summary_saying(summary), trigger_at=1, keep_last=1
    )
    report = await evaluate(stack, [conversation()])
    f = report.sets["test"]
    return f.points, f.facts, f.kept_view, f.kept_truncation


@pytest.mark.anyio
async def test_a_summary_that_keeps_the_ids_retains_them_one_that_forgets_does_not() -> None:
    points, facts, kept, _ = await measure("The user is cus_123456; order ORD-55555.")
    # The tool call needs ORD-55555 (and its digits 55555); the last answer needs those and
    # cus_123456 (and 123456): six facts said before, at three compacted points (the third,
    # "Yes, it shipped.", needs none).
    assert (points, facts) == (3, 6)
    assert kept == facts
    points_forgot, facts_forgot, kept_forgot, _ = await measure("Some talk about an order.")
    assert (points_forgot, facts_forgot) == (points, facts)  # same points, same needs
    assert kept_forgot == 0


@pytest.mark.anyio
async def test_a_stack_that_never_compacts_has_no_point() -> None:
    report = await evaluate(InMemoryChatStorage(), [conversation()])
    figures = report.sets["test"]
    assert (figures.conversations, figures.summarized, figures.points, figures.facts) == (
        1,
        0,
        0,
        0,
    )
    assert figures.retention is None
    assert figures.view_tokens is not None  # None only when tokens cannot be counted
    assert figures.raw_tokens == figures.view_tokens > 0


@pytest.mark.anyio
async def test_the_extractor_is_pluggable() -> None:
    def only_orders(text: str) -> Set[str]:
        return {w.strip(".,") for w in text.split() if w.startswith("ORD-")}

    stack = SummarizingChatStorage(
        InMemoryChatStorage(), summary_saying("order ORD-55555"), trigger_at=1, keep_last=1
    )
    report = await evaluate(stack, [conversation()], extractor=only_orders)
    figures = report.sets["test"]
    assert (figures.facts, figures.kept_view) == (1, 1)


def test_truncation_keeps_the_prompt_and_the_newest_whole_messages_that_fit() -> None:
    record = conversation().messages
    budget = message_chars(PROMPT) + message_chars(record[-1]) + message_chars(record[-2]) + 5
    assert truncate_to_chars(record, budget) == [PROMPT, record[-2], record[-1]]
    # A window that would start with a tool result drops it: its call was cut off.
    cut = message_chars(PROMPT) + sum(message_chars(m) for m in record[5:])
    assert truncate_to_chars(record, cut) == [PROMPT, *record[6:]]
    assert truncate_to_chars(record, 0) == [PROMPT]


def test_keep_last_n_counts_the_prompt() -> None:
    record = conversation().messages
    assert keep_last_messages(record, 3) == [PROMPT, *record[-2:]]
    assert keep_last_messages(record, 5) == [PROMPT, *record[6:]]  # not from the tool result
    assert keep_last_messages(record, 0) == [PROMPT]


def test_fresh_spec_moves_file_stores_and_refuses_servers(tmp_path: Path) -> None:
    spec = fresh_spec("summarize?trigger_at=6::sqlite:///chats.db?synchronous=full", tmp_path)
    assert spec.store.url == f"sqlite:///{tmp_path}/eval.db?synchronous=full"
    spec = fresh_spec("jsonl://chats", tmp_path)
    assert spec.store.url == f"jsonl://{tmp_path}/eval"
    assert fresh_spec("memory://", tmp_path).store.url == "memory://"
    with pytest.raises(ConfigError, match=r"fresh stores.*'redis'"):
        fresh_spec("summarize::redis://:secret@localhost:6379/0", tmp_path)
    with pytest.raises(ConfigError, match="'encrypt'"):
        fresh_spec("summarize::encrypt?key_env=K::memory://", tmp_path)
    # A URL the store refuses is refused though it would be replaced by one that works.
    with pytest.raises(ConfigError, match=r"^URL summarize::sqlite://x\.db: .*sqlite:///x\.db"):
        fresh_spec("summarize::sqlite://x.db", tmp_path)


@pytest.mark.anyio
async def test_every_url_is_checked_before_any_is_replayed(tmp_path: Path) -> None:
    replayed: list[None] = []
    urls = ["summarize?trigger_at=1::memory://", "summarize::sqlite://x.db"]
    with pytest.raises(ConfigError, match="names a host, not a file"):
        await evaluate_urls(urls, [conversation()], on_message=lambda: replayed.append(None))
    assert replayed == []


def _raises(text: str) -> Set[str]:
    raise KeyError(text[:3])


def _text(text: str) -> Set[str]:
    return text  # type: ignore[return-value]  # the mistake under test: a str is not a set


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("extractor", "message"),
    [
        (_raises, r"fact extractor _raises raised KeyError: .* characters\)"),
        (_text, r"fact extractor _text must return a set \(or list, tuple\) of str, got str$"),
        (lambda text: {1, 2}, r"a set \(or list, tuple\) of str, got set of other items"),
    ],
)
async def test_a_broken_fact_extractor_is_named(extractor: object, message: str) -> None:
    stack = SummarizingChatStorage(InMemoryChatStorage(), trigger_at=1, keep_last=1)
    with pytest.raises(ConfigError, match=message):
        await evaluate(stack, [conversation()], extractor=extractor)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_urls_are_measured_over_fresh_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    urls = ["summarize?trigger_at=1::sqlite:///chats.db", "summarize?trigger_at=1::memory://"]
    first, second = await evaluate_urls(urls, [conversation()])
    assert not (tmp_path / "chats.db").exists()  # nothing written where the URL points
    assert first.stack == urls[0]
    assert first.sets["test"].points == second.sets["test"].points > 0
    # A second run starts from empty stores again: the same figures.
    (again,) = await evaluate_urls(urls[:1], [conversation()])
    assert again.sets["test"] == first.sets["test"]
