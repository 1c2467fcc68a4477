"""The ``ChatSummarizer`` type: what ``SummarizingChatStorage`` calls to shrink a buffer.

Defined in :mod:`storage.summarizer` (the layer's side of the seam); this is its public name.
"""

from __future__ import annotations

from storage.summarizer import ChatSummarizer

__all__ = ["ChatSummarizer"]
