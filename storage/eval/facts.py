"""What counts as a fact for the quality measure: :mod:`storage.facts`, under the name
``chatlayers eval --facts`` has always given it (``storage.eval.facts:extract_facts``).

The extractor lives in :mod:`storage.facts` because the summarizing layer uses the same
definition when it clears a tool result the summary already holds.
"""

from __future__ import annotations

from storage.facts import FactExtractor, extract_facts

__all__ = ["FactExtractor", "extract_facts"]
