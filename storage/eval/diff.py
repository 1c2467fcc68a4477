"""Compare two stacks on the same conversations: the canary before switching a deployment.

Each conversation is replayed through both stacks, each over a fresh store, by the quality
measure itself (:func:`storage.eval.measure.evaluate`, one conversation at a time), so the
figures are the measure's: tokens of the final view, summarizer calls, fact retention. Beside
them: the PII the stack's scrubbing layers found (by entity), and every view the replay
fetched (before each assistant message, and the final one), compared as the model gets them
(:meth:`ChatMessage.to_openai`: role, content, tool calls; not ids, timestamps or metadata).
The first fetch whose views differ, and the first message where they differ, is the
conversation's :class:`Difference`.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from storage.cli.conversation_file import Conversation
from storage.cli.replay import pii_counts
from storage.cli.words import plural
from storage.config import open_storage
from storage.eval.facts import FactExtractor, extract_facts
from storage.eval.measure import Figures, check_fresh, evaluate, fresh_spec
from storage.message import ChatMessage
from storage.redact import redact_url

__all__ = [
    "ConversationDiff",
    "Difference",
    "DiffReport",
    "StackRun",
    "diff_urls",
    "first_difference",
]

_EXCERPT = 60


@attrs.frozen
class Difference:
    """Where two stacks' views of one conversation first differ.

    Attributes:
        before: the position in the conversation of the assistant message the view was
            fetched before (``final`` is true for the view after the last message).
        final: the difference is in the final view only (every earlier view was equal).
        index: the first message index where the views differ.
        fields: what differs there: ``role``, ``content``, ``tool_calls``, ``tool_call_id``,
            ``name``, other OpenAI fields, or ``length`` (one view ends there).
        a: the first stack's message at ``index``, in a few words (``"end of view"``).
        b: the second stack's, likewise.
    """

    before: int
    final: bool
    index: int
    fields: tuple[str, ...]
    a: str
    b: str

    def text(self) -> str:
        """One line: ``"final view, message 1: content (A system summary, B user)"``."""
        where = "final view" if self.final else f"view before message {self.before}"
        return f"{where}, message {self.index}: {', '.join(self.fields)} (A {self.a}; B {self.b})"

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"fields": list(self.fields)}


@attrs.define
class StackRun:
    """What one stack did with one conversation.

    Attributes:
        figures: the quality measure's figures of this conversation alone.
        pii: PII the stack's scrubbing layers found in it, by entity.
        views: every view fetched, by the position of the message it came before (the
            number of messages for the final view).
    """

    figures: Figures
    pii: Counter[str] = attrs.field(factory=Counter)
    views: dict[int, list[ChatMessage]] = attrs.field(factory=dict)

    @property
    def final_view(self) -> list[ChatMessage]:
        """The view after the last message."""
        return self.views[max(self.views)] if self.views else []

    def as_dict(self) -> dict[str, Any]:
        """Tokens and messages of the final view, summarizer calls, PII by entity and the
        measure's retention figures, as plain JSON values."""
        f = self.figures
        return {
            "view_messages": len(self.final_view),
            "raw_tokens": f.raw_tokens,
            "view_tokens": f.view_tokens,
            "summarized": bool(f.summarized),
            "summarizer_calls": f.summarizer_calls,
            "pii": dict(sorted(self.pii.items())),
            "points": f.points,
            "facts": f.facts,
            "kept_view": f.kept_view,
            "retention": f.retention,
        }


@attrs.define
class ConversationDiff:
    """One conversation through both stacks.

    Attributes:
        conversation: its session id.
        where: ``FILE:LINE`` it came from.
        runs: the two stacks' runs, in the order the stacks were given.
        difference: where the views first differ (``None``: every view equal).
    """

    conversation: str
    where: str
    runs: tuple[StackRun, StackRun]
    difference: Difference | None

    @property
    def equal(self) -> bool:
        return self.difference is None


@attrs.define
class DiffReport:
    """Two stacks compared on a set of conversations.

    Attributes:
        stacks: the two stacks as given (passwords redacted).
        conversations: per conversation, in file order.
    """

    stacks: tuple[str, str]
    conversations: list[ConversationDiff] = attrs.field(factory=list)

    @property
    def equal(self) -> bool:
        """Every view of every conversation was equal."""
        return all(c.equal for c in self.conversations)

    def totals(self, which: int) -> tuple[Figures, Counter[str]]:
        """The measure's figures and the PII of stack ``which`` (0 or 1), every conversation
        added up."""
        figures, pii = Figures(), Counter[str]()
        for conversation in self.conversations:
            figures.add(conversation.runs[which].figures)
            pii.update(conversation.runs[which].pii)
        return figures, pii


