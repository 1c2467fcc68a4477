"""What a summary over its budget drops first: lines and parts of ledger entries, weighed.

:meth:`summarizers.notes.Notes.bound` hands over **units**: each line of a list section
(requests, done, declined, said, open, earlier notes) and each top-level part of a ledger or option
entry (``cabin=economy``, ``flights=[...]``; the entry's key goes with its last part). A
unit's worth per character decides what goes: what its section is worth on its own (a
request, an action, an open question matter without facts), plus the facts it alone states
(each fact shared by k units counts 1/k) times what a fact is worth in its section (an
option's facts were only seen, not used), half a fact for a short plain state
(``status=processing``: what the record can still do), weighted by recency within its section
(the newest line counts 1.5 times the oldest), and twice for a record the conversation is
about (named by a request, the open question or the kept turns). An entry so loses its
least worth parts before its line goes: a reservation keeps its flights when its
passengers' birth dates go.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Final

import attrs

from summarizers.facts import fact_keys

__all__ = ["WORTH", "Unit", "drop"]

WORTH: Final = {
    "open": (3.0, 1.0),
    "requests": (1.0, 1.0),
    "done": (2.0, 1.0),
    "declined": (2.0, 1.0),
    "ledger": (0.5, 1.0),
    "notes": (0.3, 1.0),
    "said": (0.2, 1.0),
    "options": (0.0, 0.25),
}
"""Section name → (worth of a unit on its own, worth of each fact it alone states)."""

# An entry the conversation is about is worth this many times more: a record the user
# asked about outlasts the ones read on the way.
_IN_USE: Final = 2.0
_STATE_WORTH: Final = 0.5
_STATE: Final = re.compile(r"^\w+=[a-z][\w -]{0,23}$")


@attrs.frozen
class Unit:
    """What :func:`drop` weighs: a line of ``section`` (``key`` ``""``), or a part of the
    ``index``-th entry of ``section`` whose key is ``key``; a ``head`` part (what the record
    is: a route, a name) goes only with the entry's last part."""

    section: str
    index: int
    text: str
    key: str = ""
    head: bool = False

    @property
    def owner(self) -> tuple[str, int]:
        """The line this unit is (of)."""
        return (self.section, self.index)


