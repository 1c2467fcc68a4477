"""Build ``tau_airline_pii_labels.jsonl``: the personal data in the shipped tau-bench airline
conversations, as character spans (run from the repository root; deterministic).

How the labels are made (see README.md next to this file):

1. Each conversation's people are read from its own tool traffic: every JSON object in a tool
   result or tool-call argument that has ``first_name``/``last_name``/``dob`` (users,
   passengers, saved passengers), a user's ``address`` (``address1``, ``address2``, ``zip``)
   and ``email``, plus the conversation's ``user_id``.
2. Every occurrence of those values in any message text (content, tool-call arguments, tool
   results; the system prompt is policy text and has none) is a span: case-insensitive, on
   word boundaries, a full name ``First Last`` as one PERSON span, a date of birth also in
   the spellings people type (``April 5, 1990``, ``04/05/1990``, ...).
3. Overlaps keep the longest span. A reviewer then read a sample of spans in context (see
   README.md for what was checked and what the labels do not cover).

Entities: PERSON, DATE_OF_BIRTH, STREET_ADDRESS, ZIP_CODE, EMAIL_ADDRESS, USER_ID.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "tau_bench_airline_gpt4o_trial0.openai.jsonl"
OUT = HERE / "tau_airline_pii_labels.jsonl"
# People named only in a user turn (no tool call or result has them), found by reading every
# capitalised word inside a user sentence that the tool traffic does not explain.
MANUAL: dict[str, dict[str, set[str]]] = {
    "tau_airline_gpt4o_task009_trial0": {"PERSON": {"Aarav", "Evelyn"}},
}


def _objects(value: Any) -> Iterator[dict[str, Any]]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _json(text: str | None) -> Any:
    if not text or text.lstrip()[:1] not in "[{":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def date_spellings(iso: str) -> list[str]:
    """``1990-04-05`` and the ways people write it."""
    try:
        d = date.fromisoformat(iso)
    except ValueError:
        return [iso]
    month, short = d.strftime("%B"), d.strftime("%b")
    day = d.day
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return [
        iso,
        f"{d.month:02d}/{day:02d}/{d.year}",
        f"{d.month}/{day}/{d.year}",
        f"{month} {day}, {d.year}",
        f"{month} {day} {d.year}",
        f"{month} {day}{suffix}, {d.year}",
        f"{short} {day}, {d.year}",
        f"{day} {month} {d.year}",
        f"{day}{suffix} {month} {d.year}",
    ]


def values(conversation: dict[str, Any]) -> dict[str, set[str]]:
    """Entity -> the personal values this conversation's tool traffic reveals."""
    found: dict[str, set[str]] = {
        k: set() for k in ("PERSON", "DATE_OF_BIRTH", "STREET_ADDRESS", "ZIP_CODE", "EMAIL_ADDRESS")
    }
    found["USER_ID"] = {conversation["metadata"]["user_id"]}
    payloads = []
    for message in conversation["messages"]:
        if message["role"] == "tool":
            payloads.append(_json(message.get("content")))
        for call in message.get("tool_calls") or []:
            payloads.append(_json(call["function"]["arguments"]))
    for payload in payloads:
        for obj in _objects(payload):
            first, last = obj.get("first_name"), obj.get("last_name")
            if isinstance(first, str) and isinstance(last, str):
                found["PERSON"].update({first, last, f"{first} {last}"})
            if isinstance(obj.get("dob"), str):
                found["DATE_OF_BIRTH"].update(date_spellings(obj["dob"]))
            for key, entity in (("address1", "STREET_ADDRESS"), ("address2", "STREET_ADDRESS")):
                if isinstance(obj.get(key), str) and obj[key]:
                    found[entity].add(obj[key])
            if isinstance(obj.get("zip"), str) and "address1" in obj:
                found["ZIP_CODE"].add(obj["zip"])
            if isinstance(obj.get("email"), str):
                found["EMAIL_ADDRESS"].add(obj["email"])
            if isinstance(obj.get("user_id"), str):
                found["USER_ID"].add(obj["user_id"])
    for entity, extra in MANUAL.get(conversation["id"], {}).items():
        found[entity] |= extra
    return found


def fields(message: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field name, text) of every text a message carries."""
    if isinstance(message.get("content"), str) and message["content"]:
        yield "content", message["content"]
    for n, call in enumerate(message.get("tool_calls") or []):
        yield f"tool_calls[{n}].arguments", call["function"]["arguments"]


def spans(text: str, found: dict[str, set[str]]) -> list[tuple[int, int, str]]:
    candidates: list[tuple[int, int, str]] = []
    for entity, texts in found.items():
        for value in texts:
            pattern = re.compile(rf"(?<!\w){re.escape(value)}(?!\w)", re.IGNORECASE)
            candidates.extend((m.start(), m.end(), entity) for m in pattern.finditer(text))
    # Longest first, then keep spans that do not overlap a kept one.
    candidates.sort(key=lambda s: (-(s[1] - s[0]), s[0]))
    kept: list[tuple[int, int, str]] = []
    for start, end, entity in candidates:
        if all(end <= s or start >= e for s, e, _ in kept):
            kept.append((start, end, entity))
    return sorted(kept)


def main() -> None:
    rows = []
    for line in SOURCE.read_text(encoding="utf-8").splitlines():
        conversation = json.loads(line)
        found = values(conversation)
        for index, message in enumerate(conversation["messages"]):
            if message["role"] == "system":
                continue
            for field, text in fields(message):
                for start, end, entity in spans(text, found):
                    rows.append(
                        {
                            "conversation": conversation["id"],
                            "message": index,
                            "role": message["role"],
                            "field": field,
                            "start": start,
                            "end": end,
                            "entity": entity,
                            "text": text[start:end],
                        }
                    )
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} spans -> {OUT.name}")


if __name__ == "__main__":
    main()
