"""The tau-bench airline part of ``python -m benchmarks.pii_accuracy``: real agent
conversations (text and JSON tool data) with labelled PII, scrubbed with rules only, with the
user's profile as known values, and with NER."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber

__all__ = [
    "AIRLINE_ENTITIES",
    "airline_setups",
    "airline_table",
    "airline_throughput",
    "load_airline",
    "profile_values",
    "ratio",
    "score_airline",
]


def ratio(part: int, whole: int) -> float:
    """``part / whole`` (a recall or a precision); 1.0 when there is nothing to find."""
    return part / whole if whole else 1.0


ROOT: Final = Path(__file__).resolve().parents[1]
AIRLINE: Final = ROOT / "examples/data/tau_bench_airline_gpt4o_trial0.openai.jsonl"
AIRLINE_LABELS: Final = ROOT / "examples/data/pii/tau_airline_pii_labels.jsonl"
AIRLINE_ENTITIES: Final = (
    "PERSON",
    "DATE_OF_BIRTH",
    "STREET_ADDRESS",
    "ZIP_CODE",
    "EMAIL_ADDRESS",
    "USER_ID",
)
_WORD: Final = re.compile(r"\w+")


def load_airline() -> tuple[list[dict[str, Any]], dict[tuple[str, int, str], list[dict[str, Any]]]]:
    """The conversations and their labels by (conversation id, message index, field)."""
    conversations = [json.loads(line) for line in AIRLINE.read_text("utf-8").splitlines()]
    labels: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for line in AIRLINE_LABELS.read_text("utf-8").splitlines():
        row = json.loads(line)
        labels.setdefault((row["conversation"], row["message"], row["field"]), []).append(row)
    return conversations, labels


def profile_values(conversation: dict[str, Any]) -> dict[str, list[str]]:
    """What the application knows about the conversation's user: the profile its
    ``get_user_details`` returns (name, e-mail, date of birth, address, saved passengers) and
    the user id. Passengers the user types in are not in it."""
    known: dict[str, list[str]] = {"USER_ID": [conversation["metadata"]["user_id"]]}
    profile = _user_details(conversation)
    if profile is None:
        return known
    for person in [profile.get("name", {}), *profile.get("saved_passengers", [])]:
        for key in ("first_name", "last_name"):
            if isinstance(person.get(key), str):
                known.setdefault("PERSON", []).append(person[key])
        if isinstance(person.get("dob"), str):
            known.setdefault("DATE_OF_BIRTH", []).append(person["dob"])
    address = profile.get("address", {})
    for key, entity in (
        ("address1", "STREET_ADDRESS"),
        ("address2", "STREET_ADDRESS"),
        ("zip", "ZIP_CODE"),
    ):
        if isinstance(address.get(key), str) and address[key]:
            known.setdefault(entity, []).append(address[key])
    if isinstance(profile.get("email"), str):
        known.setdefault("EMAIL_ADDRESS", []).append(profile["email"])
    if isinstance(profile.get("dob"), str):
        known.setdefault("DATE_OF_BIRTH", []).append(profile["dob"])
    return known


def _user_details(conversation: dict[str, Any]) -> dict[str, Any] | None:
    """The first tool result that is a user's profile (it lists saved passengers)."""
    for message in conversation["messages"]:
        if message["role"] != "tool":
            continue
        try:
            data = json.loads(message.get("content") or "")
        except ValueError:
            continue
        if isinstance(data, dict) and "saved_passengers" in data:
            return data
    return None


def _fields(message: dict[str, Any]) -> list[tuple[str, ChatMessage]]:
    """Each text field of a wire message as a message holding only that field."""
    out: list[tuple[str, ChatMessage]] = []
    role = message["role"]
    if isinstance(message.get("content"), str) and message["content"]:
        if role == "tool":
            m = ChatMessage("tool", message["content"], tool_call_id=message["tool_call_id"])
        else:
            m = ChatMessage(role, message["content"])
        out.append(("content", m))
    for n, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        tool_call = ToolCall(call["id"], function["name"], function["arguments"])
        out.append((f"tool_calls[{n}].arguments", ChatMessage("assistant", None, [tool_call])))
    return out


def _field_text(message: ChatMessage) -> str:
    return message.tool_calls[0].arguments if message.tool_calls else str(message.content)


def _count(word: str, text: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE))


def _record(into: list[tuple[str, str]], entity: str, value: str) -> None:
    into.append((entity, value))


