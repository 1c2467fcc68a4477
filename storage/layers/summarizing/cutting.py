"""Where a compaction cuts a view: the pinned system prompt, turns, tool-call groups, trimming.

A view is ``checkpoint messages + raw tail``. The checkpoint's messages are, in order:

- the conversation's leading system prompt, copied verbatim (``pinned``): it stays first and
  unchanged across every compaction, so a provider's prompt cache keeps its prefix;
- the summary message(s) (``prior`` for the next round);
- raw messages copied verbatim (``carried``): the user message that opened a long turn whose
  older tool-call groups were summarized, and tool results shortened by trimming.

In the stored checkpoint, verbatim copies are marked
``metadata["chatlayers"] = {"summary": True, "verbatim": True}`` (a checkpoint holds only
marked messages); :func:`unmark` gives the raw message back, so the next round sees them as
the history they are, and :func:`view_form` is what the view shows: verbatim copies exactly as
the raw messages were (a trimmed one with only its ``trimmed_chars`` marker), never marked as
summaries, the pinned prompt and the summary merged into the view's one leading message
(:mod:`.header`), without the summary's stored hold (:mod:`.hold`).

A **group** is an assistant message and the tool results after it (a tool call and its results
are never split); a **turn** is a user message and everything up to the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs

from storage.layers.summarizing.header import header_messages
from storage.layers.summarizing.hold import without_hold
from storage.message import ChatMessage, thaw

__all__ = [
    "PINNED_ROLES",
    "Cut",
    "Work",
    "is_verbatim",
    "mark_verbatim",
    "pinned_prompt",
    "plan_cut",
    "source_form",
    "unmark",
    "view_form",
]

PINNED_ROLES = ("system", "developer")
"""Roles of a leading prompt that is pinned: never summarized, first in every view."""


def is_verbatim(message: ChatMessage) -> bool:
    """True for a raw message copied verbatim into a checkpoint."""
    marker = message.metadata.get("chatlayers")
    return isinstance(marker, Mapping) and bool(marker.get("verbatim"))


def mark_verbatim(message: ChatMessage) -> ChatMessage:
    """``message`` marked as a verbatim copy in a checkpoint (content, id, role unchanged)."""
    if is_verbatim(message):
        return message
    meta = thaw(message.metadata)
    own = meta.get("chatlayers")
    meta["chatlayers"] = {
        **(own if isinstance(own, dict) else {}),
        "summary": True,
        "verbatim": True,
    }
    return attrs.evolve(message, metadata=meta)


def unmark(message: ChatMessage) -> ChatMessage:
    """The raw message a verbatim copy was made from (the marker removed)."""
    if not is_verbatim(message):
        return message
    meta = thaw(message.metadata)
    own = dict(meta.get("chatlayers") or {})
    own.pop("summary", None)
    own.pop("verbatim", None)
    if own:
        meta["chatlayers"] = own
    else:
        meta.pop("chatlayers", None)
    return attrs.evolve(message, metadata=meta)


def view_form(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """A stored checkpoint's messages as the view shows them (see the module docstring): the
    pinned prompt and the summary merged into one leading message (:mod:`.header`), then the
    verbatim copies exactly as the raw messages were. Called once per load or install."""
    pinned: ChatMessage | None = None
    summaries: list[ChatMessage] = []
    copies: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if not is_verbatim(message):
            summaries.append(without_hold(message))
        elif index == 0 and message.role in PINNED_ROLES:
            pinned = unmark(message)
        else:
            copies.append(unmark(message))
    return [*header_messages(pinned, summaries), *copies]


def source_form(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """A stored checkpoint's messages as a summarizer reads them: the pinned prompt and the
    carried copies as the raw messages they are, the summary without its stored hold."""
    return [unmark(m) if is_verbatim(m) else without_hold(m) for m in messages]


def pinned_prompt(head: Sequence[ChatMessage], tail: Sequence[ChatMessage]) -> ChatMessage | None:
    """The pinned prompt of a view (``head``: its stored checkpoint messages, ``tail``: the
    raw messages after them), as stored raw; ``None`` when the view has none."""
    if head:
        first = head[0]
        return unmark(first) if is_verbatim(first) and first.role in PINNED_ROLES else None
    if tail and tail[0].role in PINNED_ROLES and not tail[0].is_summary:
        return tail[0]
    return None


@attrs.frozen
class Work:
    """What one compaction works on, taken apart.

    Attributes:
        pinned: the leading system prompt as stored raw (``None``: none).
        prior: the checkpoint's summary messages.
        items: the carried verbatim messages (unmarked), then the raw tail without the pinned
            prompt, oldest first.
        seqs: the store sequence each item covers up to (carried ones: the old checkpoint's
            ``covers_to``).
        n_carried: how many leading ``items`` are carried from the checkpoint.
        covers_to: the old checkpoint's ``covers_to`` (0: none).
    """

    pinned: ChatMessage | None
    prior: tuple[ChatMessage, ...]
    items: tuple[ChatMessage, ...]
    seqs: tuple[int, ...]
    n_carried: int
    covers_to: int

    @classmethod
    def build(
        cls,
        head: Sequence[ChatMessage],
        tail: Sequence[ChatMessage],
        seqs: Sequence[int],
        covers_to: int,
    ) -> Work:
        """Take a view apart: ``head`` its checkpoint messages, ``tail`` the raw messages after
        them (with their ``seqs``)."""
        pinned: ChatMessage | None = None
        prior: list[ChatMessage] = []
        carried: list[ChatMessage] = []
        for index, message in enumerate(head):
            if is_verbatim(message):
                if index == 0 and message.role in PINNED_ROLES:
                    pinned = unmark(message)
                else:
                    carried.append(unmark(message))
            else:
                prior.append(message)
        raw = list(tail)
        raw_seqs = list(seqs)
        if not head and raw and raw[0].role in PINNED_ROLES and not raw[0].is_summary:
            pinned = raw.pop(0)
            raw_seqs.pop(0)
        return cls(
            pinned,
            tuple(prior),
            (*carried, *raw),
            (*([covers_to] * len(carried)), *raw_seqs),
            len(carried),
            covers_to,
        )

    def covers_to_after(self, cut: int) -> int:
        """The ``covers_to`` of a checkpoint replacing ``items[:cut]`` (carried items after
        ``cut`` stay in it, so at least the old checkpoint's)."""
        end = max(cut, self.n_carried)
        return self.seqs[end - 1] if end else self.covers_to

    def checkpoint(
        self,
        summary: Sequence[ChatMessage],
        cut: int,
        *,
        opener: ChatMessage | None = None,
        copies: Sequence[ChatMessage] = (),
    ) -> list[ChatMessage]:
        """The messages of a checkpoint replacing ``items[:cut]`` by ``summary`` (already
        marked): pinned prompt, summary, the turn's ``opener``, ``copies`` (trimmed items),
        then the carried items after ``cut``, each verbatim copy marked."""
        out: list[ChatMessage] = []
        if self.pinned is not None:
            out.append(mark_verbatim(self.pinned))
        out.extend(summary)
        if opener is not None:
            out.append(mark_verbatim(opener))
        out.extend(mark_verbatim(m) for m in copies)
        out.extend(mark_verbatim(m) for m in self.items[cut : self.n_carried])
        return out


@attrs.frozen
class Cut:
    """A compaction's plan.

    Attributes:
        mode: ``"turns"``: summarize ``items[:cut]``, the last ``keep_turns`` turns stay;
            ``"groups"``: the newest turn alone is over the budget: summarize its older tool
            groups (and any turn before it), keep its opening user message and its newest
            groups verbatim.
        cut: ``items[cut:]`` stay verbatim (a turn or group boundary).
        keep_turns: turns in ``items[cut:]`` (the ``keep_last`` given to the summarizer).
        opener: groups mode: the newest turn's opening user message (``None``: the turn has
            none, an agent that started on its own).
    """

    mode: Literal["turns", "groups"]
    cut: int
    keep_turns: int
    opener: ChatMessage | None = None


def opener_before(items: Sequence[ChatMessage], cut: int) -> ChatMessage | None:
    """The user message opening the turn ``items[cut]`` is in, when it lies before ``cut``
    (``None`` when ``items[cut]`` opens a turn itself or no user message precedes it)."""
    if cut >= len(items) or items[cut].role == "user":
        return None
    for index in range(cut - 1, -1, -1):
        if items[index].role == "user":
            return items[index]
    return None


def plan_cut(
    items: Sequence[ChatMessage],
    *,
    keep_last: int,
    size_of: Callable[[Sequence[ChatMessage]], int],
    trigger: int,
    keep_budget: int,
    by_tokens: bool,
    fixed: int = 0,
) -> Cut | None:
    """Where to cut ``items`` (``None``: nothing can be summarized).

    The newest turn over ``trigger`` on its own (with ``fixed``, the size of the pinned prompt
    and the summary that stay whatever is cut; and holding two groups or more): groups
    mode, keeping the newest groups within ``keep_budget`` (at least one; at least one is
    summarized). Otherwise turns mode: the last ``keep_last`` turns stay (with a token budget,
    fewer while they exceed ``keep_budget``, never less than one).
    """
    users = [i for i, m in enumerate(items) if m.role == "user"]
    newest = users[-1] if users else 0
    if fixed + size_of(items[newest:]) > trigger:
        starts = [i for i in range(newest, len(items)) if items[i].role == "assistant"]
        if len(starts) >= 2:
            keep = starts[-1]
            for start in reversed(starts[1:-1]):
                if size_of(items[start:]) > keep_budget:
                    break
                keep = start
            opener = items[newest] if users else None
            return Cut("groups", keep, 0, opener)
    if keep_last == 0:
        cut = len(items)
    elif len(users) < keep_last:
        return None
    else:
        cut = users[-keep_last]
    if by_tokens:
        later = [u for u in users if u > cut]
        while later and size_of(items[cut:]) > keep_budget:
            cut = later.pop(0)
    if cut == 0:
        return None
    return Cut("turns", cut, sum(1 for u in users if u >= cut))
