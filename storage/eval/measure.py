"""The quality measure: replay conversations through a stack and count the facts its view keeps.

Each conversation is saved one message at a time, as ``chatlayers replay`` does, with a fetch
before every assistant message (where an orchestrator calls the model). A **point** is such a
fetch whose view is compacted (it is not the raw record as stored: a summary, a trimmed tool
result). At each point:

- the **needed facts** are the facts (:mod:`storage.eval.facts`) of the assistant message
  that comes next (its text and tool-call arguments, as stored) that some earlier message of
  the record already states;
- a fact is **retained** by a view when the view states it: any text of it, the summary's,
  the pinned prompt's, every kept message's content and tool-call arguments, whatever shape
  the view has;
- the same needed facts are looked for in two baselines of the same size
  (:mod:`storage.eval.baselines`): truncation to the view's characters and the newest
  messages matched to the view's message count.

Retention is retained facts over needed facts, summed over all points (each fact weighs the
same, wherever it is). Background summaries are awaited before each fetch, so the figures do
not depend on timing.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence, Set
from pathlib import Path
from typing import Any, Final

import attrs

from storage.cli.conversation_file import Conversation
from storage.cli.replay import set_name, summarizing_layers, token_counter, total
from storage.config import open_storage
from storage.config.loading import to_spec
from storage.config.spec import StackSpec
from storage.errors import ConfigError
from storage.eval.baselines import (
    keep_last_messages,
    message_chars,
    message_pieces,
    truncate_to_chars,
)
from storage.facts import FactExtractor, extract_facts
from storage.message import ChatMessage
from storage.protocol import ChatStorage
from storage.redact import redact_url
from storage.stores.urls import path_from_url

__all__ = [
    "DEFAULT_EVAL_URLS",
    "EvalReport",
    "Figures",
    "ViewObserver",
    "check_built",
    "check_fresh",
    "evaluate",
    "evaluate_urls",
    "fresh_spec",
]

ViewObserver = Callable[[Conversation, int, list[ChatMessage]], None]
"""``on_view(conversation, index, view)`` of :func:`evaluate`."""

DEFAULT_EVAL_URLS: Final = (
    "summarize?trigger_tokens=3000::memory://",
    "summarize?trigger_at=6::memory://",
)
"""The stacks ``chatlayers eval`` measures when given none: a token budget and a pair budget,
both with the default summarizer."""

_COUNTED: Final = ("summarizer_calls", "clears_made", "collapses_made", "trims_made")
"""The summarizing layers' counters a replay adds to its figures."""

_FILE_STORES: Final = {"sqlite": "sqlite:///{dir}/eval.db", "jsonl": "jsonl://{dir}/eval"}
_LAYERS_WITH_FILES: Final = frozenset({"encrypt"})


