"""Token counting with tiktoken, offline: the public names of :mod:`storage.tokens`.

The counting itself lives in :mod:`storage.tokens`, so the summarizing layer's token budgets
need nothing from this package (``storage`` imports nothing from ``summarizers``); these are
the same objects under the names users import.
"""

from __future__ import annotations

from storage.tokens import (
    DEFAULT_ENCODING,
    TokenCounter,
    context_window,
    count_tokens,
    encoding_for_model,
    get_encoding,
    message_tokens,
)

__all__ = [
    "DEFAULT_ENCODING",
    "TokenCounter",
    "context_window",
    "count_tokens",
    "encoding_for_model",
    "get_encoding",
    "message_tokens",
]
