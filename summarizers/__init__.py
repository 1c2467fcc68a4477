"""Ready summarizers for ``SummarizingChatStorage`` and offline token counting.

``import summarizers`` imports neither litellm nor tiktoken: litellm is imported on the first
``LiteLLMSummarizer`` call, tiktoken on the first ``count_tokens`` call.
"""

from __future__ import annotations

from summarizers.extractive import ExtractiveSummarizer
from summarizers.llm import LiteLLMSummarizer
from summarizers.tokens import count_tokens
from summarizers.types import ChatSummarizer

__all__ = ["ChatSummarizer", "ExtractiveSummarizer", "LiteLLMSummarizer", "count_tokens"]
