"""Checking a summary against what it summarizes: a model cannot invent a reservation id.

:func:`ground` finds every fact a summary states (:mod:`summarizers.facts`: identifiers,
numbers, amounts, dates, emails, placeholders) and looks for it in the messages the summary
covers. A fact found there is recorded with the id of the first message holding it; a fact
found nowhere is **ungrounded** and replaced in the text by :data:`UNVERIFIED`, so the model
reading the summary never takes it for something that was said.

Matching is by normalized value (``$1,255.00`` is ``1255``, ``May 17`` is ``2024-05-17``,
identifiers and emails ignore case); a number is grounded when it appears anywhere in the
source, also inside an identifier or a date (``2024`` in ``2024-05-17``). A word in capitals
is a code (``AQLBTL``) only right after a word naming one (``reservation AQLBTL``), so
``IMPORTANT`` stays a word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import attrs

from summarizers.facts import fact_key, fact_spans

__all__ = ["UNVERIFIED", "Grounding", "ground", "source_keys"]

UNVERIFIED = "[unverified]"
"""What replaces a fact the summarized messages do not hold."""

_DIGITS = re.compile(r"\d{2,}")
# A word in capitals (SUMMARY, IMPORTANT) is a code only after a word naming one.
_NAMES_A_CODE = re.compile(
    r"\b(?:reservation|booking|confirmation|order|ticket|code|id|ref\w*|number|no\.?|pnr)"
    r"\W{0,3}$",
    re.IGNORECASE,
)


@attrs.frozen
class Grounding:
    """The result of :func:`ground`.

    Attributes:
        text: the summary with each ungrounded fact replaced by :data:`UNVERIFIED`.
        facts: each grounded fact, as written, mapped to the id of the message it came from.
        ungrounded: the ungrounded facts as written, in order (for counts; never logged, they
            may be personal data).
    """

    text: str
    facts: dict[str, str]
    ungrounded: tuple[str, ...]


def _key(kind: str, value: str) -> str:
    key = fact_key(kind, value)
    return key.lower() if kind in ("id", "email") else key


def source_keys(texts: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Every fact key of ``texts`` (``(message id, text)`` pairs, oldest first) mapped to the
    id of the first message holding it; numbers also by each digit run of the text."""
    keys: dict[str, str] = {}
    for source, text in texts:
        for kind, start, end in fact_spans(text):
            keys.setdefault(_key(kind, text[start:end]), source)
        for digits in _DIGITS.findall(text):
            keys.setdefault(digits.lstrip("0") or "0", source)
    return keys


def ground(
    text: str, sources: Iterable[tuple[str, str]], known: Mapping[str, str] | None = None
) -> Grounding:
    """Check ``text`` against ``sources`` (``(message id, text)`` pairs).

    Args:
        text: the summary.
        sources: the messages it covers (content and tool-call arguments as text), and the
            prior summary's text.
        known: facts already grounded by a prior summary (fact as written → message id):
            their recorded source is kept.
    """
    keys = source_keys(sources)
    facts: dict[str, str] = {}
    ungrounded: list[str] = []
    pieces: list[str] = []
    last = 0
    for kind, start, end in fact_spans(text):
        value = text[start:end]
        if kind == "id" and value.isalpha() and not _NAMES_A_CODE.search(text[:start][-30:]):
            continue
        source = keys.get(_key(kind, value))
        if source is None:
            ungrounded.append(value)
            pieces.append(text[last:start] + UNVERIFIED)
            last = end
            continue
        facts.setdefault(value, (known or {}).get(value, source))
    pieces.append(text[last:])
    return Grounding("".join(pieces), facts, tuple(ungrounded))
