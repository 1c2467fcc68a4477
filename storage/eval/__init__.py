"""Measure what a stack's model view keeps: replay conversations, count the facts retained.

:mod:`storage.eval.measure` replays and counts, :mod:`storage.eval.facts` says what a fact is,
:mod:`storage.eval.baselines` builds the views a summary is compared with. ``chatlayers eval``
and ``python -m benchmarks.memory_quality`` use them.
"""

from __future__ import annotations

from storage.eval.measure import DEFAULT_EVAL_URLS, EvalReport, Figures, evaluate, evaluate_urls
from storage.facts import FactExtractor, extract_facts

__all__ = [
    "DEFAULT_EVAL_URLS",
    "EvalReport",
    "FactExtractor",
    "Figures",
    "evaluate",
    "evaluate_urls",
    "extract_facts",
]
