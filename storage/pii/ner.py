"""The optional model-based recognizer interface (names, places, organisations).

Rules and known values cover structured PII. A statistical recognizer (Presidio's analyzer,
GLiNER, a spaCy pipeline) finds free-text names too, at a cost in speed and determinism.
chatlayers ships none and needs none: pass any object with this shape as
``PIIScrubber(recognizer=...)``. Its time is its own: the linear-time guarantee covers only
the built-in detectors.

Example (Presidio, installed separately)::

    from presidio_analyzer import AnalyzerEngine

    class PresidioRecognizer:
        def __init__(self, entities=("PERSON", "LOCATION")):
            self.engine, self.entities = AnalyzerEngine(), list(entities)

        def __call__(self, text):
            for r in self.engine.analyze(text, entities=self.entities, language="en"):
                yield r.start, r.end, r.entity_type
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = ["EntityRecognizer"]


@runtime_checkable
class EntityRecognizer(Protocol):
    """Finds entities in text: ``recognizer(text) -> iterable of (start, end, entity)``.

    ``start``/``end`` are Python string indices (end exclusive); ``entity`` is an upper-case
    name such as ``"PERSON"`` (it becomes the placeholder's prefix).
    """

    def __call__(self, text: str) -> Iterable[tuple[int, int, str]]: ...
