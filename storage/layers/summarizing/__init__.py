"""The summarizing layer: short views of long histories, the raw record untouched.

``SummarizingChatStorage`` (:mod:`.layer`) is the layer; the other modules are its parts:
:mod:`.state` (the cached view of each key, bounded), :mod:`.projection` (a view as summary
checkpoint + raw tail), :mod:`.fleet` (coherence with the store, lease and compare-and-set),
:mod:`.policy` (when a summary is due: the message or token budget, what a failure does),
:mod:`.calling` (one checked summarizer call), :mod:`.cutting` (where a compaction cuts:
pinned prompt, turns, tool-call groups), :mod:`.trimming` (old tool output shortened).
"""

from __future__ import annotations

from storage.layers.summarizing.layer import SummarizingChatStorage

__all__ = ["SummarizingChatStorage"]
