"""The optional NER recognizer behind the ``EntityRecognizer`` interface.

The adapters are tested with small stand-ins (a fake spaCy pipeline, a fake Presidio
analyzer) everywhere; the real model runs when the ``ner`` extra is installed.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from typing import Any

import attrs
import pytest

from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage
from storage.pii import EntityRecognizer, PIIScrubber
from storage.pii.ner import DEFAULT_MODEL, PresidioRecognizer, SpacyRecognizer

KEY = ChatKey("u", "s", "a")
HAS_MODEL = importlib.util.find_spec(DEFAULT_MODEL) is not None
HAS_PRESIDIO = importlib.util.find_spec("presidio_analyzer") is not None


@attrs.frozen
class Ent:
    start_char: int
    end_char: int
    label_: str


@attrs.frozen
class Doc:
    ents: tuple[Ent, ...]


class FakeNlp:
    """A spaCy-shaped pipeline: capitalised word pairs are people, "Paris" a place."""

    def __call__(self, text: str) -> Doc:
        ents = [Ent(*m.span(), "PERSON") for m in re.finditer(r"[A-Z][a-z]+ [A-Z][a-z]+", text)]
        ents += [Ent(*m.span(), "GPE") for m in re.finditer(r"Paris", text)]
        ents += [Ent(*m.span(), "ORG") for m in re.finditer(r"ACME", text)]
        return Doc(tuple(ents))


@attrs.frozen
class Result:
    start: int
    end: int
    entity_type: str
    score: float


class FakeAnalyzer:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def analyze(self, **kwargs: Any) -> list[Result]:
        self.calls.append(kwargs)
        text = kwargs["text"]
        at = text.find("Mia Li")
        return [Result(at, at + 6, "PERSON", 0.85)] if at >= 0 else []


def test_spacy_adapter_maps_labels_and_ignores_others() -> None:
    recognizer = SpacyRecognizer(FakeNlp())
    assert isinstance(recognizer, EntityRecognizer)
    text = "Mia Li flew to Paris for ACME."
    assert list(recognizer(text)) == [(0, 6, "PERSON"), (15, 20, "LOCATION")]
    assert list(recognizer("   ")) == []


def test_presidio_adapter_passes_entities_threshold_and_language() -> None:
    analyzer = FakeAnalyzer()
    recognizer = PresidioRecognizer(["PERSON"], score_threshold=0.6, analyzer=analyzer)
    assert list(recognizer("I am Mia Li.")) == [(5, 11, "PERSON")]
    assert analyzer.calls == [
        {"text": "I am Mia Li.", "entities": ["PERSON"], "language": "en", "score_threshold": 0.6}
    ]


def test_scrubber_uses_the_recognizer_in_text_and_json_values() -> None:
    scrubber = PIIScrubber(secret="ner", recognizer=SpacyRecognizer(FakeNlp()))
    out = scrubber.scrub_text("ask Mia Li about Paris.", KEY)
    assert re.fullmatch(r"ask <PERSON_[0-9a-f]{8}> about <LOCATION_[0-9a-f]{8}>\.", out)
    tool = ChatMessage("tool", '{"note": "Ethan Martin called", "n": 1}', tool_call_id="c")
    scrubbed = str(scrubber(tool, KEY).content)
    assert re.fullmatch(r'\{"note": "<PERSON_[0-9a-f]{8}> called", "n": 1\}', scrubbed)
    assert "recognizer=SpacyRecognizer" in scrubber.describe()


def test_missing_model_is_a_config_error_never_a_download() -> None:
    with pytest.raises(ConfigError, match=r"never downloaded|needs spaCy"):
        SpacyRecognizer("chatlayers_no_such_model_package")


class BadRecognizer:
    def __call__(self, text: str) -> Iterable[tuple[int, int, str]]:
        return [(0, 3, "person")]


def test_recognizer_entity_names_are_checked() -> None:
    scrubber = PIIScrubber(secret="ner", recognizer=BadRecognizer())
    with pytest.raises(ConfigError, match="recognizer entity 'person'"):
        scrubber.scrub_text("Bob was here", KEY)


@pytest.mark.skipif(not HAS_MODEL, reason="the ner extra is not installed")
def test_real_spacy_model_finds_names_and_places() -> None:
    recognizer = SpacyRecognizer()
    found = {
        (text[s:e], entity)
        for text in ["Mia Li lives in Austin, Texas."]
        for s, e, entity in recognizer(text)
    }
    assert ("Mia Li", "PERSON") in found
    assert ("Austin", "LOCATION") in found


@pytest.mark.skipif(not (HAS_MODEL and HAS_PRESIDIO), reason="the ner extra is not installed")
def test_real_presidio_analyzer_finds_a_person() -> None:
    recognizer = PresidioRecognizer(["PERSON"])
    text = "Please rebook Ethan Martin on the next flight."
    assert (14, 26, "PERSON") in set(recognizer(text))
