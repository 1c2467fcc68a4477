"""Measure what a stack's model view keeps: replay conversations, count the facts retained.

See :mod:`storage.eval.measure` (the replay and the figures) and :mod:`storage.eval.facts`
(what counts as a fact). ``chatlayers eval`` and ``python -m benchmarks.memory_quality`` use it.
"""
