"""Which sentences of a message an extractive summary keeps, and how they read.

- a **user** message keeps its requests and questions and every sentence that states a fact
  (:func:`user_line`); a reply that only allows what was proposed ("Yes, please go ahead")
  or only points back ("Can you help with that?") keeps nothing (:func:`is_reply_only`): the
  action it allowed is under Done, what it refers to is in the lines around it (a request
  followed by "Can you help with that?" is the line); an answered question for information
  ("How much was ORD-40613 in total?", :func:`asks_only`) leaves the summary, and so does
  the user saying which identifier they lack once the ledger holds what was looked up
  (:func:`identifies_only`), and an opener a later request restates with its facts
  (:func:`restates`);
- an **assistant** message keeps its decisions and commitments and the sentences stating a
  fact the summary does not hold yet (:func:`assistant_lines`); its questions to the user
  were answered by the time they are summarized (an unanswered last question is under Open),
  announcing a lookup ("I have found your profile.") is not a decision, and its refusals
  are kept apart (:mod:`summarizers.refusals`).

Text is only ever quoted (:mod:`summarizers.quoting`): what users and tools said is data.
"""

from __future__ import annotations

import json
import re
from typing import Final

from summarizers.facts import fact_keys, fact_spans, has_fact
from summarizers.quoting import quote
from summarizers.refusals import is_refusal
from summarizers.render import SENTENCE_END, first_sentence, shorten

__all__ = [
    "asks_only",
    "assistant_lines",
    "identifies_only",
    "is_reply_only",
    "last_question",
    "plain_sentences",
    "request_text",
    "restates",
    "sentences",
    "user_line",
    "without_identifications",
]

