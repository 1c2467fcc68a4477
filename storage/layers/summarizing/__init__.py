"""The summarizing layer: short views of long histories, the raw record untouched.

The contract of agent-squad's ``SummarizingChatStorage``, made safe:

1. Before a key is summarized, it reads and writes like the inner store.
2. The first ``fetch`` whose history has more than ``trigger_at * 2`` messages calls
   ``summarizer(history, keep_last)``. A concurrent fetch waits for that call and returns the
   same view. If it fails, the key stays cold and the next qualifying fetch tries again.
3. Once a key's view is cached, a save stores the raw messages first, then appends what the
   inner store returned (scrubbed, not the raw input) to the view, and summarizes at once
   when the view holds more than ``trigger_at * 2`` messages. Fetch serves the view.
4. ``fetch_all_chats`` always reads the inner store; ``delete``/``delete_user`` drop views.
5. One summarizer call at a time per key; saves landing meanwhile are kept after its result.
6. A failing (or timed-out) summarizer loses nothing: ``on_error="raise"`` propagates
   ``SummarizerError`` (original as ``__cause__``) and the next trigger retries;
   ``on_error="fallback"`` serves the last view and retries with backoff (:mod:`.policy`).
7. A result with invalid roles, an orphaned tool result, or without the last ``keep_last``
   turns verbatim raises ``SummarizerError``; the view stays as it was.
8. Per-key state is bounded (``max_buffers``, least recently used go cold), always.
9. The record and the view: the raw record is append-only and never written by summarizing.
   With ``summaries="store"`` a summary is a checkpoint stored beside the record (through
   every layer below), and the view is ``checkpoint + raw messages after it``; the in-memory
   view is only a cache of that, so a restarted or another worker serves the same view with
   no summarizer call. ``coherence="store"`` checks the key's head on every fetch of a
   cached key; a fleet makes one summarizer call per threshold crossing (a lease, then a
   compare-and-set of the checkpoint). ``summaries="memory"`` is agent-squad's behaviour: views
   live in this process only and do not see other instances' saves.

Agent traffic: budgets in tokens (``trigger_tokens``/``keep_tokens``, or ``trigger_fraction``
of ``model``'s context window), long turns compressed by tool-call groups (:mod:`.cutting`),
old tool output trimmed without a model (``trim_tool_results``), summaries made in the
background (``background=True``), and a view that only grows at its end between compactions,
with its leading system prompt pinned first (``view_version`` says when the prefix changed).

The parts, each a module:

- :mod:`.layer`: ``SummarizingChatStorage`` itself, public methods delegating to the parts;
- :mod:`.options`: the options, each value's check declared in the constructor's annotation
  (config lists every bad value at once), validated once into a frozen object;
- :mod:`.views`: the interface the layer calls for everything that depends on where summaries
  live, and the choice of mode; :mod:`.base_views` (what both modes share: the save path, the
  counters), :mod:`.store_views` (checkpoints in the store, coherence, leases,
  compare-and-set; :mod:`.fleet` its reads and the lease), :mod:`.compaction` (what a
  store-mode compaction makes), :mod:`.memory_views` (summaries in this process);
- :mod:`.background`: the runner background summaries are made in (task group, one task per
  key, drain);
- :mod:`.state`: the cached view of each key, bounded; paired state set together;
- :mod:`.policy`: when a summary is due (the message or token budget), what a failure does;
  :mod:`.hold`: the stored hold of a view that could not be shrunk;
- :mod:`.projection` (a view as summary checkpoint + raw tail, served through windows),
  :mod:`.header` (the one leading message), :mod:`.cutting` (where a compaction cuts:
  pinned prompt, turns, tool-call groups), :mod:`.trimming` (old tool output shortened),
  :mod:`.calling` (one checked summarizer call), :mod:`.attributes` (the layer's attributes
  that are its parts').
"""

from __future__ import annotations

from storage.layers.summarizing.layer import SummarizingChatStorage

__all__ = ["SummarizingChatStorage"]
