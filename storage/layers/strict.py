"""The ``strict`` layer: views every strict chat template accepts, the raw record untouched.

Some clients save records that strict templates refuse: OpenAI Agents sessions and
Claude-Code-style clients store system/developer messages mid-conversation (Qwen3.5+
templates raise "System message must be at the beginning."), consecutive messages of one role
(Mistral templates raise "After the optional system message, conversation roles must
alternate user and assistant roles except for tool calls and results."), or a tool call whose
result was never saved. ``StrictViewChatStorage`` rewrites only what ``fetch`` returns
(:func:`strict_view`); saves, ``fetch_all_chats`` and every write ability pass through
unchanged. Put it outermost (``strict::summarize::scrub::sqlite:///chats.db``): it does not
forward the abilities that read raw messages (``SequencedStorage``, ``CheckpointStorage``),
so a summarizing layer above it could only summarize the strict view in memory. Time travel
acts on the record and passes through, except ``provenance``: the view a reply answered is
reshaped as this layer served it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, cast

import attrs

from storage.abilities import (
    Abilities,
    CheckpointStorage,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    TimeTravelStorage,
    ViewProvenance,
    forward,
)
from storage.errors import ConfigError
from storage.message import INSTRUCTION_ROLES, ChatKey, ChatMessage, thaw
from storage.protocol import ChatStorage, ChatStorageWrapper

__all__ = ["StrictViewChatStorage", "strict_view"]

LaterSystem = Literal["fold", "user"]
Leading = Literal["keep", "user"]
JOIN: Final = "\n\n"
"""Between the texts of messages merged into one."""


def _parts(content: Any) -> tuple[Any, ...]:
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return ({"type": "text", "text": content},)
    return tuple(content)


def _joined(first: Any, second: Any) -> Any:
    """Two contents as one: strings joined by :data:`JOIN`, else the parts of both."""
    if first is None or first == "":
        return second
    if second is None or second == "":
        return first
    if isinstance(first, str) and isinstance(second, str):
        return first + JOIN + second
    return (*_parts(first), {"type": "text", "text": JOIN}, *_parts(second))


def _merged(first: ChatMessage, second: ChatMessage, role: str | None = None) -> ChatMessage:
    """``second`` merged into ``first`` (its id, name and time kept; a summary stays marked)."""
    metadata: Mapping[str, Any] = first.metadata
    if second.is_summary and not first.is_summary:
        meta = thaw(first.metadata)
        own = meta.get("chatlayers")
        meta["chatlayers"] = {**(own if isinstance(own, dict) else {}), "summary": True}
        metadata = meta
    return attrs.evolve(
        first,
        role=role or first.role,
        content=_joined(first.content, second.content),
        tool_calls=(*first.tool_calls, *second.tool_calls),
        metadata=metadata,
    )


def _answered(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Every tool call answered, every result after its call: a call without a result is
    dropped from its assistant message (the message too when nothing is left), a result
    that answers no call of the nearest assistant turn before it is dropped."""
    out: list[ChatMessage] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.role == "tool":
            index += 1  # an orphaned result (answered results are taken with their call)
            continue
        if message.role != "assistant" or not message.tool_calls:
            out.append(message)
            index += 1
            continue
        end = index + 1
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        calls = {call.id for call in message.tool_calls}
        results = [m for m in messages[index + 1 : end] if m.tool_call_id in calls]
        answered = {m.tool_call_id for m in results}
        kept = tuple(call for call in message.tool_calls if call.id in answered)
        if kept != message.tool_calls:
            message = attrs.evolve(message, tool_calls=kept)
        if message.tool_calls or message.content not in (None, "", ()):
            out.append(message)
            out.extend(results)
        index = end
    return out


