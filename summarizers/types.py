"""The ``ChatSummarizer`` type: what ``SummarizingChatStorage`` calls to shrink a buffer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from storage.message import ChatMessage

__all__ = ["ChatSummarizer"]

ChatSummarizer = Callable[[list[ChatMessage], int], Awaitable[list[ChatMessage]]]
"""``summarizer(buffer, keep_last) -> new buffer``.

Takes the key's buffer (oldest first; its first message may be a prior summary, see
``ChatMessage.is_summary``) and ``keep_last``, and returns the new buffer: one summary message
(``metadata={"chatlayers": {"summary": True, ...}}``) followed by the last ``keep_last`` turns
verbatim. A turn is a user message and everything up to the next user message, so a tool call
and its results are never split. The ready summarizers also record in that metadata which
messages the summary covers and where each fact it states came from (``sources``; see
:func:`summarizers.render.build_result`). Raising (any exception) leaves the buffer unchanged;
the layer reports it as ``SummarizerError``.
"""
