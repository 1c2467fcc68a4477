"""What the summarizing layer calls: the ``ChatSummarizer`` type, and the default one by name.

The type is defined here, on the storage side, so the layer needs nothing from the
``summarizers`` package (``summarizers.ChatSummarizer`` re-exports it); the ready summarizers
are found through the registry by name (:mod:`storage.config.registry`, where
``"extractive"`` and ``"litellm"`` are registered and third parties add theirs through entry
points), the same seam a URL's ``summarizer=NAME`` goes through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

from storage.message import ChatMessage

__all__ = ["DEFAULT_SUMMARIZER", "ChatSummarizer", "default_summarizer"]

ChatSummarizer: TypeAlias = Callable[[list[ChatMessage], int], Awaitable[list[ChatMessage]]]
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

DEFAULT_SUMMARIZER: Final = "extractive"
"""The registry name of the summarizer a layer uses when none is given (offline,
deterministic: ``summarizers.ExtractiveSummarizer``)."""


_last: tuple[object, int, Callable[[], Any]] | None = None
"""The last lookup: the registry, its generation then, the factory found."""


def default_summarizer() -> ChatSummarizer:
    """A new instance of the summarizer registered as :data:`DEFAULT_SUMMARIZER` in the
    process-wide registry (looked up again whenever a registration changed).

    Raises:
        ConfigError: the name cannot be resolved (its module is missing).
    """
    # Imported on first use: the registry (and entry-point discovery) costs nothing until a
    # layer is built without a summarizer.
    from storage.config.registry import registry

    global _last
    last = _last
    if last is None or last[0] is not registry or last[1] != registry.generation:
        factory = registry.resolve("summarizers", DEFAULT_SUMMARIZER)
        last = _last = (registry, registry.generation, factory)
    summarizer: ChatSummarizer = last[2]()
    return summarizer
