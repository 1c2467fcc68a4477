"""Where a key's view comes from: the one interface both modes implement, and the choice.

``SummarizingChatStorage`` calls a :class:`Views` for everything that depends on where
summaries live, and nothing else does; :func:`open_views` picks the mode:

- :class:`~storage.layers.summarizing.store_views.StoreViews` (``summaries="store"``): a view
  is a checkpoint in the store plus the raw messages after it, kept coherent with the store
  (head reads), one summary per threshold crossing fleet-wide (a lease, then a
  compare-and-set of the checkpoint);
- :class:`~storage.layers.summarizing.memory_views.MemoryViews` (``summaries="memory"``): the
  summary lives in this process (agent-squad's behaviour).

What both share is :mod:`.base_views`.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any, Protocol

from storage.abilities import CheckpointStorage, ViewProvenance, find_ability
from storage.errors import ConfigError
from storage.layers.summarizing.background import BackgroundRunner
from storage.layers.summarizing.base_views import Counters
from storage.layers.summarizing.memory_views import MemoryViews
from storage.layers.summarizing.options import Summaries, SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.provenance import Recorder
from storage.layers.summarizing.state import KeyStates
from storage.layers.summarizing.store_views import StoreViews
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.summarizer import ChatSummarizer

__all__ = ["Views", "open_views"]


class Views(Protocol):
    """What the layer calls, whatever the mode.

    Attributes:
        summaries: the mode, ``"store"`` or ``"memory"``.
        states: the bounded per-key states (a view each, cached).
        counts: the counters.
        summarizer: the summarizer (settable: the next call uses the new one).
        summarizer_name: how checkpoints and ``describe()`` name it.
        recorder: what each fetch served, linked to the next reply (:mod:`.provenance`).
    """

    summaries: Summaries
    states: KeyStates[Any]
    counts: Counters
    summarizer: ChatSummarizer
    summarizer_name: str
    recorder: Recorder

    async def fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        """The key's view (loaded when cold; a due summary made or scheduled first)."""
        ...

    def generation(self, key: ChatKey) -> int:
        """The key's view generation before a save (``-1``: no state)."""
        ...

    async def after_save(
        self, key: ChatKey, stored: list[ChatMessage], generation: int
    ) -> list[ChatMessage]:
        """Add what the inner store just ``stored`` to a cached view; start a due summary."""
        ...

    async def compact(self, key: ChatKey, summary: ChatMessage | None) -> list[ChatMessage]:
        """Summarize the key now (``None``), or install ``summary``; the new view."""
        ...

    def version(self, key: ChatKey) -> str | None:
        """The version of the key's cached view (see ``view_version``)."""
        ...

    def is_active(self, key: ChatKey) -> bool:
        """The key is served from its cached view."""
        ...

    def forget(self, key: ChatKey | None = None, *, user_id: str | None = None) -> None:
        """Drop cached views: the key's, the user's (``user_id``), or every one (neither)."""
        ...

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """The view the reply ``message_id`` answered, rebuilt, or ``None``."""
        ...


def open_views(
    inner: ChatStorage,
    options: SummarizingOptions,
    policy: Policy,
    summarizer: ChatSummarizer,
    background: BackgroundRunner | None,
) -> Views:
    """The views of the mode ``options.summaries`` names, or the stack allows (``None``:
    store mode when every component of ``inner`` has the ``CheckpointStorage`` ability).

    Raises:
        ConfigError: ``summaries="store"`` over a stack without that ability.
    """
    store = find_ability(inner, CheckpointStorage)
    if options.summaries == "store" and store is None:
        own = getattr(inner, "describe", None)
        described = str(own()) if callable(own) else type(inner).__name__
        raise ConfigError(
            "summaries='store' needs summary checkpoints, which this stack does not offer "
            f"(inner: {described}); use summaries='memory' for in-process summaries"
        )
    recorder = Recorder(inner, options.max_buffers)
    if store is None or options.summaries == "memory":
        return MemoryViews(options, policy, summarizer, background, inner=inner, recorder=recorder)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    return StoreViews(
        options, policy, summarizer, background, store=store, owner=owner, recorder=recorder
    )