def strict_view(
    messages: Sequence[ChatMessage],
    *,
    later_system: LaterSystem = "fold",
    leading: Leading = "keep",
) -> list[ChatMessage]:
    """``messages`` (a view, oldest first) in the shape strict chat templates accept.

    1. System/developer messages after the first message: ``"fold"`` appends their text to
       the leading one (a new leading message when the view has none, with the first one's
       id and role); ``"user"`` turns each into a user message.
    2. ``leading="user"``: the leading system/developer message becomes a user message, for
       clients that send their own system prompt (LangGraph ``create_agent``, an OpenAI
       Agents SDK agent's ``instructions``), whose request would otherwise hold two.
    3. Messages before the first user message (after the leading one) are dropped when the
       view has a user message: strict templates need the conversation to open with one.
    4. Every tool call answered, every result after its call (an unanswered call, at the
       view's end after an interrupted run or anywhere, is dropped with an empty message).
    5. Consecutive messages of one role are merged (user with user; an assistant message
       without tool calls with the assistant message after it), texts joined by
       :data:`JOIN`; the first one's id is kept.

    Returns:
        A new list; the messages that did not change are the same objects.
    """
    out = list(messages)
    lead = 1 if out and out[0].role in INSTRUCTION_ROLES else 0
    later = [i for i in range(lead, len(out)) if out[i].role in INSTRUCTION_ROLES]
    if later:
        if later_system == "user":
            for i in later:
                out[i] = attrs.evolve(out[i], role="user")
        else:
            head = out[0] if lead else out[later[0]]
            for i in later if lead else later[1:]:
                head = _merged(head, out[i])
            drop = set(later)
            out = [head, *(m for i, m in enumerate(out) if i >= lead and i not in drop)]
            lead = 1
    if lead and leading == "user":
        out[0] = attrs.evolve(out[0], role="user")
        lead = 0
    first_user = next((i for i in range(lead, len(out)) if out[i].role == "user"), None)
    if first_user is not None and first_user > lead:
        out = [*out[:lead], *out[first_user:]]
    out = _answered(out)
    merged: list[ChatMessage] = []
    for message in out:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.role == message.role
            and (
                message.role == "user" or (message.role == "assistant" and not previous.tool_calls)
            )
        ):
            merged[-1] = _merged(previous, message)
        else:
            merged.append(message)
    return merged


class StrictViewChatStorage(ChatStorageWrapper):
    """Serve the inner stack's view in the shape strict chat templates accept
    (:func:`strict_view`); the raw record is untouched.

    Args:
        inner: the wrapped stack (a summarizing stack, or a store).
        later_system: ``"fold"`` (default) or ``"user"``: what becomes of system/developer
            messages after the first message of a view.
        leading: ``"keep"`` (default) or ``"user"`` (the client sends its own system
            prompt): what becomes of the view's leading system/developer message.

    Raises:
        ConfigError: on construction, an unknown ``later_system`` or ``leading`` value.
    """

    # Heads, tails and checkpoints read the raw record: offering them would bypass the view.
    abilities = Abilities(
        passes=(
            ListableStorage,
            ReplaceableStorage,
            SessionListing,
            SearchableStorage,
            RecordStorage,
            RetentionStorage,
        ),
        transforms=(DescribableStorage, TimeTravelStorage),
        hides=(SequencedStorage, CheckpointStorage),
    )
    # The record's time travel is the record's: forwarded; a reply's view is reshaped.
    fork = forward(TimeTravelStorage.fork)
    rewind = forward(TimeTravelStorage.rewind)
    fetch_as_of = forward(TimeTravelStorage.fetch_as_of)
    fetch_timeline = forward(TimeTravelStorage.fetch_timeline)

    def __init__(
        self,
        inner: ChatStorage,
        *,
        later_system: LaterSystem = "fold",
        leading: Leading = "keep",
    ) -> None:
        super().__init__(inner)
        for name, value, allowed in (
            ("later_system", later_system, ("fold", "user")),
            ("leading", leading, ("keep", "user")),
        ):
            if value not in allowed:
                choices = ", ".join(repr(a) for a in allowed)
                raise ConfigError(f"{name} must be one of {choices}, got {value!r}")
        self.later_system: LaterSystem = later_system
        self.leading: Leading = leading

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The inner view (``limit`` applied below), reshaped by :func:`strict_view`."""
        view = await self.inner.fetch(key, limit=limit)
        return strict_view(view, later_system=self.later_system, leading=self.leading)

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """The view the inner stack recorded for the reply, reshaped by :func:`strict_view`
        as this layer served it (``None`` when the inner stack cannot tell)."""
        found: ViewProvenance | None = await self._timetravel.provenance(key, message_id)
        if found is None:
            return None
        view = strict_view(found.messages, later_system=self.later_system, leading=self.leading)
        return attrs.evolve(found, messages=tuple(view))

    @property
    def _timetravel(self) -> TimeTravelStorage:
        return cast(TimeTravelStorage, self.inner)

    def describe(self) -> str:
        return f"StrictViewChatStorage(later_system={self.later_system}, leading={self.leading})"