_GREETING: Final = re.compile(
    r"^\W*(hi|hello|hey|hiya|howdy|greetings|good (morning|afternoon|evening|day)|"
    r"thanks?( you)?( so much| very much)?|thank you|ok(ay)?|sure|great|perfect|yes|no)\b"
    r"[\s,!.\w]{0,20}$",
    re.IGNORECASE,
)
# Thanks for what was done ("Thank you for helping with that cancellation."): not a request.
_THANKS: Final = re.compile(r"^\W*(thanks|thank you|i (really )?appreciate)\b", re.IGNORECASE)
# "I'm Omar Rossi", "My user ID is ...": who the user is, not what they want ("I'm having
# trouble with my booking" is not one: after "I'm" / "this is" comes a name, capitalized).
_INTRODUCTION: Final = re.compile(
    r"^\W*((i'?m|i am|this is)\s+(?-i:[A-Z])|my name is|"
    r"my (user ?id|email|e-mail|phone|number|id)( is)?\b|here is my\b|you can reach me\b)",
    re.IGNORECASE,
)
# A reply that allows what was proposed ("Yes, please go ahead with the booking."): the action
# it allowed is under Done.
_CONSENT: Final = re.compile(
    r"^\W*(yes|yeah|yep|ok(ay)?|sure|alright|all right|sounds good|that works|correct|"
    r"(that'?s|that is) (fine|correct|right|good)|(please |let'?s |i'?d like to )?"
    r"(go ahead|proceed))\b",
    re.IGNORECASE,
)
_CONDITION: Final = re.compile(r"\b(but|instead|however|except|only|not|n't|unless|if)\b", re.I)
# What is left of a sentence that only identifies the user once its facts are taken out.
_IDENTIFYING_WORDS: Final = frozenset(
    [
        "sure",
        "yes",
        "ok",
        "okay",
        "well",
        "of",
        "course",
        "here",
        "it",
        "it's",
        "its",
        "is",
        "my",
        "the",
        "a",
        "user",
        "id",
        "username",
        "account",
        "reservation",
        "booking",
        "order",
        "customer",
        "number",
        "email",
        "name",
        "and",
        "i",
        "i'm",
        "am",
        "this",
        "that",
        "can",
        "provide",
        "you",
        "go",
    ]
)
# Words that say nothing of what a request is about (with the vague ones): see restates().
_FRAME_WORDS: Final = frozenset(
    {"i'd", "i'm", "like", "want", "need", "wish", "my", "a", "an", "the", "to", "of", "on", "and"}
    | {"make", "some", "few", "hoping", "was", "am", "looking", "upcoming", "current"}
)
# The user lacking an identifier ("I don't remember the reservation ID", "I'll provide it
# shortly"): moot once the ledger holds what was looked up.
_LACKS: Final = re.compile(
    r"\b(don't|do not|can't|cannot|didn't) (have|remember|recall|know|find)\b|"
    r"\bnot sure (about|of)\b|\b(i'll|i will) (provide|find|get|look|try|work)\b|"
    r"\b(managed to|trying to|try to) (find|locate|get)\b|\bforgot\b",
    re.IGNORECASE,
)
_ID_WORD: Final = re.compile(r"\b(id|ids|number|code)\b", re.IGNORECASE)
_VAGUE_WORDS: Final = frozenset(
    [
        "can",
        "could",
        "would",
        "will",
        "you",
        "we",
        "i",
        "me",
        "us",
        "please",
        "help",
        "assist",
        "with",
        "that",
        "this",
        "it",
        "those",
        "them",
        "does",
        "do",
        "did",
        "is",
        "are",
        "be",
        "done",
        "anything",
        "something",
        "there",
        "any",
        "way",
        "what",
        "else",
        "how",
        "about",
        "also",
        "then",
        "now",
        "so",
        "well",
        "ok",
        "okay",
        "got",
        "in",
        "the",
        "meantime",
        "to",
        "move",
        "forward",
        "proceed",
        "go",
        "ahead",
        "check",
        "into",
        "look",
        "work",
        "works",
        "thanks",
        "thank",
        "for",
        "information",
        "request",
        # Asking to look again or to wait ("Can you check again?", "Can you hold on for a
        # moment?"): what is looked at is in the lines around it.
        "again",
        "once",
        "more",
        "try",
        "double",
        "hold",
        "on",
        "wait",
        "a",
        "moment",
        "second",
        "minute",
        "let",
    ]
)
# Asking for something ("Could you...", "please", "I'd like", "I want"), anywhere in a sentence.
_ASKING: Final = (
    r"\b(can|could|would|will) you\b|\bplease\b|\bi('d| would)( also| really)? like\b|"
    r"\bi( also| just| still)? (want|need|wish)\b"
)
_REQUEST: Final = re.compile(
    _ASKING + r"|\bhelp me\b|\bhow (do|can|to)\b|^\W*(what|why|where|when|which|who|how|is|"
    r"are|do|does|book|cancel|change|find|show|tell|give|send|update|fix|add|remove|check|get|"
    r"make)\b",
    re.IGNORECASE,
)
# What makes a sentence more than an identification: it asks for something to be done.
_REQUEST_VERB: Final = re.compile(
    _ASKING + r"|\b(cancel|change|book|modify|upgrade|downgrade|refund|remove|add)\b|\?",
    re.IGNORECASE,
)
# Decisions and commitments in the assistant's words.
_COMMITMENT: Final = re.compile(
    r"\b((i will|i'll)(?! need| be (here|happy|glad|ready))|i have|i've|we will|has been|"
    r"have been|successfully|confirmed?|"
    r"booked|cancell?ed|refunded|updated|upgraded|charged|unable|cannot|can't|not possible|"
    r"not eligible)\b",
    re.IGNORECASE,
)
# The assistant asking the user: answered by the time it is summarized (the user's reply is in
# the record; an unanswered last question is under Open).
_ASKS: Final = re.compile(
    r"\b(would you like|shall i|do you want|please (confirm|provide|let me know)|let me know)\b",
    re.IGNORECASE,
)
# The assistant announcing a lookup ("I have found your profile.", "I'll check the details.",
# "Here are the flights:"): not a decision; what it found is in the ledger.
_LOOKUP: Final = re.compile(
    r"\b(i have|i've) (now )?(found|retrieved|located|pulled up|checked|looked up|reviewed)\b|"
    r"\b(i will|i'll|let me) (now |first |quickly )?(check|retrieve|search|look|verify|review|"
    r"fetch|get|pull)\b|\bonce i have\b|^\W*here (are|is)\b",
    re.IGNORECASE,
)
# A question for information ("How much was ORD-40613 in total?", "Sorry, what was the
# tracking number again?"): once the assistant answered it, it is neither a goal nor open.
# "What about reservation XEWRD9?" turns to something new: a request.
_INFO_QUESTION: Final = re.compile(
    r"^\W*((sorry|ok(ay)?|and|also|so|btw|by the way),?\s+)?"
    r"(what(?! about| if)|what's|which|when|where|who|whose|how (much|many|long|far|often))\b",
    re.IGNORECASE,
)
_MARKUP: Final = re.compile(r"\*\*|__|`+|^#+\s*", re.MULTILINE)  # markdown emphasis, headings
_MIN_REQUEST_CHARS: Final = 40