@attrs.define
class Figures:
    """What one stack did on a set of conversations.

    Attributes:
        conversations: conversations replayed.
        summarized: conversations whose final view is compacted.
        points: fetches before an assistant message whose view was compacted.
        facts: needed facts at those points (see the module docstring).
        kept_view: needed facts the view stated.
        kept_truncation: needed facts truncation to the view's characters kept.
        kept_last_n: needed facts the newest messages, as many as the view's, kept.
        view_chars: characters of the views at the points (the truncation budget).
        raw_tokens: tokens of the raw records at the end (``None``: no tokenizer).
        view_tokens: tokens of the final views (``None``: no tokenizer).
        summarized_raw_tokens: ``raw_tokens`` of the summarized conversations only.
        summarized_view_tokens: ``view_tokens`` of the summarized conversations only.
        summarizer_calls: summarizer calls the replay caused.
        clears_made: compactions the replay caused that clearing tool results the summary
            holds made alone (no summarizer call; the layers' counter of that name).
        collapses_made: likewise, by collapsing older results of repeated calls.
        trims_made: likewise, by trimming long tool results.
        missed: needed facts the view did not state, with how often.
    """

    conversations: int = 0
    summarized: int = 0
    points: int = 0
    facts: int = 0
    kept_view: int = 0
    kept_truncation: int = 0
    kept_last_n: int = 0
    view_chars: int = 0
    raw_tokens: int | None = 0
    view_tokens: int | None = 0
    summarized_raw_tokens: int | None = 0
    summarized_view_tokens: int | None = 0
    summarizer_calls: int = 0
    clears_made: int = 0
    collapses_made: int = 0
    trims_made: int = 0
    missed: Counter[str] = attrs.field(factory=Counter)

    @property
    def retention(self) -> float | None:
        """Needed facts the view kept, 0..1 (``None``: no point)."""
        return self.kept_view / self.facts if self.facts else None

    @property
    def truncation_retention(self) -> float | None:
        """Needed facts truncation at the same characters kept, 0..1."""
        return self.kept_truncation / self.facts if self.facts else None

    @property
    def last_n_retention(self) -> float | None:
        """Needed facts the newest messages (as many as the view's) kept, 0..1."""
        return self.kept_last_n / self.facts if self.facts else None

    @property
    def view_ratio(self) -> float | None:
        """View over raw tokens of the summarized conversations (``None``: none, or no
        tokenizer)."""
        raw, view = self.summarized_raw_tokens, self.summarized_view_tokens
        if raw is None or view is None or not raw:
            return None
        return view / raw

    def add(self, other: Figures) -> None:
        """Add ``other``'s counts to these."""
        for field in attrs.fields(Figures):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.name == "missed":
                mine.update(theirs)
            elif mine is None or theirs is None:
                setattr(self, field.name, None)
            else:
                setattr(self, field.name, mine + theirs)

    def as_dict(self) -> dict[str, Any]:
        """The figures and the retentions as plain JSON values (the 20 most missed facts)."""
        data = attrs.asdict(self)
        data["missed"] = dict(self.missed.most_common(20))
        for name in ("retention", "truncation_retention", "last_n_retention", "view_ratio"):
            data[name] = getattr(self, name)
        return data


@attrs.define
class EvalReport:
    """The figures of one stack.

    Attributes:
        stack: the stack URL as given (password redacted).
        sets: per replayed file (its name without ``.openai.jsonl``), in order.
    """

    stack: str
    sets: dict[str, Figures] = attrs.field(factory=dict)

    @property
    def total(self) -> Figures:
        """Every set's figures added up."""
        out = Figures()
        for figures in self.sets.values():
            out.add(figures)
        return out


def fresh_spec(source: str | Path, directory: Path, *, command: str = "eval") -> StackSpec:
    """The spec of ``source`` (a URL chain or a config file) over a fresh, empty store:
    ``memory://`` as it is, a SQLite or JSONL store moved into ``directory`` (its other
    options kept). ``command`` names the command in its errors (``eval``, ``diff``).

    Raises:
        ConfigError: a server store (its data is not the measure's to write), a layer that
            keeps files of its own (``encrypt``'s keyring), or a bad URL (also a store URL the
            store would refuse, such as ``sqlite://x.db``, though it is replaced).
    """
    spec = to_spec(source)
    store = spec.store
    if store.name in _FILE_STORES:
        if store.url is not None:
            # The URL as typed is read first, so a spelling the store refuses (sqlite://x.db)
            # is refused here too, not replaced by a fresh one that works.
            try:
                path_from_url(store.url, store.name)
            except ConfigError as exc:
                raise ConfigError(f"{spec.source}: {exc}") from exc
            query = store.url.partition("?")[2]
            fresh = _FILE_STORES[store.name].format(dir=directory)
            store.url = fresh + (f"?{query}" if query else "")
        else:
            store.options["path"] = str(directory / "eval")
    elif store.name != "memory":
        raise ConfigError(
            f"{command} replays the conversations into fresh stores it makes and removes: "
            f"use memory://, sqlite or jsonl, not {store.name!r} ({spec.source})"
        )
    for layer in spec.layers:
        if layer.name in _LAYERS_WITH_FILES:
            raise ConfigError(
                f"{command} cannot replay a stack with {layer.name!r}: its keyring is not "
                "fresh (and encryption does not change what the view says)"
            )
    return spec