def score_airline(
    make: Callable[[dict[str, Any]], PIIScrubber],
) -> dict[str, dict[str, Any]]:
    """Recall and precision of scrubbing every labelled field of every conversation.

    ``make(conversation)`` returns the scrubber for that conversation. A gold span counts as
    found when every word of its value occurs fewer times in the scrubbed field than in the
    raw one; a replacement counts as correct when its original text shares a word of 2+
    characters with a gold value of that field (so a placeholder over a flight number,
    price, reservation code or time is a false positive).
    """
    conversations, labels = load_airline()
    stats: dict[str, dict[str, Any]] = {
        name: {"gold": 0, "found": 0, "fn": []} for name in AIRLINE_ENTITIES
    }
    predicted: dict[str, dict[str, Any]] = {}
    for conversation in conversations:
        scrubber = make(conversation)
        replaced: list[tuple[str, str]] = []
        scrubber._observer = functools.partial(_record, replaced)
        key = ChatKey(conversation["metadata"]["user_id"], conversation["id"], "airline")
        for index, message in enumerate(conversation["messages"]):
            if message["role"] == "system":
                continue
            for field, single in _fields(message):
                raw = _field_text(single)
                replaced.clear()
                out = _field_text(scrubber(single, key))
                gold = labels.get((conversation["id"], index, field), [])
                gold_words = {w.lower() for g in gold for w in _WORD.findall(g["text"])}
                for g in gold:
                    row = stats[g["entity"]]
                    row["gold"] += 1
                    words = _WORD.findall(g["text"])
                    if all(_count(w, out) < _count(w, raw) for w in words):
                        row["found"] += 1
                    else:
                        row["fn"].append(g["text"])
                for entity, value in replaced:
                    row = predicted.setdefault(entity, {"pred": 0, "correct": 0, "fp": []})
                    row["pred"] += 1
                    value_words = {w.lower() for w in _WORD.findall(value) if len(w) >= 2}
                    if value_words & gold_words:
                        row["correct"] += 1
                    else:
                        row["fp"].append(value)
        scrubber._observer = None
    return {"gold": stats, "predicted": predicted}


def airline_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Recall per labelled entity and precision per predicted entity, one column per setup."""
    names = list(results)
    lines = [
        "| recall (labelled entity) | gold | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    first = results[names[0]]["gold"]
    for entity in AIRLINE_ENTITIES:
        cells = [
            f"{ratio(results[n]['gold'][entity]['found'], results[n]['gold'][entity]['gold']):.3f}"
            for n in names
        ]
        lines.append(f"| {entity} | {first[entity]['gold']} | " + " | ".join(cells) + " |")
    total_gold = sum(r["gold"] for r in first.values())
    cells = [
        f"{ratio(sum(r['found'] for r in results[n]['gold'].values()), total_gold):.3f}"
        for n in names
    ]
    lines.append(f"| **all** | {total_gold} | " + " | ".join(cells) + " |")
    lines += ["", "| precision (placeholders) | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    entities = sorted({e for n in names for e in results[n]["predicted"]})
    for entity in [*entities, "**all**"]:
        cells = []
        for n in names:
            rows = results[n]["predicted"]
            picked = list(rows.values()) if entity == "**all**" else [rows.get(entity)]
            pred = sum(r["pred"] for r in picked if r)
            correct = sum(r["correct"] for r in picked if r)
            cells.append(f"{ratio(correct, pred):.3f} ({pred})" if pred else "-")
        lines.append(f"| {entity} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def airline_setups(recognizer: Any) -> dict[str, Callable[[dict[str, Any]], PIIScrubber]]:
    """Scrubber factories: rules only, rules + the user's profile as known values, + NER."""
    secret = "pii-accuracy-benchmark"
    setups: dict[str, Callable[[dict[str, Any]], PIIScrubber]] = {
        "rules": lambda c: PIIScrubber(secret=secret),
        "rules + known values": lambda c: PIIScrubber(
            secret=secret, known_values=profile_values(c)
        ),
    }
    if recognizer is not None:
        setups["+ NER"] = lambda c: PIIScrubber(
            secret=secret, known_values=profile_values(c), recognizer=recognizer
        )
        setups["rules + NER"] = lambda c: PIIScrubber(secret=secret, recognizer=recognizer)
    return setups


def airline_throughput(scrubber: PIIScrubber, repeat: int) -> float:
    """Input characters per second of scrubbing every airline message (text and JSON)."""
    conversations, _ = load_airline()
    messages = [
        (ChatKey("u", c["id"], "a"), ChatMessage.from_openai(m))
        for c in conversations
        for m in c["messages"]
        if m["role"] != "system"
    ]
    chars = sum(
        len(_field_text(single)) for _, m in messages for _, single in _fields(m.to_openai())
    )
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for key, message in messages:
            scrubber(message, key)
        best = min(best, time.process_time() - started)
    return chars / best