def request_text(text: str, limit: int) -> str:
    """The request in a user message: its questions and requests, not its greeting or the
    introduction before it, whitespace collapsed, at most ``limit`` characters.

    Falls back to the first sentence that is neither a greeting nor an introduction, then to
    the opening sentences (:func:`summarizers.render.first_sentence`).
    """
    found = sentences(text)
    if not found:
        return ""
    plain = [s for s in found if not _is_preamble(s)]
    # "Can you help with that?" only points back: the sentence it points to is the request.
    clear = [s for s in plain if not is_vague(s)]
    picked = [s for s in clear if s.endswith("?") or _REQUEST.search(_plain(s))]
    plain = clear or plain
    if not picked:
        if not plain:
            return first_sentence(text, limit)
        # No explicit request: the opening sentences after the greeting, like first_sentence.
        for sentence in plain:
            if picked and len(" ".join(picked)) >= _MIN_REQUEST_CHARS:
                break
            picked.append(sentence)
    return shorten(" ".join(picked), limit)


def sentences(text: str) -> list[str]:
    """The sentences (or lines) of ``text``, stripped, empty ones left out."""
    return [s.strip() for s in SENTENCE_END.split(text) if s.strip()]


def _is_preamble(sentence: str) -> bool:
    """A greeting, thanks or introduction: what comes before a request, not the request."""
    text = _plain(sentence)
    if _GREETING.match(text) or _INTRODUCTION.match(text):
        return True
    return bool(_THANKS.match(text)) and not (text.endswith("?") or _REQUEST.search(text))


def _plain(text: str) -> str:
    """``text`` with typographic apostrophes (U+2019) as ASCII ones, so "I'd like" matches."""
    return text.replace("\u2019", "'")


def _words(text: str) -> list[str]:
    """The words of ``text``, lower-cased, apostrophes (also typographic ones) kept."""
    return re.findall(r"[a-z']+", _plain(text).lower())


def user_line(text: str, limit: int) -> str:
    """The user's requests and questions, and every sentence of the message stating a fact,
    in the message's order, quoted (at most twice ``limit`` characters inside the quotes)."""
    request = request_text(text, limit)
    picked = [
        shorten(s, limit)
        for s in sentences(text)
        if has_fact(s) or (s in request and not _GREETING.match(_plain(s)) and not is_vague(s))
    ]
    line = " ".join(picked) if picked else request
    return quote(line, 2 * limit) if line else ""


def is_vague(sentence: str) -> bool:
    """A sentence that only points back ("Can you help with that?", "Does that work?"): no
    fact, and no word but :data:`_VAGUE_WORDS`."""
    if has_fact(sentence):
        return False
    words = _words(sentence)
    return bool(words) and all(word in _VAGUE_WORDS for word in words)


def is_consent(sentence: str) -> bool:
    """A greeting or thanks, or a reply allowing what was proposed, with no question or
    condition in it."""
    sentence = _plain(sentence)
    if _GREETING.match(sentence):
        return True
    return bool(_CONSENT.match(sentence)) and not (
        sentence.endswith("?") or _CONDITION.search(sentence)
    )


def identifies_only(line: str) -> bool:
    """Whether a request line (quoted) only tells who the user is or which record they mean
    ("Sure, my user ID is mia_li_3668."), or which identifier they cannot give ("I don't
    have my reservation ID with me."): each sentence either states a fact and, without its
    facts, has only words like my, user, id, is; or says the user lacks an identifier."""
    found = sentences(line.strip('"'))
    return bool(found) and all(_identifies(sentence) for sentence in found)