def check_fresh(sources: Iterable[str | Path], *, command: str = "eval") -> None:
    """Refuse, before anything is replayed, a source :func:`fresh_spec` refuses (the second
    stack's mistake is not found after the first stack's whole run).

    Raises:
        ConfigError: as :func:`fresh_spec`.
    """
    for source in sources:
        # Parsed only: nothing is created.
        fresh_spec(source, Path(tempfile.gettempdir()), command=command)


async def check_built(sources: Iterable[str | Path], *, command: str = "eval") -> None:
    """Build each source once over a fresh, empty store (:func:`fresh_spec`) and close it,
    so a stack that cannot be built (a summarizer missing an option, an unknown PII entity)
    is refused before anything is replayed, not after the stacks before it ran.

    Raises:
        ConfigError: as :func:`fresh_spec` and :func:`storage.config.open_storage`.
    """
    for source in sources:
        with tempfile.TemporaryDirectory(prefix=f"chatlayers-{command}-") as directory:
            async with open_storage(fresh_spec(source, Path(directory), command=command)):
                pass


async def evaluate_urls(
    urls: Iterable[str | Path],
    conversations: Sequence[Conversation],
    *,
    extractor: FactExtractor = extract_facts,
    model: str = "gpt-4o",
    on_message: Callable[[], None] | None = None,
) -> list[EvalReport]:
    """:func:`evaluate` each stack (URL chain or config file), each over a fresh store
    (:func:`fresh_spec`).

    Raises:
        ConfigError: a URL cannot be measured (see :func:`fresh_spec`).
        ChatStorageError: from a stack.
    """
    sources = list(urls)
    check_fresh(sources)
    reports = []
    for url in sources:
        with tempfile.TemporaryDirectory(prefix="chatlayers-eval-") as directory:
            async with open_storage(fresh_spec(url, Path(directory))) as stack:
                report = await evaluate(
                    stack, conversations, extractor=extractor, model=model, on_message=on_message
                )
            report.stack = redact_url(url) if isinstance(url, str) else str(url)
            reports.append(report)
    return reports


async def evaluate(
    stack: ChatStorage,
    conversations: Sequence[Conversation],
    *,
    extractor: FactExtractor = extract_facts,
    model: str = "gpt-4o",
    on_message: Callable[[], None] | None = None,
    on_view: ViewObserver | None = None,
) -> EvalReport:
    """Replay ``conversations`` through ``stack`` and measure its views (module docstring).

    The stack should be empty for these keys: messages already stored are not saved again,
    and then the record holds them but the measure does not.

    Args:
        stack: the stack (a built :class:`storage.config.stack.Stack` or any ``ChatStorage``).
        conversations: from :func:`storage.cli.conversation_file.read_conversations`.
        extractor: what counts as a fact (default :func:`storage.eval.facts.extract_facts`).
        model: the model whose tokenizer counts tokens.
        on_message: called after each message (progress).
        on_view: called with ``(conversation, index, view)`` for every view fetched:
            ``index`` is the position in ``conversation.messages`` of the assistant message
            the view was fetched before, ``len(conversation.messages)`` for the final view
            (what ``chatlayers diff`` compares).

    Raises:
        ChatStorageError: from the stack.
    """
    facts_of = _Facts(extractor)
    layers = summarizing_layers(stack)
    count = token_counter(model)
    report = EvalReport(getattr(stack, "source", "") or type(stack).__name__)
    for conversation in conversations:
        figures = report.sets.setdefault(set_name(conversation.where), Figures())
        before = {name: total(layers, name) for name in _COUNTED}
        record: list[ChatMessage] = []
        earlier: set[str] = set()
        for index, message in enumerate(conversation.messages):
            view = None
            if message.role == "assistant" and record:
                await _drain(layers)
                view = await stack.fetch(conversation.key)
                if on_view is not None:
                    on_view(conversation, index, view)
            stored = await stack.save(conversation.key, message)
            if view is not None and stored and view != record:
                _point(figures, facts_of, view, record, earlier, stored[0])
            for item in stored:
                record.append(item)
                earlier.update(facts_of.message(item))
            if on_message is not None:
                on_message()
        await _drain(layers)
        view = await stack.fetch(conversation.key)
        if on_view is not None:
            on_view(conversation, len(conversation.messages), view)
        figures.conversations += 1
        for name, was in before.items():
            setattr(figures, name, getattr(figures, name) + total(layers, name) - was)
        compacted = view != record
        figures.summarized += compacted
        if count is None:
            figures.raw_tokens = figures.view_tokens = None
            figures.summarized_raw_tokens = figures.summarized_view_tokens = None
            continue
        raw_tokens, view_tokens = count(record), count(view)
        _add_tokens(figures, "raw_tokens", raw_tokens)
        _add_tokens(figures, "view_tokens", view_tokens)
        if compacted:
            _add_tokens(figures, "summarized_raw_tokens", raw_tokens)
            _add_tokens(figures, "summarized_view_tokens", view_tokens)
    return report


