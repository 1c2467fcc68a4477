"""When a summary is due, and what a summarizer failure does (``on_error``).

``on_error="raise"`` (the seed's contract): the error propagates from the ``save`` or
``fetch`` that triggered the call, and the next trigger retries at once.
``on_error="fallback"``: ``save`` and ``fetch`` never fail because of the summarizer; the
failure is counted, logged once per key (until a summary succeeds again), and retried with
exponential backoff on the key's next trigger after ``retry_backoff * 2**(failures-1)``
seconds (at most ``retry_max``), measured on the injected ``clock``. A view with no summary
is served as its newest ``trigger_at * 2`` messages meanwhile (tool-pair safe).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import attrs

from storage.layers.summarizing.state import KeyState
from storage.message import ChatKey

__all__ = ["OnError", "Policy"]

log = logging.getLogger("storage.layers.summarizing")

OnError = Literal["raise", "fallback"]


@attrs.define
class Policy:
    """The summarizing layer's trigger and failure rules.

    Attributes:
        threshold: a view holding more than this many messages is due for a summary.
        on_error: ``"raise"`` or ``"fallback"``.
        clock: monotonic seconds (injected in tests).
        retry_backoff: first retry delay in seconds (``fallback``).
        retry_max: largest retry delay in seconds (``fallback``).
    """

    threshold: int
    on_error: OnError
    clock: Callable[[], float]
    retry_backoff: float
    retry_max: float

    @property
    def fallback(self) -> bool:
        return self.on_error == "fallback"

    def due(self, state: KeyState) -> bool:
        """The view holds more than ``threshold`` messages."""
        return state.view is not None and len(state.view) > self.threshold

    def may_try(self, state: KeyState) -> bool:
        """No backoff is running for the key."""
        return state.retry_at is None or self.clock() >= state.retry_at

    def window(self, state: KeyState) -> int | None:
        """How many newest messages a view with no summary is served as (fallback only)."""
        if self.fallback and state.n_summary == 0:
            return self.threshold
        return None

    def failed(self, state: KeyState, key: ChatKey, exc: BaseException) -> None:
        """Record a failure: log it (warning once per key and outage), set the backoff."""
        state.failures += 1
        if state.failures == 1:
            log.warning(
                "summarizer failed for key %r (%s); %s",
                key,
                exc,
                "serving the last view; retrying with backoff"
                if self.fallback
                else "the error propagates; the next trigger retries",
            )
        else:
            log.debug(
                "summarizer failed again for key %r (%d in a row): %s", key, state.failures, exc
            )
        if self.fallback:
            delay = min(self.retry_backoff * 2 ** (state.failures - 1), self.retry_max)
            state.retry_at = self.clock() + delay

    def succeeded(self, state: KeyState) -> None:
        state.failures = 0
        state.retry_at = None