def first_difference(
    a: dict[int, list[ChatMessage]], b: dict[int, list[ChatMessage]]
) -> Difference | None:
    """The first view (by position) and message where ``a`` and ``b`` differ, as the model
    gets them; ``None`` when every view is equal. A view only one side fetched differs at
    message 0."""
    positions = sorted(set(a) | set(b))
    last = positions[-1] if positions else 0
    for before in positions:
        view_a, view_b = a.get(before), b.get(before)
        if view_a is None or view_b is None:
            return Difference(
                before,
                before == last,
                0,
                ("fetched",),
                "fetched" if view_a is not None else "no fetch",
                "fetched" if view_b is not None else "no fetch",
            )
        for index in range(max(len(view_a), len(view_b))):
            one = view_a[index] if index < len(view_a) else None
            two = view_b[index] if index < len(view_b) else None
            fields = _fields(one, two)
            if fields:
                at = _divergence(_text(one), _text(two))
                return Difference(
                    before,
                    before == last,
                    index,
                    fields,
                    _brief(one, view_a, at),
                    _brief(two, view_b, at),
                )
    return None


def _text(message: ChatMessage | None) -> str:
    content = None if message is None else message.content
    return " ".join(content.split()) if isinstance(content, str) else ""


def _divergence(a: str, b: str) -> int:
    """Where the excerpts start: a little before the first character ``a`` and ``b`` differ
    in (a summary merged after the same system prompt differs only far into the text)."""
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    if same == min(len(a), len(b)) and len(a) == len(b):
        return 0
    return max(0, same - 10)


def _fields(one: ChatMessage | None, two: ChatMessage | None) -> tuple[str, ...]:
    if one is None or two is None:
        return () if one is two else ("length",)
    wire_a, wire_b = one.to_openai(), two.to_openai()
    if wire_a == wire_b:
        return ()
    names = [n for n in ("role", "content", "tool_calls", "tool_call_id", "name")]
    names += sorted((set(wire_a) | set(wire_b)) - set(names))
    return tuple(n for n in names if wire_a.get(n) != wire_b.get(n))


def _brief(message: ChatMessage | None, view: Sequence[ChatMessage], at: int) -> str:
    """The message in a few words: role, summary or not, tool calls, and an excerpt of its
    text from ``at`` (marked ``…`` where cut)."""
    if message is None:
        return f"view ends ({plural(len(view), 'message')})"
    what = message.role + (" summary" if message.is_summary else "")
    if message.tool_calls:
        what += f" with {len(message.tool_calls)} tool call(s)"
    flat = _text(message)
    if flat:
        excerpt = flat[at : at + _EXCERPT]
        excerpt = ("…" if at else "") + excerpt + ("…" if at + _EXCERPT < len(flat) else "")
        what += f" {excerpt!r}"
    return what


async def _run_stack(
    source: str | Path,
    conversations: Sequence[Conversation],
    extractor: FactExtractor,
    model: str,
    on_message: Callable[[], None] | None,
) -> list[StackRun]:
    runs: list[StackRun] = []
    with tempfile.TemporaryDirectory(prefix="chatlayers-diff-") as directory:
        async with open_storage(fresh_spec(source, Path(directory), command="diff")) as stack:
            for conversation in conversations:
                views: dict[int, list[ChatMessage]] = {}

                def seen(_: Conversation, index: int, view: list[ChatMessage]) -> None:
                    views[index] = view  # noqa: B023 - called during this iteration only

                before = pii_counts(stack)
                report = await evaluate(
                    stack,
                    [conversation],
                    extractor=extractor,
                    model=model,
                    on_message=on_message,
                    on_view=seen,
                )
                (figures,) = report.sets.values()
                runs.append(StackRun(figures, pii_counts(stack) - before, views))
    return runs


async def diff_urls(
    sources: tuple[str | Path, str | Path],
    conversations: Sequence[Conversation],
    *,
    extractor: FactExtractor = extract_facts,
    model: str = "gpt-4o",
    on_message: Callable[[], None] | None = None,
) -> DiffReport:
    """Replay ``conversations`` through both stacks (URL chains or config files), each over
    a fresh store (:func:`storage.eval.measure.fresh_spec`), and compare them.

    Raises:
        ConfigError: a stack cannot be replayed into a fresh store (a server store, a layer
            with files of its own), or a bad URL.
        ChatStorageError: from a stack.
    """
    check_fresh(sources, command="diff")
    first = await _run_stack(sources[0], conversations, extractor, model, on_message)
    second = await _run_stack(sources[1], conversations, extractor, model, on_message)
    report = DiffReport(
        (_name(sources[0]), _name(sources[1])),
    )
    for conversation, a, b in zip(conversations, first, second, strict=True):
        report.conversations.append(
            ConversationDiff(
                conversation.key.session_id,
                conversation.where,
                (a, b),
                first_difference(a.views, b.views),
            )
        )
    return report


def _name(source: str | Path) -> str:
    return redact_url(source) if isinstance(source, str) else str(source)
