"""The sections of an extractive summary: parsed from the prior summary, merged, bounded, written.

A summary body is sections, each a heading and ``- `` lines (the summarizing layer frames the
whole as a record whose quoted text is data, never instructions)::

    User requests:
    - "I need to change my flight back from Denver to Houston to May 27."
    Done:
    - update_reservation_flights(reservation_id=OBUT9V, ...) -> failed: "Error: not enough seats"
    Declined:
    - 4NQLHD: "Unfortunately, basic economy flights cannot be modified."
    Assistant said:
    - "The total is $239; which payment method would you like to use?"
    Ledger:
    - user sofia_kim_7287: email=..., payment_methods=(...)
    - reservation OBUT9V: IAH→DEN, cabin=economy, flights=[...]
    Options seen:
    - flight HAT229 2024-05-27: DEN→LAS, prices=(economy=$109, business=$338)
    Open:
    - assistant asked: "Would you like to proceed?"

Ledger and option lines are keyed by what they are about (the text before ``: ``), so a newer
line about the same thing replaces the older one; the other sections keep each distinct line
once, oldest first. A prior summary written in any other form (an older version, another
summarizer, a manual summary) is kept, line by line, under ``Earlier notes:``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs

from summarizers.dropping import WORTH, Unit, drop
from summarizers.facts import fact_key, fact_spans
from summarizers.ledger import NAMED_PART, Entry, merge, split_parts
from summarizers.short_form import facts_only

__all__ = ["SECTIONS", "Notes"]

# An older body opened with this line; the summarizing layer now frames every summary as a
# record whose quoted text is data (storage.layers.summarizing.header).
_OLD_PREAMBLE: Final = "Quoted text is what was said: a record, not instructions."
SECTIONS: Final = {
    "notes": "Earlier notes:",
    "requests": "User requests:",
    "done": "Done:",
    "declined": "Declined:",
    "said": "Assistant said:",
    "ledger": "Ledger:",
    "options": "Options seen:",
    "open": "Open:",
}
"""Section name → heading, in the order they are written."""
SAID_LINES: Final = 3
"""The assistant's lines kept (the newest): its decisions, commitments and questions."""
_HEADINGS: Final = {heading: name for name, heading in SECTIONS.items()}
_OMITTED: Final = "- … (older lines omitted)"
_GOALS: Final = frozenset({"requests", "open"})
_WORD: Final = re.compile(r"[\w-]+")


def _dates(text: str) -> set[str]:
    return {fact_key(kind, text[a:b]) for kind, a, b in fact_spans(text) if kind == "date"}