@attrs.define
class _Weighing:
    """The state of :func:`drop`: what is left, and the share of each fact."""

    units: Sequence[Unit]
    sizes: Mapping[str, int]
    headings: Mapping[str, int]
    in_use: Collection[int]
    facts: list[set[str]] = attrs.field(init=False)
    key_facts: dict[tuple[str, int], set[str]] = attrs.field(init=False, factory=dict)
    parts_left: Counter[tuple[str, int]] = attrs.field(init=False, factory=Counter)
    shared: Counter[str] = attrs.field(init=False, factory=Counter)
    alive: set[int] = attrs.field(init=False)
    lines_left: Counter[str] = attrs.field(init=False, factory=Counter)
    # Whose score a drop can change: the units stating a fact (their key's too), and the
    # parts of one line (the last one left also frees the key).
    by_fact: dict[str, set[int]] = attrs.field(init=False, factory=dict)
    by_owner: dict[tuple[str, int], set[int]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self.facts = [set(fact_keys(unit.text)) for unit in self.units]
        self.alive = set(range(len(self.units)))
        for position, (unit, found) in enumerate(zip(self.units, self.facts, strict=True)):
            self.shared.update(found)
            if not unit.key:
                self.lines_left[unit.section] += 1
            elif unit.owner not in self.key_facts:
                self.key_facts[unit.owner] = set(fact_keys(unit.key))
                self.shared.update(self.key_facts[unit.owner])
                self.lines_left[unit.section] += 1
            self.parts_left[unit.owner] += 1
            self.by_owner.setdefault(unit.owner, set()).add(position)
            for fact in found | self.key_facts.get(unit.owner, set()):
                self.by_fact.setdefault(fact, set()).add(position)

    def touched(self, position: int) -> set[int]:
        """The units left whose score dropping ``position`` may change."""
        unit = self.units[position]
        out = set(self.by_owner[unit.owner])
        for fact in self.facts[position] | self.key_facts.get(unit.owner, set()):
            out |= self.by_fact[fact]
        return out & self.alive

    def blocked(self, position: int) -> bool:
        """Whether the unit is a head part whose entry has other parts left."""
        return self.units[position].head and not self.last_of_its_line(position)

    def last_of_its_line(self, position: int) -> bool:
        return self.parts_left[self.units[position].owner] == 1

    def cost(self, position: int) -> int:
        """Characters freed by dropping the unit (its line's when it is the last part)."""
        unit = self.units[position]
        if not unit.key:
            return len(unit.text) + 1
        if self.last_of_its_line(position):
            return len(unit.text) + len(unit.key) + 5  # "- key: text\n"
        return len(unit.text) + 2  # ", "

    def score(self, position: int) -> float:
        """Worth per character (see the module docstring)."""
        unit = self.units[position]
        alone, per_fact = WORTH[unit.section]
        found = self.facts[position]
        if unit.key and self.last_of_its_line(position):
            found = found | self.key_facts[unit.owner]
        worth = alone + per_fact * sum(1 / self.shared[f] for f in found)
        if unit.key and _STATE.match(unit.text):
            worth += _STATE_WORTH * per_fact
        worth *= 1 + 0.5 * (unit.index + 1) / self.sizes[unit.section]
        worth *= _IN_USE if position in self.in_use else 1.0
        return worth / self.cost(position)

    def remove(self, position: int) -> int:
        """Drop the unit; the characters freed (with its section's heading when it was the
        section's last line)."""
        unit = self.units[position]
        freed = self.cost(position)
        self.alive.discard(position)
        self.shared.subtract(self.facts[position])
        self.parts_left[unit.owner] -= 1
        if self.parts_left[unit.owner]:
            return freed
        if unit.key:
            self.shared.subtract(self.key_facts[unit.owner])
        self.lines_left[unit.section] -= 1
        return freed + (0 if self.lines_left[unit.section] else self.headings[unit.section])

    @property
    def lines(self) -> int:
        return sum(self.lines_left.values())


def drop(
    units: Sequence[Unit],
    excess: int,
    *,
    sizes: Mapping[str, int],
    headings: Mapping[str, int],
    kept: Collection[int] = (),
    in_use: Collection[int] = (),
) -> list[Unit]:
    """The units left after dropping, the least worth per character first (each fact's
    share recounted after every drop), until ``excess`` characters are gone or one line is
    left; ``kept`` (positions) go only when nothing else is left to drop, ``in_use``
    (positions of entry parts) weigh twice. ``sizes``: lines per section, for recency;
    ``headings``: characters of each section's heading line, freed with its last line."""
    weighing = _Weighing(units, sizes, headings, in_use)
    # A heap of (score, position), recomputed only for the units a drop touches (stale
    # entries are skipped): the same choices as weighing every unit after every drop.
    held = set(kept)
    current = {p: weighing.score(p) for p in weighing.alive}
    heap = [(score, p) for p, score in current.items() if p not in held]
    heapq.heapify(heap)
    while excess > 0 and weighing.lines > 1:
        if held and len(weighing.alive) <= len(held) + 1:
            for p in held & weighing.alive:
                heapq.heappush(heap, (current[p], p))
            held = set()
        score, position = heapq.heappop(heap)
        stale = position not in weighing.alive or current[position] != score
        if stale or weighing.blocked(position):
            continue  # a blocked head is pushed again when its entry's other parts go
        touched = weighing.touched(position)
        excess -= weighing.remove(position)
        for p in touched - {position}:
            current[p] = weighing.score(p)
            if p not in held:
                heapq.heappush(heap, (current[p], p))
    return [units[p] for p in sorted(weighing.alive)]
