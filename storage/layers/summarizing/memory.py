"""Memory mode (``summaries="memory"``): a key's summary kept in this process, viewed like a
checkpoint.

The summary part of a memory-mode view is held in its stored form (``KeyState.stored_head``:
the pinned prompt marked verbatim, then the summary messages, what a checkpoint would hold)
and shown through the same projection as a stored checkpoint
(:func:`~storage.layers.summarizing.cutting.view_form`: one leading message), so both modes
serve the same shape; the next summarizer round reads the stored form back
(:func:`source`), never the merged header.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.layers.summarizing.cutting import (
    PINNED_ROLES,
    mark_verbatim,
    source_form,
    view_form,
)
from storage.layers.summarizing.projection import leading_summaries
from storage.layers.summarizing.state import KeyState
from storage.message import ChatMessage

__all__ = ["install", "pinned_of", "source"]


def pinned_of(source: Sequence[ChatMessage]) -> ChatMessage | None:
    """The leading system/developer prompt of a summarizer source (``None``: none)."""
    first = source[0] if source else None
    if first is not None and first.role in PINNED_ROLES and not first.is_summary:
        return first
    return None


def source(state: KeyState) -> list[ChatMessage]:
    """What the next summarizer round of a cached memory-mode view reads: the pinned prompt,
    the prior summary, then the raw messages after it."""
    assert state.view is not None
    return [*source_form(state.stored_head), *state.view[state.n_summary :]]


def install(
    state: KeyState,
    pinned: ChatMessage | None,
    result: Sequence[ChatMessage],
    late: Sequence[ChatMessage] = (),
) -> None:
    """Make ``state``'s view from a summarizer ``result`` (summary messages, then the raw
    messages it kept) after the ``pinned`` prompt, with ``late`` saves after it."""
    made = leading_summaries(result)
    if made:
        head = [mark_verbatim(pinned)] if pinned is not None else []
        stored = (*head, *result[:made])
        state.stored_head = stored
        state.set_view(view_form(stored), [*result[made:], *late])
    else:
        state.stored_head = ()
        state.set_view((), [*([pinned] if pinned is not None else []), *result, *late])
