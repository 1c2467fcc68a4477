"""Accuracy and speed of ``PIIScrubber`` on labelled data: ``python -m benchmarks.pii_accuracy``.

Data: ``examples/data/pii/presidio_research_synth_dataset_v2.dev.json`` (750 synthetic
sentences with gold spans from microsoft/presidio-research; see the README next to it for
source and licence). Only the entity types the scrubber claims are scored: EMAIL_ADDRESS,
PHONE_NUMBER, CREDIT_CARD, IBAN_CODE, US_SSN, IP_ADDRESS. The scrubber runs with its default
configuration (every built-in entity on, secrets included).

Matching is span-level and overlap-based, per entity type: a gold span counts as found
(recall) when a predicted span of the same type shares at least one character with it; a
predicted span counts as correct (precision) when it overlaps a gold span of the same type.
A prediction that overlaps a gold span of another type (a street number taken for a phone)
is a false positive. F2 = 5PR / (4P + R), recall weighted over precision as fits a scrubber.
The ``exact`` column counts found gold spans whose prediction has exactly the same bounds.

Speed: ``scrub_text`` over every sentence (detection and replacement), best of ``--repeat``
runs, as characters per second of input, in process CPU time (scrubbing is single-threaded
and CPU-bound; CPU time keeps the figure stable on a busy 2-core machine).

Bounded time: the 1 MB adversarial inputs of the tests (which assert only that they
finish) are timed here, one ``scrub_text`` call each.

Options: ``--check`` exits 1 when an accuracy bar is missed; ``--verbose`` lists every
false positive and false negative.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber

DATA: Final = (
    Path(__file__).resolve().parents[1]
    / "examples/data/pii/presidio_research_synth_dataset_v2.dev.json"
)
SCORED: Final = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "US_SSN",
    "IP_ADDRESS",
)
# Accuracy bars: (min precision, min recall) per entity, and chars per second.
BARS: Final = {name: (0.98, 0.99) for name in SCORED} | {"PHONE_NUMBER": (0.90, 0.90)}
MIN_CHARS_PER_SECOND: Final = 1_000_000
KEY: Final = ChatKey("benchmark", "pii-accuracy", "scrubber")


def load(path: Path = DATA) -> list[dict[str, Any]]:
    """The labelled records: ``{"full_text", "spans": [{"entity_type", "start_position",
    "end_position", ...}], ...}``."""
    with path.open(encoding="utf-8") as f:
        records: list[dict[str, Any]] = json.load(f)
    return records


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def score(records: Sequence[dict[str, Any]], scrubber: PIIScrubber) -> dict[str, dict[str, Any]]:
    """Per entity: gold, predicted, true positives both ways, exact bounds, and examples."""
    stats: dict[str, dict[str, Any]] = {
        name: {"gold": 0, "pred": 0, "found": 0, "correct": 0, "exact": 0, "fp": [], "fn": []}
        for name in SCORED
    }
    for record in records:
        text = record["full_text"]
        gold = [
            (s["start_position"], s["end_position"], s["entity_type"])
            for s in record["spans"]
            if s["entity_type"] in stats
        ]
        pred = [d for d in scrubber.detect(text) if d.entity in stats]
        for start, end, entity in gold:
            row = stats[entity]
            row["gold"] += 1
            hits = [(p.start, p.end) for p in pred if p.entity == entity]
            if any(_overlaps((start, end), h) for h in hits):
                row["found"] += 1
                row["exact"] += (start, end) in hits
            else:
                row["fn"].append(text[start:end])
        for p in pred:
            row = stats[p.entity]
            row["pred"] += 1
            if any(e == p.entity and _overlaps((p.start, p.end), (s, t)) for s, t, e in gold):
                row["correct"] += 1
            else:
                row["fp"].append(text[p.start : p.end])
    return stats


def throughput(records: Sequence[dict[str, Any]], scrubber: PIIScrubber, repeat: int) -> float:
    """Input characters per second of ``scrub_text`` over all records, best of ``repeat``."""
    texts = [r["full_text"] for r in records]
    chars = sum(len(t) for t in texts)
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for text in texts:
            scrubber.scrub_text(text, KEY)
        best = min(best, time.process_time() - started)
    return chars / best


ADVERSARIAL: Final = {
    '"a@" repeated': "a@" * 500_000,
    "200 k digits": "7" * 200_000,
    '"1-" repeated': "1-" * 500_000,
    "long dotted run": "1." * 500_000,
    '"1 " repeated': "1 " * 500_000,
    "1 MB of words": "lorem ipsum dolor sit amet " * 37_037,
}


def adversarial(scrubber: PIIScrubber) -> str:
    """A markdown table: seconds per adversarial input (one run each)."""
    lines = ["| adversarial input | size | seconds | MB/s |", "|---|---:|---:|---:|"]
    for name, text in ADVERSARIAL.items():
        started = time.process_time()
        scrubber.scrub_text(text, KEY)
        seconds = time.process_time() - started
        lines.append(
            f"| {name} | {len(text):,} | {seconds:.2f} | {len(text) / seconds / 1e6:.1f} |"
        )
    return "\n".join(lines)


def _ratio(a: int, b: int) -> float:
    return a / b if b else 1.0


def table(stats: dict[str, dict[str, Any]], chars_per_second: float) -> tuple[str, bool]:
    """The markdown table and whether every bar is met."""
    lines = [
        "| entity | gold | predicted | precision | recall | F2 | exact bounds | bar (P / R) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    ok = True
    for name in SCORED:
        row = stats[name]
        precision = _ratio(row["correct"], row["pred"])
        recall = _ratio(row["found"], row["gold"])
        f2 = 5 * precision * recall / (4 * precision + recall) if precision + recall else 0.0
        min_p, min_r = BARS[name]
        met = precision >= min_p and recall >= min_r
        ok &= met
        lines.append(
            f"| {name} | {row['gold']} | {row['pred']} | {precision:.3f} | {recall:.3f} "
            f"| {f2:.3f} | {row['exact']}/{row['found']} | {min_p:.2f} / {min_r:.2f} "
            f"{'met' if met else '**missed**'} |"
        )
    speed_met = chars_per_second >= MIN_CHARS_PER_SECOND
    ok &= speed_met
    lines.append("")
    lines.append(
        f"Throughput: {chars_per_second:,.0f} chars/s (bar {MIN_CHARS_PER_SECOND:,}: "
        f"{'met' if speed_met else 'missed'})"
    )
    return "\n".join(lines), ok


# --- free text on the Presidio sample -----------------------------------
#: Our entity -> the Presidio sample's gold type it is scored against. Presidio labels every
#: date and time DATE_TIME, so DATE_OF_BIRTH recall there is bounded by how few are births.
FREE_TEXT: Final = {
    "DATE_OF_BIRTH": "DATE_TIME",
    "STREET_ADDRESS": "STREET_ADDRESS",
    "ZIP_CODE": "ZIP_CODE",
    "PERSON": "PERSON",
    "LOCATION": "GPE",
}


def score_free_text(
    records: Sequence[dict[str, Any]], scrubber: PIIScrubber, entities: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Like :func:`score`, for our free-text entities against their Presidio gold types."""
    stats: dict[str, dict[str, Any]] = {
        name: {"gold": 0, "pred": 0, "found": 0, "correct": 0, "exact": 0, "fp": [], "fn": []}
        for name in entities
    }
    for record in records:
        text = record["full_text"]
        pred = [d for d in scrubber.detect(text) if d.entity in stats]
        for name in entities:
            gold_type = FREE_TEXT[name]
            gold = [
                (s["start_position"], s["end_position"])
                for s in record["spans"]
                if s["entity_type"] == gold_type
            ]
            hits = [(p.start, p.end) for p in pred if p.entity == name]
            row = stats[name]
            for span in gold:
                row["gold"] += 1
                if any(_overlaps(span, h) for h in hits):
                    row["found"] += 1
                    row["exact"] += span in hits
                else:
                    row["fn"].append(text[span[0] : span[1]])
            for h in hits:
                row["pred"] += 1
                if any(_overlaps(h, span) for span in gold):
                    row["correct"] += 1
                else:
                    row["fp"].append(text[h[0] : h[1]])
    return stats


