"""Tool-output trimming: shorten old, long tool results in the model view, no LLM needed.

Agent transcripts are mostly tool output (file listings, test logs, search results). Once a
result is a few turns old the model rarely needs all of it, so the view keeps its head and
tail and a marker saying how much was cut. Only the view changes: the raw record keeps every
character. Trimming is deterministic (the same input gives the same view), so a view trimmed
at a compaction stays an exact prefix of the views served after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from storage.history import last_turns_start
from storage.message import ChatMessage, thaw

__all__ = ["TRIM_MARKER", "trim_text", "trim_tool_results"]

TRIM_MARKER: Final = "[… {cut} characters of this tool result cut by chatlayers …]"


def trim_text(text: str, max_chars: int) -> tuple[str, int]:
    """``text`` cut to its head and tail around a marker, and how many characters were cut.

    The head gets two thirds of ``max_chars`` and the tail the rest (cut at line breaks when
    one is near, so log lines stay whole); text of at most ``max_chars`` is returned as is.

    Raises:
        ValueError: ``max_chars`` < 20.
    """
    if max_chars < 20:
        raise ValueError(f"max_chars must be >= 20, got {max_chars}")
    if len(text) <= max_chars:
        return text, 0
    head_end = (max_chars * 2) // 3
    tail_start = len(text) - (max_chars - head_end)
    newline = text.rfind("\n", head_end // 2, head_end)
    if newline > 0:
        head_end = newline + 1
    newline = text.find("\n", tail_start, tail_start + (max_chars - head_end) // 2)
    if newline >= 0:
        tail_start = newline + 1
    cut = tail_start - head_end
    marker = TRIM_MARKER.format(cut=f"{cut:,}")
    return f"{text[:head_end]}\n{marker}\n{text[tail_start:]}", cut


def _trimmed(message: ChatMessage, max_chars: int) -> ChatMessage:
    marker = message.metadata.get("chatlayers")
    if isinstance(marker, Mapping) and marker.get("trimmed_chars"):
        return message  # trimmed once already: trimming again would drift
    content = message.content
    cut = 0
    new_content: Any = content
    if isinstance(content, str):
        new_content, cut = trim_text(content, max_chars)
    elif isinstance(content, tuple):
        parts: list[Any] = []
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else None
            if isinstance(text, str) and len(text) > max_chars:
                short, n = trim_text(text, max_chars)
                cut += n
                parts.append({**thaw(part), "text": short})
            else:
                parts.append(part)
        new_content = parts
    if not cut:
        return message
    meta = thaw(message.metadata)
    marker = meta.get("chatlayers")
    meta["chatlayers"] = {**(marker if isinstance(marker, dict) else {}), "trimmed_chars": cut}
    return attrs.evolve(message, content=new_content, metadata=meta)


def trim_tool_results(
    messages: Sequence[ChatMessage], *, keep_turns: int, max_chars: int
) -> list[ChatMessage]:
    """The view with tool results older than the last ``keep_turns`` turns that are longer
    than ``max_chars`` characters cut to head + tail + a marker (see :func:`trim_text`).

    A trimmed message keeps its id, role and ``tool_call_id`` (pairs stay intact) and records
    ``metadata["chatlayers"]["trimmed_chars"]``. Messages in the last ``keep_turns`` turns,
    every non-tool message and every message trimmed already are returned as they are (the
    same objects), so trimming a trimmed view changes nothing.

    Raises:
        ValueError: ``keep_turns`` < 0 or ``max_chars`` < 20.
    """
    if keep_turns < 0:
        raise ValueError(f"keep_turns must be >= 0, got {keep_turns}")
    if max_chars < 20:
        raise ValueError(f"max_chars must be >= 20, got {max_chars}")
    start = last_turns_start(messages, keep_turns)
    out = list(messages)
    for index in range(start):
        message = out[index]
        if message.role == "tool":
            out[index] = _trimmed(message, max_chars)
    return out
