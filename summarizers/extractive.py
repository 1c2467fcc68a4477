"""``ExtractiveSummarizer``: the default summarizer, offline, deterministic, no model call.

It keeps what an agent needs to carry on (see :mod:`summarizers.notes` for the layout):

- **User requests**: each user message's requests and questions (not its greeting or
  introduction) and every sentence of it that states a fact, quoted; not a reply that only
  allows what was proposed or points back ("Yes, go ahead", "Can you help with that?"), nor
  one that only identifies the user or a record the ledger holds ("My user ID is X.");
  see :mod:`summarizers.sentences`;
- **Done**: each call of a tool that changes something (its name starts with a verb such as
  book, cancel, update, refund, create, place, issue, apply, send, delete, add), its arguments
  and its outcome (``ok`` or the error, quoted): what was booked, cancelled, refunded;
- **Declined**: every refusal of the assistant ("it cannot be canceled for a refund"),
  quoted, after the identifier it is about (:mod:`summarizers.refusals`): asked again, the
  agent should say the same;
- **Assistant said**: decisions and commitments and every sentence stating a fact no tool
  result holds (a computed total), quoted; not its questions to the user, which the record
  answers (the last one, unanswered, is under Open);
- **Ledger**: every identifier, amount and date the tools returned, with what it refers to
  (:mod:`summarizers.ledger`), the newest state of each record; **Options seen**: records
  from lists of results (search results) the conversation did not use later;
- what each PII placeholder stands for (``the user's email address <EMAIL_ADDRESS_3f9a2c1d>``);
- **Open**: the assistant's last question, when the summarized part ends waiting for the user.

Text from users and tools is only ever quoted (:mod:`summarizers.quoting`): an instruction in
a tool result stays something the tool said. A tool result the summarizing layer cleared from
the view (``metadata["chatlayers"]["cleared"]``: the prior summary holds it, or the same call
is made again later) adds nothing but, for an action, its done line.

Over ``max_chars``, options and then ledger entries are shortened to their facts (least
recently used first); then whole lines go, the least worth per character first (what the
line's section is worth and the facts it alone states, twice that for a record a request,
the open question or the kept turns name, see :meth:`Notes.bound`), the user's opening
and newest requests last: what the conversation is for, and what is asked now. The
summary's metadata records the ids of the messages it covers and, for each fact it states,
the id of the message it came from (``metadata["chatlayers"]["sources"]``; never in the
text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import attrs

from storage.errors import ConfigError
from storage.history import split_turns
from storage.message import ChatMessage, ToolCall
from summarizers.facts import fact_keys, has_fact
from summarizers.ledger import Entry, compact_value, json_entries, label_of, parse_json
from summarizers.notes import Notes
from summarizers.quoting import quote
from summarizers.refusals import refusal_lines, same_refusal
from summarizers.render import (
    SummaryPlan,
    build_result,
    content_text,
    plan_summary,
    prior_facts,
    shorten,
    source_text,
)
from summarizers.sentences import (
    asks_only,
    assistant_lines,
    identifies_only,
    is_reply_only,
    last_question,
    plain_sentences,
    request_text,
    restates,
    sentences,
    user_line,
    without_identifications,
)

__all__ = [
    "OMITTED",
    "SUMMARY_ROLES",
    "ExtractiveSummarizer",
    "is_action",
    "request_text",
    "result_text",
]

SUMMARY_ROLES: Final = frozenset({"system", "user", "assistant"})
OMITTED: Final = "- … (older lines omitted)"
_PLACEHOLDERS: Final = "placeholders"

# The scrubber's placeholder shape (storage.pii.placeholders.PLACEHOLDER_RE); not imported so
# the default summarizer does not load the PII package.
_PLACEHOLDER: Final = re.compile(r"<([A-Z][A-Z0-9_]{0,63})_[0-9a-f]{8}>")
_ACTION_VERBS: Final = frozenset(
    [
        "book",
        "cancel",
        "update",
        "modify",
        "change",
        "edit",
        "refund",
        "create",
        "place",
        "issue",
        "apply",
        "send",
        "delete",
        "remove",
        "add",
        "transfer",
        "pay",
        "charge",
        "upgrade",
        "return",
        "submit",
        "confirm",
        "set",
        "reset",
        "approve",
        "close",
        "write",
        "insert",
        "register",
        "schedule",
        "reserve",
        "purchase",
        "buy",
        "order",
        "move",
    ]
)
_ERROR: Final = re.compile(r"^\W*(error|failed|failure|exception|denied|invalid|not )", re.I)
_TOOL_TEXT: Final = 100  # characters of a non-JSON tool result kept, quoted


def is_action(name: str) -> bool:
    """Whether a tool named ``name`` changes something: its first word is a verb such as
    book, cancel, update, refund (``cancel_reservation``, ``bookFlight``, ``issue-refund``)."""
    words = re.findall(r"[a-z]+|[A-Z][a-z]*", name)
    return bool(words) and words[0].lower() in _ACTION_VERBS


@attrs.frozen(kw_only=True)
class ExtractiveSummarizer:
    """Summarize by extraction: requests, actions, decisions and a ledger of facts; no model.

    The output depends only on the input (the summary message's ``id`` included). The
    conversation's leading system prompt is kept verbatim ahead of the body and not counted in
    ``max_chars``; the prior summary's lines are merged with the new ones.

    Args:
        max_chars: bound on the summary body in characters (>= 100); default 2000.
        sentence_chars: bound on each extracted request or sentence in characters (>= 10);
            default 160.
        summary_role: role of the summary message: ``"system"`` (default), ``"user"`` or
            ``"assistant"``.

    Raises:
        ConfigError: an argument is out of range.
    """

    max_chars: int = 2000
    sentence_chars: int = 160
    summary_role: str = "system"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.max_chars, int) or self.max_chars < 100:
            raise ConfigError(f"max_chars must be an int >= 100, got {self.max_chars!r}")
        if not isinstance(self.sentence_chars, int) or self.sentence_chars < 10:
            raise ConfigError(f"sentence_chars must be an int >= 10, got {self.sentence_chars!r}")
        if self.summary_role not in SUMMARY_ROLES:
            raise ConfigError(
                f"summary_role must be one of {sorted(SUMMARY_ROLES)}, got {self.summary_role!r}"
            )

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        """Return ``[summary] + the last keep_last turns``, or a copy of ``buffer`` when it has
        at most ``keep_last`` turns after its prior summary (nothing to summarize).

        Raises:
            ValueError: ``keep_last`` is negative.
        """
        plan = plan_summary(buffer, keep_last)
        if plan is None:
            return list(buffer)
        notes, sources = self.notes(plan)
        body = notes.bound(self.max_chars)
        facts = {fact: source for fact, source in sources.items() if fact in body}
        return build_result(
            plan, body, role=self.summary_role, summarizer="extractive", facts=facts
        )

    def describe(self) -> str:
        """One line for a stack's ``describe()``: ``ExtractiveSummarizer(max_chars=2000)``."""
        return f"ExtractiveSummarizer(max_chars={self.max_chars})"

    def summary_body(self, plan: SummaryPlan) -> str:
        """The new summary body for ``plan``, bounded by ``max_chars``."""
        return self.notes(plan)[0].bound(self.max_chars)

    def notes(self, plan: SummaryPlan) -> tuple[Notes, dict[str, str]]:
        """The prior summary's notes updated with the summarized messages, and the source of
        each fact (fact as written → id of the message it came from; the prior summary's
        sources first)."""
        notes = Notes.parse(plan.prior_text)
        sources = prior_facts(plan.prior_meta)
        prefix, turns = split_turns(plan.to_summarize)
        previous: dict[str, Mapping[str, object]] = {}
        for segment in ([prefix] if prefix else []) + turns:
            self._turn(segment, notes, sources, previous)
        _placeholders(notes, plan.to_summarize)
        _drop_identifications(notes)
        _drop_restated(notes)
        notes.focus(" ".join(source_text(m) for m in plan.kept))
        last = plan.to_summarize[-1]
        if last.role == "assistant" and content_text(last).rstrip().endswith("?"):
            question = last_question(content_text(last), self.sentence_chars)
            notes.open = [f"assistant asked: {quote(question)}"]
        return notes, sources

    def _turn(
        self,
        turn: Sequence[ChatMessage],
        notes: Notes,
        sources: dict[str, str],
        previous: dict[str, Mapping[str, object]],
    ) -> None:
        pending: dict[str | None, list[ToolCall]] = {}
        for message in turn:
            text = content_text(message)
            if message.role != "tool":
                notes.touch(text, choose=message.role == "user")
                for call in message.tool_calls:
                    notes.touch(call.arguments, choose=True)
            if message.role == "user":
                self._user(message, text, notes, sources, answered=_answered(turn))
            elif message.role == "assistant":
                for call in message.tool_calls:
                    pending.setdefault(call.id, []).append(call)
                self._assistant(message, text, notes, sources)
            elif message.role == "tool":
                calls = pending.get(message.tool_call_id)
                found = calls.pop(0) if calls else None
                self._answer(found, message, notes, sources, previous)
        for calls in pending.values():  # calls whose result is not in the buffer
            for call in calls:
                if is_action(call.name):
                    line = f"{call.name}({_arguments(call, previous)}) -> (no result)"
                    notes.add("done", line)

    def _answer(
        self,
        call: ToolCall | None,
        message: ChatMessage,
        notes: Notes,
        sources: dict[str, str],
        previous: dict[str, Mapping[str, object]],
    ) -> None:
        cleared = _cleared(message)
        if cleared is None:
            self._result(call, message, notes, sources, previous)
        elif cleared == "summary" and call is not None and is_action(call.name):
            # What it returned is in the prior summary already; the action is news.
            args = _arguments(call, previous)
            notes.add("done", f"{call.name}({args}) -> (result as in the ledger)")

    def _user(
        self,
        message: ChatMessage,
        text: str,
        notes: Notes,
        sources: dict[str, str],
        *,
        answered: bool,
    ) -> None:
        # "Yes, please go ahead." answers the question before it: the action it allowed is
        # under Done.
        if is_reply_only(text):
            return
        line = user_line(text, self.sentence_chars) or "(no content)"
        if is_reply_only(line.strip('"')):
            return  # what is left once the identification goes only allows what was proposed
        if answered and asks_only(line):
            return  # neither a goal nor open: the answer's facts are in the ledger
        notes.add("requests", line)
        _note_sources(line, message.id, sources)

    def _assistant(
        self, message: ChatMessage, text: str, notes: Notes, sources: dict[str, str]
    ) -> None:
        limit = self.sentence_chars
        # Rendering the notes costs: not for a message of tool calls only.
        if text.strip():
            for line in assistant_lines(text, limit, notes.render()):
                notes.add("said", line)
                _note_sources(line, message.id, sources)
            records = {e.ident for e in notes.ledger if e.ident is not None}
            for line in refusal_lines(plain_sentences(text), limit, records):
                notes.declined = [d for d in notes.declined if not same_refusal(line, d)]
                notes.add("declined", line)
                _note_sources(line, message.id, sources)
        for call in message.tool_calls:
            thought = _thought(call, limit)
            if thought:
                notes.add("said", thought)

    def _result(
        self,
        call: ToolCall | None,
        message: ChatMessage,
        notes: Notes,
        sources: dict[str, str],
        previous: dict[str, Mapping[str, object]],
    ) -> None:
        text = content_text(message)
        name = call.name if call is not None else (message.name or "tool")
        arguments = parse_json(call.arguments) if call is not None else None
        value = parse_json(text)
        entries = None
        if value is not None:
            entries = json_entries(
                value, name, message.id, arguments if isinstance(arguments, Mapping) else None
            )
        if call is not None and is_action(call.name):
            if entries:
                # The ledger holds the new state: the line names it, and the identities.
                keys = ", ".join(entry.key for entry in entries[:3])
                line = f"{call.name}({_identities(call)}) -> ok: {keys}"
                notes.add("done", line)
                previous[call.name] = arguments if isinstance(arguments, Mapping) else {}
                notes.add_entries(entries)
                for entry in entries:
                    _note_sources(entry.line, entry.source, sources)
                _note_sources(line, message.id, sources)
                return
            if value is not None and not _ERROR.match(text):
                outcome = "ok"
            elif not text.strip():
                outcome = "(no result)"
            else:
                failed = "failed: " if _ERROR.match(text) else ""
                outcome = failed + quote(result_text(text, _TOOL_TEXT))
            line = f"{call.name}({_arguments(call, previous)}) -> {outcome}"
            notes.add("done", line)
            _note_sources(line, message.id, sources)
        elif entries is None and not (call is not None and call.name.lower() == "think"):
            # A read whose result is not a record: one entry named after the call (a think
            # call's thought is among the assistant's lines).
            label = f"{name}({_arguments(call)})" if call is not None else name
            result = quote(result_text(text, _TOOL_TEXT)) if value is None and text.strip() else ""
            if value is not None:
                result = compact_value(value)
            entries = [Entry(label.replace(": ", ":"), result or "(no result)", message.id, True)]
        if entries:
            notes.add_entries(entries)
            for entry in entries:
                _note_sources(entry.line, entry.source, sources)


def _answered(turn: Sequence[ChatMessage]) -> bool:
    """Whether the assistant's last words in ``turn`` (a user message and what followed) are
    a reply, not a question back."""
    for message in reversed(turn[1:]):
        words = content_text(message).rstrip() if message.role == "assistant" else ""
        if words:
            return not words.endswith("?")
    return False


def _cleared(message: ChatMessage) -> str | None:
    """Why the summarizing layer cleared a tool result from the view
    (``metadata["chatlayers"]["cleared"]``: ``"summary"``, its facts are in the prior
    summary; ``"repeated"``, the same call follows), ``None`` for a result as returned."""
    marker = message.metadata.get("chatlayers")
    reason = marker.get("cleared") if isinstance(marker, Mapping) else None
    return reason if isinstance(reason, str) else None


def _arguments(
    call: ToolCall | None, previous: dict[str, Mapping[str, object]] | None = None
) -> str:
    """A call's arguments, compactly; with ``previous`` (the last arguments of each action),
    only the identities and what changed since the same action's last call."""
    if call is None:
        return ""
    parsed = parse_json(call.arguments)
    if not isinstance(parsed, Mapping):
        return quote(call.arguments, _TOOL_TEXT) if call.arguments.strip() else ""
    if previous is None:
        return compact_value(parsed)
    last = previous.get(call.name)
    previous[call.name] = parsed
    if last is None:
        return compact_value(parsed)
    changed = {k: v for k, v in parsed.items() if label_of(str(k)) is not None or last.get(k) != v}
    same = len(changed) < len(parsed)
    return compact_value(changed) + (", rest as before" if same else "")


def result_text(text: str, limit: int) -> str:
    """What a tool result that is not JSON says, in at most ``limit`` characters: all of it
    when short, else its lines and sentences that state a fact (an id, an amount, a date), in
    order, else its opening."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    picked: list[str] = []
    size = 0
    for piece in sentences(text):
        if has_fact(piece) and size + len(piece) + 1 <= limit:
            picked.append(" ".join(piece.split()))
            size += len(picked[-1]) + 1
    return " … ".join(picked) if picked else shorten(flat, limit)


def _identities(call: ToolCall) -> str:
    """The identity arguments of a call (``reservation_id=H9ZU1C``), compactly."""
    parsed = parse_json(call.arguments)
    if not isinstance(parsed, Mapping):
        return ""
    return compact_value({k: v for k, v in parsed.items() if label_of(str(k)) is not None})


def _thought(call: ToolCall, limit: int) -> str:
    """A ``think`` call's thought, as something the assistant noted."""
    if call.name.lower() != "think":
        return ""
    parsed = parse_json(call.arguments)
    values = [v for v in parsed.values() if isinstance(v, str)] if isinstance(parsed, dict) else []
    return f"(thought) {quote(' '.join(values), limit)}" if values else ""


def _drop_identifications(notes: Notes) -> None:
    """Leave out request lines that only identify the user or a record the ledger holds:
    the ledger entry says it, with what it refers to (a line without facts, the user
    lacking an identifier, once the ledger holds anything looked up); and such sentences
    of the other request lines."""
    if not notes.requests or not notes.ledger:
        return
    known = set(fact_keys(" ".join(entry.line for entry in notes.ledger)))
    kept = [
        without_identifications(line, known)
        for line in notes.requests
        if not (identifies_only(line) and set(fact_keys(line)) <= known)
    ]
    # "My user ID is X. Yes, go ahead." leaves a consent, which the Done line says.
    notes.requests = [line for line in kept if not is_reply_only(line.strip('"'))]


def _drop_restated(notes: Notes) -> None:
    """Leave out a request line a later one restates with its facts (:func:`restates`):
    the opener "I'd like to change my flight reservation." once the user named which."""
    lines = notes.requests
    notes.requests = [
        line
        for index, line in enumerate(lines)
        if not any(restates(later, line) for later in lines[index + 1 :])
    ]


def _note_sources(line: str, source: str, sources: dict[str, str]) -> None:
    for value in fact_keys(line).values():
        sources.setdefault(value, source)


def _placeholders(notes: Notes, messages: Iterable[ChatMessage]) -> None:
    """The ledger's first entry, ``placeholders``: what each PII placeholder stands for."""
    old = next((e for e in notes.ledger if e.key == _PLACEHOLDERS), None)
    entries = [e for e in (old.text if old else "").split("; ") if e]
    count = len(entries)
    seen = {entry.rsplit(" ", 1)[-1] for entry in entries}
    for message in messages:
        text = content_text(message) + "".join(c.arguments for c in message.tool_calls)
        for match in _PLACEHOLDER.finditer(text):
            if match.group(0) not in seen:
                seen.add(match.group(0))
                label = match.group(1).lower().replace("_", " ")
                # "an email address", "an IP address" ("us ssn" takes "a": a consonant sound)
                who = (
                    "the user's" if message.role == "user" else "an" if label[0] in "aeio" else "a"
                )
                entries.append(f"{who} {label} {match.group(0)}")
    if len(entries) > count:
        notes.ledger = [e for e in notes.ledger if e.key != _PLACEHOLDERS]
        notes.ledger.insert(0, Entry(_PLACEHOLDERS, "; ".join(entries)))