def free_text_table(stats: dict[str, dict[str, Any]], label: str) -> str:
    lines = [
        f"| {label} | gold type | gold | predicted | precision | recall |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, row in stats.items():
        precision = _ratio(row["correct"], row["pred"])
        recall = _ratio(row["found"], row["gold"])
        lines.append(
            f"| {name} | {FREE_TEXT[name]} | {row['gold']} | {row['pred']} "
            f"| {precision:.3f} | {recall:.3f} |"
        )
    return "\n".join(lines)


# --- the airline conversations, labelled by us (examples/data/pii/README.md) -------------------
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
    user_id = conversation["metadata"]["user_id"]
    known: dict[str, list[str]] = {"USER_ID": [user_id]}
    for message in conversation["messages"]:
        if message["role"] != "tool":
            continue
        try:
            data = json.loads(message.get("content") or "")
        except ValueError:
            continue
        if not isinstance(data, dict) or "saved_passengers" not in data:
            continue
        people = [data.get("name", {}), *data.get("saved_passengers", [])]
        for person in people:
            for key in ("first_name", "last_name"):
                if isinstance(person.get(key), str):
                    known.setdefault("PERSON", []).append(person[key])
            if isinstance(person.get("dob"), str):
                known.setdefault("DATE_OF_BIRTH", []).append(person["dob"])
        address = data.get("address", {})
        for key, entity in (
            ("address1", "STREET_ADDRESS"),
            ("address2", "STREET_ADDRESS"),
            ("zip", "ZIP_CODE"),
        ):
            if isinstance(address.get(key), str) and address[key]:
                known.setdefault(entity, []).append(address[key])
        if isinstance(data.get("email"), str):
            known.setdefault("EMAIL_ADDRESS", []).append(data["email"])
        if isinstance(data.get("dob"), str):
            known.setdefault("DATE_OF_BIRTH", []).append(data["dob"])
        break
    return known


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
            f"{_ratio(results[n]['gold'][entity]['found'], results[n]['gold'][entity]['gold']):.3f}"
            for n in names
        ]
        lines.append(f"| {entity} | {first[entity]['gold']} | " + " | ".join(cells) + " |")
    total_gold = sum(r["gold"] for r in first.values())
    cells = [
        f"{_ratio(sum(r['found'] for r in results[n]['gold'].values()), total_gold):.3f}"
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
            cells.append(f"{_ratio(correct, pred):.3f} ({pred})" if pred else "-")
        lines.append(f"| {entity} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ner_recognizer() -> Any:
    """The ``ner`` extra's recognizer, or ``None`` when it is not installed."""
    from storage.errors import ConfigError
    from storage.pii.ner import SpacyRecognizer

    try:
        return SpacyRecognizer()
    except ConfigError:
        return None


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


def ner_throughput(records: Sequence[dict[str, Any]], recognizer: Any) -> float:
    texts = [r["full_text"] for r in records]
    started = time.process_time()
    for text in texts:
        list(recognizer(text))
    return sum(map(len, texts)) / (time.process_time() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DATA, help="labelled JSON file")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs (best is kept)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a bar is missed")
    parser.add_argument("--verbose", action="store_true", help="list every FP and FN")
    parser.add_argument("--no-ner", action="store_true", help="skip the NER columns")
    args = parser.parse_args(argv)

    records = load(args.data)
    scrubber = PIIScrubber(secret="pii-accuracy-benchmark")
    stats = score(records, scrubber)
    speed = throughput(records, scrubber, args.repeat)
    chars = sum(len(r["full_text"]) for r in records)
    print(f"PII accuracy on {args.data.name}: {len(records)} sentences, {chars:,} characters\n")
    text, ok = table(stats, speed)
    print(text)
    print()
    print(adversarial(scrubber))
    free = score_free_text(records, scrubber, ["DATE_OF_BIRTH", "STREET_ADDRESS", "ZIP_CODE"])
    print()
    print(free_text_table(free, "free-text rules"))
    recognizer = None if args.no_ner else ner_recognizer()
    if recognizer is not None:
        with_ner = PIIScrubber(secret="pii-accuracy-benchmark", recognizer=recognizer)
        print()
        print(free_text_table(score_free_text(records, with_ner, ["PERSON", "LOCATION"]), "NER"))
        print(f"\nNER throughput: {ner_throughput(records, recognizer):,.0f} chars/s")
    else:
        print("\nNER: not installed (pip install 'chatlayers[ner]'): no NER columns")
    speed = airline_throughput(scrubber, args.repeat)
    print(f"\nAirline messages scrubbed (text + JSON, rules only): {speed:,.0f} chars/s")
    print("\nAirline conversations (tau-bench, labels in examples/data/pii/):\n")
    results = {name: score_airline(make) for name, make in airline_setups(recognizer).items()}
    print(airline_table(results))
    if args.verbose:
        for name, row in free.items():
            for kind in ("fp", "fn"):
                for value in row[kind]:
                    print(f"presidio {name} {kind.upper()}: {value!r}")
        for setup, result in results.items():
            for name, row in result["predicted"].items():
                for value in row["fp"]:
                    print(f"airline [{setup}] {name} FP: {value!r}")
            for name, row in result["gold"].items():
                for value in row["fn"]:
                    print(f"airline [{setup}] {name} FN: {value!r}")
    if args.verbose:
        for name in SCORED:
            for kind in ("fp", "fn"):
                for value in stats[name][kind]:
                    print(f"{name} {kind.upper()}: {value!r}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