def without_identifications(line: str, known: set[str]) -> str:
    """A quoted request line without its sentences that only identify the user or a record
    (:func:`identifies_only`) by facts in ``known`` (the ledger's fact keys): "My user ID is
    mia_li_3668. I want to cancel XEHM4B." keeps the request. ``line`` itself when no such
    sentence is there, or nothing else is left (or it is not one quoted string)."""
    try:
        text = json.loads(line)
    except ValueError:
        return line
    if not isinstance(text, str):
        return line
    found = sentences(text)
    kept = [s for s in found if not (_identifies(s) and set(fact_keys(s)) <= known)]
    if not kept or len(kept) == len(found):
        return line
    return quote(" ".join(kept))


def _identifies(sentence: str) -> bool:
    text = _plain(sentence)
    if _LACKS.search(text) and _ID_WORD.search(text) and not _REQUEST_VERB.search(text):
        return True
    spans = list(fact_spans(sentence))
    if not spans:
        return False
    rest = sentence
    for _, start, end in reversed(spans):
        rest = rest[:start] + " " + rest[end:]
    return all(word in _IDENTIFYING_WORDS for word in _words(rest))


def assistant_lines(text: str, limit: int, known: str) -> list[str]:
    """The assistant's decisions and commitments, and its sentences stating facts ``known``
    (the summary so far) does not hold, quoted, as one line (or none). Its questions to the
    user are left out unless they state such a fact: the reply follows in the record (the
    last question, still open, is under Open). A message with neither (a greeting, "I can
    help with that.") gives no line."""
    picked = []
    for sentence in plain_sentences(text):
        if is_refusal(sentence):
            continue  # under Declined (summarizers.refusals)
        new_fact = any(value not in known for value in fact_keys(sentence).values())
        asking = sentence.endswith("?") or bool(_ASKS.search(sentence))
        decided = (
            _COMMITMENT.search(sentence)
            and not _LOOKUP.search(_plain(sentence))
            and not _is_list_item(sentence, text)
        )
        if new_fact or (decided and not asking):
            picked.append(sentence)
    return [quote(" ".join(picked), limit)] if picked else []


def _is_list_item(sentence: str, text: str) -> bool:
    """Whether ``sentence`` is an item of a list in ``text`` ("2. Airline cancelled flight"
    among the reasons offered), not a sentence ending in a stop: what it offers, not what
    was decided."""
    if sentence.rstrip().endswith((".", "!", "?")):
        return False
    item = rf"^\s*(?:\d{{1,2}}[.)]|[-*•])\s+(?:\W{{0,2}}){re.escape(sentence[:40])}"
    return re.search(item, text, re.MULTILINE) is not None


def plain_sentences(text: str) -> list[str]:
    """The sentences of ``text`` without markdown emphasis, headings or list dashes."""
    plain = [_MARKUP.sub("", s).strip(" -") for s in sentences(text)]
    return [s for s in plain if s]


def last_question(text: str, limit: int) -> str:
    questions = [s for s in sentences(text) if s.endswith("?")]
    return shorten(questions[-1] if questions else text, limit)


def is_reply_only(text: str) -> bool:
    """Whether a user message only replies: it has sentences, states no fact, and each is a
    greeting, a consent (:func:`is_consent`) or vague (:func:`is_vague`)."""
    found = sentences(text)
    return bool(found) and not has_fact(text) and all(is_consent(s) or is_vague(s) for s in found)


def asks_only(line: str) -> bool:
    """Whether a request line (quoted) only asks for information: each sentence is a question
    opening with what, which, when, where, who or how much/many/long ("How much was
    ORD-40613 in total?"). Answered, such a line leaves the summary: the answer's facts are
    in the ledger or the assistant's lines."""
    found = sentences(line.strip('"'))
    return bool(found) and all(s.endswith("?") and _INFO_QUESTION.match(_plain(s)) for s in found)


def _topic(line: str) -> set[str]:
    return {w for w in _words(line) if w not in _VAGUE_WORDS and w not in _FRAME_WORDS}


def restates(later: str, earlier: str) -> bool:
    """Whether request line ``later`` says all ``earlier`` says, and more: ``earlier``
    states no fact, and every word of it that names something ("change", "flight",
    "reservation") is in ``later``, which states a fact ("I'd like to change my flight
    reservation." is restated by "I want to change the flight for reservation M05KNL.")."""
    if has_fact(earlier) or not has_fact(later):
        return False
    topic = _topic(earlier)
    return bool(topic) and topic <= _topic(later)
