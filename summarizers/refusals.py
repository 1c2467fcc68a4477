"""The assistant declining what was asked: the lines of a summary's ``Declined:`` section.

A refusal ("Unfortunately, it cannot be canceled for a refund due to the airline's policy.",
"I'm unable to remove a passenger from an existing reservation.") is a decision the agent
must keep to long after its turn is summarized: asked again, it should say the same. So it
is kept apart from the assistant's other lines (of which only the newest stay) and weighed
like an action when the summary runs out of room. A refusal that names nothing but points
back ("it cannot be canceled") is put after the record the sentence before it names::

    Declined:
    - IFOYYZ: "Unfortunately, it cannot be canceled for a refund due to the airline's policy."

Not refusals: a condition ("If you're unable to locate it, ..."), the assistant saying what
it needs first ("Unfortunately, I need the reservation ID to proceed.", "I cannot proceed
without the reservation ID."), a question. A refusal that says again what an earlier one said
(the same record and facts, most of its words) replaces it (:func:`same_refusal`): four ways of
saying travel insurance cannot be added are one line, the newest.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Final

from summarizers.facts import fact_keys, has_fact
from summarizers.quoting import quote

__all__ = ["is_refusal", "refusal_lines", "same_refusal"]

_REFUSAL: Final = re.compile(
    r"\b(i|we) (cannot|can't|can not|am unable to|are unable to|am not able to)\b|"
    r"\b(i'm|we're) (unable|not able) to\b|"
    r"\b(cannot|can't|can not) be (\w+ed|modified|changed|refunded|done)\b|"
    r"\b(is|are) not (allowed|possible|permitted|eligible|refundable)\b|\bnon-refundable\b",
    re.IGNORECASE,
)
_NOT_REFUSAL: Final = re.compile(
    r"^\W*(if|when|once|unless)\b|\bi need\b|"
    # "not yet": what is missing, not what is refused ("I cannot proceed without the ID.")
    r"\bwithout (the|your|a|an|their)\b[^.;]*\b(ids?|numbers?|details|information|codes?)\b",
    re.IGNORECASE,
)
_POINTS_BACK: Final = re.compile(r"\b(it|this|these|they)\b", re.IGNORECASE)
_LIST_NUMBER: Final = re.compile(r"^\W*\d{1,2}\W*$")
_WORD: Final = re.compile(r"[\w-]+")


def is_refusal(sentence: str) -> bool:
    """Whether ``sentence`` (plain text, one sentence) declines or rules out what was asked
    (see the module docstring)."""
    text = sentence.strip().replace("\u2019", "'")  # a typographic apostrophe: I\u2019m
    return (
        not text.endswith("?")
        and _REFUSAL.search(text) is not None
        and _NOT_REFUSAL.search(text) is None
    )


def refusal_lines(sentences: Sequence[str], limit: int, records: Collection[str] = ()) -> list[str]:
    """The ``Declined:`` lines of one assistant message split in ``sentences`` (plain
    text, markup removed): each refusal quoted (at most ``limit`` characters). A refusal
    that names no fact but points back ("it", "this", "these", "they") is put after the
    record it points to: the first of ``records`` (the ledger's identities) that the
    sentence just before it names (a list number such as ``1.`` skipped)."""
    out = []
    previous = ""
    for sentence in sentences:
        if is_refusal(sentence):
            quoted = quote(sentence, limit)
            about = _named(previous, records) if _POINTS_BACK.search(sentence) else None
            if about is not None and not has_fact(sentence):
                quoted = f"{about}: {quoted}"
            out.append(quoted)
        if not _LIST_NUMBER.match(sentence):
            previous = sentence
    return out


def _named(sentence: str, records: Collection[str]) -> str | None:
    words: list[str] = _WORD.findall(sentence)
    return next((word for word in words if word in records), None)


_SAME: Final = 0.6  # share of the shorter refusal's words the other has, to say the same
_WORDS: Final = re.compile(r"[a-z]{4,}")
_FILLER: Final = frozenset(
    {"unfortunately", "sorry", "understand", "however", "therefore", "since", "this", "that"}
)


def same_refusal(new: str, old: str) -> bool:
    """Whether ``Declined:`` line ``new`` says what ``old`` said: about the same record (or
    both about none), stating the same facts (ids, amounts, dates), and sharing at least 60 %
    of the shorter one's words of four letters or more (apologies and connectives aside)."""
    if _about(new) != _about(old) or set(fact_keys(new)) != set(fact_keys(old)):
        return False
    a, b = _content(new), _content(old)
    return bool(a and b) and len(a & b) / min(len(a), len(b)) >= _SAME


def _content(line: str) -> set[str]:
    return set(_WORDS.findall(line.lower())) - _FILLER


def _about(line: str) -> str:
    return "" if line.startswith('"') else line.partition(": ")[0]