def _point(
    figures: Figures,
    facts_of: _Facts,
    view: list[ChatMessage],
    record: list[ChatMessage],
    earlier: Set[str],
    upcoming: ChatMessage,
) -> None:
    needed = facts_of.message(upcoming) & earlier
    chars = sum(message_chars(m) for m in view)
    figures.points += 1
    figures.view_chars += chars
    figures.facts += len(needed)
    if not needed:
        return
    in_view = facts_of.messages(view)
    figures.kept_view += len(needed & in_view)
    figures.missed.update(needed - in_view)
    truncated = truncate_to_chars(record, chars)
    figures.kept_truncation += len(needed & facts_of.messages(truncated))
    newest = keep_last_messages(record, len(view))
    figures.kept_last_n += len(needed & facts_of.messages(newest))


class _Facts:
    """The extractor with its answers remembered per text (views repeat messages)."""

    def __init__(self, extractor: FactExtractor) -> None:
        self._extract = extractor
        self._known: dict[str, frozenset[str]] = {}

    def text(self, text: str) -> frozenset[str]:
        found = self._known.get(text)
        if found is None:
            found = self._known[text] = self._checked(text)
        return found

    def _checked(self, text: str) -> frozenset[str]:
        """What the extractor says of ``text``, refused unless it is a set of strings (a
        ``str`` would count its characters as facts)."""
        name = getattr(self._extract, "__qualname__", repr(self._extract))
        try:
            found = self._extract(text)
        except Exception as exc:
            raise ConfigError(
                f"the fact extractor {name} raised {type(exc).__name__}: {exc} "
                f"(on a text of {len(text):,} characters)"
            ) from exc
        if not isinstance(found, Set | list | tuple) or not all(
            isinstance(fact, str) for fact in found
        ):
            raise ConfigError(
                f"the fact extractor {name} must return a set (or list, tuple) of str, got "
                f"{type(found).__name__}" + (" of other items" if isinstance(found, Set) else "")
            )
        return frozenset(found)

    def message(self, message: ChatMessage) -> frozenset[str]:
        pieces = message_pieces(message)
        if len(pieces) == 1:
            return self.text(pieces[0])
        return frozenset().union(*(self.text(p) for p in pieces))

    def messages(self, messages: Iterable[ChatMessage]) -> set[str]:
        out: set[str] = set()
        for message in messages:
            out.update(self.message(message))
        return out


def _add_tokens(figures: Figures, name: str, value: int) -> None:
    current = getattr(figures, name)
    setattr(figures, name, None if current is None else current + value)


async def _drain(layers: Sequence[Any]) -> None:
    for layer in layers:
        if getattr(layer, "background", False):
            await layer.drain()