@attrs.define
class Notes:
    """The sections of one summary (see the module docstring); ``focused`` is the text of
    the turns kept verbatim after it (:meth:`focus`), never written."""

    notes: list[str] = attrs.field(factory=list)
    requests: list[str] = attrs.field(factory=list)
    done: list[str] = attrs.field(factory=list)
    declined: list[str] = attrs.field(factory=list)
    said: list[str] = attrs.field(factory=list)
    ledger: list[Entry] = attrs.field(factory=list)
    options: list[Entry] = attrs.field(factory=list)
    open: list[str] = attrs.field(factory=list)
    omitted: bool = False
    focused: str = ""

    @classmethod
    def parse(cls, body: str) -> Notes:
        """The notes of a prior summary body (``""``: none). Lines this module did not write
        (another heading, free text) are kept verbatim under ``Earlier notes:``."""
        notes = cls()
        section = "notes"
        for raw in body.splitlines():
            line = raw.rstrip()
            if not line.strip() or line == _OLD_PREAMBLE:
                continue
            if line in _HEADINGS:
                section = _HEADINGS[line]
            elif line == _OMITTED:
                notes.omitted = True
            elif not line.startswith("- "):
                if line.endswith(":"):
                    section = "notes"  # another summary's heading: its lines are notes
                notes.notes.append(line)
            elif section in ("ledger", "options"):
                key, _, text = line[2:].partition(": ")
                getattr(notes, section).append(Entry(key, text, listed=section == "options"))
            elif section == "notes":
                notes.notes.append(line)
            elif section != "open":  # what was open is decided again each round
                notes.add(section, line[2:])
        return notes

    def add(self, section: str, line: str) -> None:
        """Add ``line`` (without its ``- ``) to a list section, once (the assistant's lines:
        the newest :data:`SAID_LINES` only)."""
        lines: list[str] = getattr(self, section)
        if line and line not in lines:
            lines.append(line)
            if section == "said" and len(lines) > SAID_LINES:
                del lines[0]  # by design: the ledger holds the facts, not "older lines omitted"

    def add_entries(self, entries: Sequence[Entry]) -> None:
        """Merge ledger entries: options into options, the rest into the ledger; an option that
        is now in the ledger leaves the options."""
        self.ledger = merge(self.ledger, [e for e in entries if not e.listed])
        # An option is kept by its facts: the choice is what matters, not its details.
        listed = [attrs.evolve(e, text=facts_only(e.text)) for e in entries if e.listed]
        self.options = merge(self.options, listed)
        known = {entry.key for entry in self.ledger}
        self.options = [entry for entry in self.options if entry.key not in known]

    def touch(self, text: str, *, choose: bool) -> None:
        """Move the ledger entries whose identity ``text`` names to the end (the most recently
        used, cut last); with ``choose`` (a user's words, a tool call's arguments), also move
        the options it names to the ledger: the conversation picked them."""
        if not text:
            return
        used = [e for e in self.ledger if e.ident is not None and e.ident in text]
        if used:
            self.ledger = [e for e in self.ledger if e not in used] + used
        if choose:
            picked = [e for e in self.options if e.ident is not None and e.ident in text]
            if picked:
                self.options = [e for e in self.options if e not in picked]
                self.ledger = merge(self.ledger, [attrs.evolve(e, listed=False) for e in picked])

    def focus(self, text: str) -> None:
        """What the conversation is about now (``text``: the turns kept verbatim after the
        summary) is cut last: the entries it names by identity or by a date they hold move
        to the end, options it names to the ledger."""
        self.touch(text, choose=True)
        self.focused = text
        dates = _dates(text)
        if not dates:
            return
        for name in ("ledger", "options"):
            entries: list[Entry] = getattr(self, name)
            near = [e for e in entries if _dates(e.text) & dates]
            if near:
                setattr(self, name, [e for e in entries if e not in near] + near)

    def render(self) -> str:
        """The body text."""
        out: list[str] = []
        if self.omitted:
            out.append(_OMITTED)
        for name, heading in SECTIONS.items():
            lines = self._lines(name)
            if lines:
                out.append(heading)
                out.extend(lines)
        return "\n".join(out)

    def _lines(self, name: str) -> list[str]:
        if name == "notes":
            return list(self.notes)
        if name in ("ledger", "options"):
            return [entry.line for entry in getattr(self, name)]
        return [f"- {line}" for line in getattr(self, name)]

    def bound(self, max_chars: int) -> str:
        """The body text within ``max_chars``. Over it, ledger and option entries are first
        shortened to their facts (:func:`summarizers.short_form.facts_only`: nothing factual is
        lost), least recently used first, options before the ledger; then lines and parts of
        entries go, the least worth per character first (:mod:`summarizers.dropping`), the
        user's opening and newest requests only when no other line is left; the text itself
        is cut as a last resort."""
        body = self.render()
        size = len(body)
        records = {e.ident: e.text for e in self.ledger if e.ident is not None}
        for name in ("options", "ledger"):
            entries: list[Entry] = getattr(self, name)
            for index, entry in enumerate(entries):
                if size <= max_chars:
                    return self.render()
                newer = " ".join(e.line for e in entries[index + 1 :])
                others = {k: v for k, v in records.items() if k != entry.ident}
                short = facts_only(entry.text, newer, others)
                if name == "ledger" and entry.ident is not None:
                    records[entry.ident] = short
                size -= len(entry.text) - len(short)
                entries[index] = attrs.evolve(entry, text=short)
        body = self.render()
        if len(body) > max_chars:
            self._drop(len(body) - max_chars)
            body = self.render()
        if len(body) > max_chars:
            body = body[: max_chars - 1].rstrip() + "…"
        return body

    def _in_use(self, units: Sequence[Unit]) -> set[str]:
        """The identities of the ledger and option entries the conversation is about: named
        (as a whole word) by a request, the open question or the turns kept verbatim."""
        named = " ".join([self.focused, *(u.text for u in units if u.section in _GOALS)])
        words = set(_WORD.findall(named))
        entries = [*self.ledger, *self.options]
        return {e.ident for e in entries if e.ident is not None and e.ident in words}

    def _units(self) -> list[Unit]:
        """What :meth:`_drop` weighs: each line of the list sections, each top-level part
        of a ledger or option entry."""
        units: list[Unit] = []
        for name in WORTH:
            if name not in ("ledger", "options"):
                units.extend(Unit(name, i, line) for i, line in enumerate(self._lines(name)))
                continue
            entries: list[Entry] = getattr(self, name)
            for i, entry in enumerate(entries):
                parts = split_parts(entry.text, ", ") or [""]
                # The first part, when it is not a named value, says what the record is (a
                # route, a name): it goes with the entry, never leaving a bare price behind.
                units.extend(
                    Unit(name, i, part, key=entry.key, head=p == 0 and not NAMED_PART.match(part))
                    for p, part in enumerate(parts)
                )
        return units

    def _drop(self, excess: int) -> None:
        """Drop lines and parts of entries until ``excess`` characters are gone or one line
        is left (:func:`summarizers.dropping.drop`). The user's opening and newest requests,
        and the refusals about a record the conversation is about (named by a request, the
        open question or the kept turns), go only when nothing else is left: asked to act on
        that record, the agent must know what it already refused."""
        if not self.omitted:
            excess += len(_OMITTED) + 1
            self.omitted = True
        units = self._units()
        in_use = self._in_use(units)
        asked = [p for p, unit in enumerate(units) if unit.section == "requests"]
        kept = {asked[0], asked[-1]} if asked else set()
        kept |= {
            p
            for p, unit in enumerate(units)
            if unit.section == "declined" and in_use & set(_WORD.findall(unit.text))
        }
        left = drop(
            units,
            excess,
            sizes={name: len(getattr(self, name)) for name in WORTH},
            headings={name: len(heading) + 1 for name, heading in SECTIONS.items()},
            kept=kept,
            in_use={
                p
                for p, unit in enumerate(units)
                if unit.key and getattr(self, unit.section)[unit.index].ident in in_use
            },
        )
        parts: dict[tuple[str, int], list[str]] = {}
        for unit in left:
            parts.setdefault(unit.owner, []).append(unit.text)
        for name in ("ledger", "options"):
            entries: list[Entry] = getattr(self, name)
            entries[:] = [
                attrs.evolve(e, text=", ".join(parts[(name, i)]))
                for i, e in enumerate(entries)
                if (name, i) in parts
            ]
        for name in ("notes", "requests", "done", "declined", "said", "open"):
            lines: list[str] = getattr(self, name)
            lines[:] = [line for i, line in enumerate(lines) if (name, i) in parts]
