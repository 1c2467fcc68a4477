"""Detected spans and how overlapping detections resolve into one span each.

A detector reports half-open character ranges ``[start, end)`` of the text it was given.
Several detectors may claim overlapping ranges (a known name inside an e-mail address, a
phone-shaped run that is also an SSN): they merge into one span covering their union, so
one well-formed placeholder replaces it and the text around it stays intact.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Detection", "resolve"]


class Detection(NamedTuple):
    """One piece of PII: ``text[start:end]`` is an ``entity`` (e.g. ``"EMAIL_ADDRESS"``)."""

    start: int
    end: int
    entity: str


def resolve(found: list[tuple[int, int, int, str]]) -> list[Detection]:
    """Merge overlapping ``(start, end, rank, entity)`` spans into sorted, disjoint detections.

    A merged span covers the union of its parts and takes the entity of its longest part;
    between parts of equal length the lower ``rank`` (the stronger entity) wins. Empty spans
    are ignored. ``found`` is sorted in place; linear after the sort.
    """
    found.sort()
    out: list[Detection] = []
    cur_start = cur_end = best_len = best_rank = -1
    best_entity = ""
    for start, end, rank, entity in found:
        if end <= start:
            continue
        if start < cur_end:
            if end > cur_end:
                cur_end = end
            length = end - start
            if length > best_len or (length == best_len and rank < best_rank):
                best_len, best_rank, best_entity = length, rank, entity
            continue
        if cur_end >= 0:
            out.append(Detection(cur_start, cur_end, best_entity))
        cur_start, cur_end, best_len, best_rank, best_entity = start, end, end - start, rank, entity
    if cur_end >= 0:
        out.append(Detection(cur_start, cur_end, best_entity))
    return out
