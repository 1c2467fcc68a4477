"""The ``chatlayers`` command: replay real conversations through a stack, inspect and move data.

Commands (each takes ``--url URL`` or ``--config FILE`` to choose the stack, default
``CHATLAYERS_URL`` / ``CHATLAYERS_CONFIG`` / ``summarize::scrub::sqlite:///chatlayers.db``,
and ``--json`` for machine output)::

    chatlayers replay FILE...      save conversations turn by turn, fetch like an orchestrator
    chatlayers show --session S    what the model would see (or --raw: the stored record)
    chatlayers stack               the composed stack, outermost first
    chatlayers export [-o FILE]    JSONL, one conversation per line (OpenAI format + key)
    chatlayers import FILE         validated first, refused whole on the first bad line
    chatlayers stats               users, sessions, agents, messages, bytes
    chatlayers delete --user U     erase a user (or one conversation with --session/--agent)
    chatlayers compact             compact a JSONL store's files

Tables and progress bars use rich in a terminal; plain text when piped; JSON with ``--json``.

The conversation file format (read by ``replay`` and ``import``, written by ``export``): JSON
lines (or a ``.json`` file holding a list), one conversation per line::

    {"id": "conv-1", "messages": [<OpenAI chat messages>], "metadata": {"user_id": "u1"}}
    {"user_id": "u1", "session_id": "conv-1", "agent_id": "assistant", "messages": [...],
     "chatlayers": {"v": 1, "ids": [...], "created_at": [...], "metadata": [...]}}

The key is ``user_id`` (else ``metadata.user_id``, else the conversation id), ``session_id``
(else ``id``) and ``agent_id`` (else ``"assistant"``). Message ids come from ``chatlayers.ids``,
else from a hash of (conversation id, index), so replaying or importing a file twice stores
nothing new.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import anyio
import attrs

from storage.codec import encode
from storage.errors import ChatStorageError, ConfigError, InvalidKeyError, InvalidMessageError
from storage.history import validate_history, validate_message
from storage.listing import ListableStorage, find_listable
from storage.message import ChatKey, ChatMessage, check_key_part, thaw

if TYPE_CHECKING:
    from storage.config import Stack

__all__ = [
    "Conversation",
    "export_conversations",
    "import_conversations",
    "main",
    "message_id",
    "read_conversations",
    "replay",
]

DEFAULT_AGENT: Final = "assistant"
EXPORT_VERSION: Final = 1


# --- the conversation file format -----------------------------------------------------------


@attrs.frozen
class Conversation:
    """One conversation read from a file, validated, with its key and message ids set.

    Attributes:
        key: where it is stored.
        messages: the validated messages, oldest first, ids set.
        where: ``FILE:LINE`` it came from (for messages).
    """

    key: ChatKey
    messages: list[ChatMessage]
    where: str


def message_id(conversation_id: str, index: int) -> str:
    """The deterministic id of message ``index`` of a conversation (32 hex characters).

    A re-replay or re-import of the same file therefore stores nothing new.
    """
    digest = hashlib.blake2b(f"{conversation_id}\x00{index}".encode(), digest_size=16)
    return digest.hexdigest()


def _items(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line or item number, decoded JSON)`` of a JSONL file or a JSON list file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidMessageError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidMessageError(f"{path}: not valid JSON: {exc}") from None
        items = data if isinstance(data, list) else [data]
        yield from enumerate(items, 1)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise InvalidMessageError(f"{path}:{number}: not valid JSON: {exc}") from None


def _conversation(item: Any, where: str) -> Conversation:
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where}: a conversation must be a JSON object")
    metadata = item.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    conv_id = item.get("id")
    session_id = item.get("session_id", conv_id)
    if session_id is None:
        raise InvalidKeyError(f"{where}: the conversation has neither 'session_id' nor 'id'")
    user_id = item.get(
        "user_id", metadata.get("user_id", conv_id if conv_id is not None else session_id)
    )
    agent_id = item.get("agent_id", DEFAULT_AGENT)
    try:
        key = ChatKey(user_id, session_id, agent_id)
    except InvalidKeyError as exc:
        raise InvalidKeyError(f"{where}: {exc}") from None
    try:
        messages = validate_history(item.get("messages"))
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}: {exc}") from None
    extension = item.get("chatlayers")
    ids: Sequence[Any] | None = None
    created: Sequence[Any] | None = None
    metas: Sequence[Any] | None = None
    if extension is not None:
        if not isinstance(extension, Mapping):
            raise InvalidMessageError(f"{where}: 'chatlayers' must be an object")
        ids, created, metas = (extension.get(k) for k in ("ids", "created_at", "metadata"))
        for name, values in (("ids", ids), ("created_at", created), ("metadata", metas)):
            if values is not None and (
                not isinstance(values, list) or len(values) != len(messages)
            ):
                raise InvalidMessageError(
                    f"{where}: chatlayers.{name} must be a list of {len(messages)} entries"
                )
    if ids is not None:
        repeated = sorted({i for i in ids if isinstance(i, str) and ids.count(i) > 1})
        if repeated:
            raise InvalidMessageError(f"{where}: chatlayers.ids repeats {repeated[0]!r}")
    base_id = str(conv_id if conv_id is not None else session_id)
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        changes: dict[str, Any] = {"id": message_id(base_id, index)}
        if ids is not None:
            changes["id"] = ids[index]
        if created is not None and created[index] is not None:
            changes["created_at"] = _parse_time(created[index], f"{where}: message {index}")
        if metas is not None and metas[index]:
            changes["metadata"] = metas[index]
        candidate = attrs.evolve(message, **changes)
        try:
            out.append(validate_message(candidate, index))
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"{where}: {exc}") from None
    return Conversation(key, out, where)


def _parse_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidMessageError(f"{where}: created_at must be an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidMessageError(f"{where}: created_at {value!r} is not ISO 8601") from None
    if parsed.utcoffset() is None:
        raise InvalidMessageError(f"{where}: created_at {value!r} has no timezone")
    return parsed


def read_conversations(paths: Sequence[str | os.PathLike[str]]) -> list[Conversation]:
    """Read and validate every conversation of ``paths`` (JSONL, or JSON lists).

    Nothing is returned unless every conversation is valid.

    Raises:
        InvalidMessageError: a line is not JSON, not an object, or its history breaks a rule
            of ``validate_history`` (``FILE:LINE`` and the message index are named).
        InvalidKeyError: a conversation has no usable key (``FILE:LINE`` named).
        ConfigError: a file cannot be read.
    """
    out: list[Conversation] = []
    for raw in paths:
        path = Path(raw)
        for number, item in _items(path):
            out.append(_conversation(item, f"{path}:{number}"))
    return out


def conversation_record(key: ChatKey, messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """The export line of one conversation: the OpenAI messages plus key, ids and timestamps."""
    record: dict[str, Any] = {
        "user_id": key.user_id,
        "session_id": key.session_id,
        "agent_id": key.agent_id,
        "messages": [m.to_openai() for m in messages],
    }
    extension: dict[str, Any] = {
        "v": EXPORT_VERSION,
        "ids": [m.id for m in messages],
        "created_at": [m.created_at.isoformat() if m.created_at else None for m in messages],
    }
    if any(m.metadata for m in messages):
        extension["metadata"] = [thaw(m.metadata) if m.metadata else None for m in messages]
    record["chatlayers"] = extension
    return record


# --- stack helpers -------------------------------------------------------------------------


def _listable(stack: Stack) -> ListableStorage:
    found = find_listable(stack)
    if found is None:
        raise ConfigError(
            f"this command lists stored conversations, which the store "
            f"{_store_label(stack)} cannot do (it does not implement list_keys)"
        )
    return found


def _store_label(stack: Stack) -> str:
    from storage.config import describe_lines

    return describe_lines(stack)[-1]


def _database(stack: Stack) -> str:
    """Where the data lives: the absolute file path of a file store, else the store's line."""
    base = stack.base
    path = getattr(base, "path", None)
    if isinstance(path, str | os.PathLike) and str(path) != ":memory:":
        return os.path.abspath(path)
    return _store_label(stack)


def _counts(stack: Stack) -> tuple[Counter[str], int, bool, bool]:
    """(PII found by entity, summaries made, has a scrubber, has a summarizer)."""
    pii: Counter[str] = Counter()
    summaries = 0
    scrubbing = summarizing = False
    for component in stack.components():
        counts = getattr(getattr(component, "transform", None), "counts", None)
        if isinstance(counts, Mapping):
            scrubbing = True
            pii.update(counts)
        made = getattr(component, "summaries_made", None)
        if isinstance(made, int):
            summarizing = True
            summaries += made
    return pii, summaries, scrubbing, summarizing


# --- operations (usable from code and tests) -----------------------------------------------


@attrs.define
class ReplayReport:
    """The figures of one replay (see ``chatlayers replay``)."""

    conversations: int = 0
    messages_read: int = 0
    messages_stored: int = 0
    messages_skipped: int = 0
    raw_messages: int = 0
    view_messages: int = 0
    raw_tokens: int | None = 0
    view_tokens: int | None = 0
    fetch_seconds: list[float] = attrs.field(factory=list)
    pii: Counter[str] = attrs.field(factory=Counter)
    summaries_made: int = 0
    scrubbing: bool = False
    summarizing: bool = False

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the fetch latencies in seconds (nearest rank)."""
        if not self.fetch_seconds:
            return None
        ordered = sorted(self.fetch_seconds)
        rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
        return ordered[rank - 1]


async def replay(
    stack: Stack,
    conversations: Sequence[Conversation],
    *,
    fresh: bool = False,
    fetch_limit: int | None = None,
    model: str = "gpt-4o",
    on_message: Callable[[], None] | None = None,
) -> ReplayReport:
    """Save every conversation one message at a time, fetching before every assistant message
    (as an orchestrator does before calling the model) and once at the end.

    Args:
        stack: the stack to write through.
        conversations: from :func:`read_conversations`.
        fresh: delete each conversation's key first.
        fetch_limit: the ``limit`` of each fetch (``None``: the whole history).
        model: the model whose tokenizer counts tokens.
        on_message: called after each message (progress).

    Raises:
        ChatStorageError: from the stack (the messages saved before it stay stored).
    """
    report = ReplayReport()
    perf = time.perf_counter
    count = _token_counter(model)
    for conversation in conversations:
        key = conversation.key
        if fresh:
            await stack.delete(key)
        messages = conversation.messages
        view: list[ChatMessage] = []
        for index, message in enumerate(messages):
            stored = await stack.save(key, message)
            report.messages_stored += len(stored)
            report.messages_skipped += 1 - len(stored)
            last = index == len(messages) - 1
            if last or messages[index + 1].role == "assistant":
                start = perf()
                view = await stack.fetch(key, limit=fetch_limit)
                report.fetch_seconds.append(perf() - start)
            if on_message is not None:
                on_message()
        raw = await stack.base.fetch(key)
        report.conversations += 1
        report.messages_read += len(messages)
        report.raw_messages += len(raw)
        report.view_messages += len(view)
        if count is not None and report.raw_tokens is not None and report.view_tokens is not None:
            report.raw_tokens += count(raw)
            report.view_tokens += count(view)
    if count is None:
        report.raw_tokens = report.view_tokens = None
    report.pii, report.summaries_made, report.scrubbing, report.summarizing = _counts(stack)
    return report


def _token_counter(model: str) -> Callable[[Sequence[ChatMessage]], int] | None:
    try:
        from summarizers.tokens import count_tokens
    except ImportError:
        return None

    def count(messages: Sequence[ChatMessage]) -> int:
        return count_tokens(messages, model=model)

    return count


async def iter_conversations(
    stack: Stack, *, user_id: str | None = None, session_id: str | None = None
) -> AsyncIterator[tuple[ChatKey, list[ChatMessage]]]:
    """Every stored conversation (raw, from the innermost store), in key order."""
    keys = await _listable(stack).list_keys(user_id, session_id)
    base = stack.base
    for key in keys:
        yield key, await base.fetch(key)


async def export_conversations(
    stack: Stack,
    out: TextIO,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
) -> tuple[int, int]:
    """Write every stored conversation (raw) to ``out`` as JSON lines; return
    ``(conversations, messages)``.

    Raises:
        ConfigError: the store cannot list its keys.
        ChatStorageError: from the store.
    """
    conversations = messages = 0
    async for key, history in iter_conversations(stack, user_id=user_id, session_id=session_id):
        if not history:
            continue
        out.write(json.dumps(conversation_record(key, history), ensure_ascii=False) + "\n")
        conversations += 1
        messages += len(history)
    return conversations, messages


async def import_conversations(
    stack: Stack,
    conversations: Sequence[Conversation],
    *,
    on_conversation: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Save each conversation as one atomic batch; return ``(stored, already present)``.

    Messages already stored (same id) are skipped, so an import can be re-run safely after a
    failure midway.
    """
    stored = skipped = 0
    for conversation in conversations:
        new = await stack.save_messages(conversation.key, conversation.messages)
        stored += len(new)
        skipped += len(conversation.messages) - len(new)
        if on_conversation is not None:
            on_conversation()
    return stored, skipped


@attrs.define
class Stats:
    """What a store holds."""

    users: int = 0
    sessions: int = 0
    agents: int = 0
    conversations: int = 0
    messages: int = 0
    bytes: int = 0


async def collect_stats(stack: Stack, *, user_id: str | None = None) -> Stats:
    """Count users, sessions (per user), agents (distinct ids), conversations, messages and the
    bytes of their records (UTF-8 JSON in the store codec's format)."""
    users: set[str] = set()
    sessions: set[tuple[str, str]] = set()
    agents: set[str] = set()
    stats = Stats()
    async for key, history in iter_conversations(stack, user_id=user_id):
        if not history:
            continue
        users.add(key.user_id)
        sessions.add((key.user_id, key.session_id))
        agents.add(key.agent_id)
        stats.conversations += 1
        stats.messages += len(history)
        stats.bytes += sum(len(encode(m).encode("utf-8")) for m in history)
    stats.users, stats.sessions, stats.agents = len(users), len(sessions), len(agents)
    return stats


# --- output ---------------------------------------------------------------------------------


class Output:
    """Rich tables and progress bars in a terminal, plain text when piped, JSON with --json."""

    def __init__(self, *, json_mode: bool, out: TextIO | None = None, err: TextIO | None = None):
        self.json_mode = json_mode
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rich = not json_mode and _isatty(self.out)

    def json(self, data: Any) -> None:
        self.out.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")

    def table(
        self,
        title: str | None,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        show_header: bool = True,
    ) -> None:
        if self.rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title, show_header=show_header, title_justify="left")
            for index, column in enumerate(columns):
                table.add_column(
                    column,
                    justify="right" if index and _numeric(rows, index) else "left",
                    overflow="fold",
                )
            for row in rows:
                table.add_row(*(_cell(v) for v in row))
            Console(file=self.out, soft_wrap=False).print(table)
            return
        if title:
            self.out.write(f"{title}\n")
        cells = [[_cell(v) for v in row] for row in rows]
        if show_header:
            cells.insert(0, list(columns))
        if not cells:
            return
        widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(columns))]
        for row in cells:
            line = "  ".join(
                cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)
            )
            self.out.write(line.rstrip() + "\n")

    def text(self, text: str) -> None:
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """A remark for a person (stderr), never part of the data on stdout."""
        if not self.json_mode:
            self.err.write(text + "\n")

    @contextlib.contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        """A progress bar on stderr in a terminal; yields ``advance()``."""
        if self.json_mode or not _isatty(self.err):
            yield lambda: None
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=self.err),
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda: bar.advance(task)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _numeric(rows: Sequence[Sequence[Any]], index: int) -> bool:
    return bool(rows) and all(
        isinstance(row[index], int | float) or row[index] is None
        for row in rows
        if index < len(row)
    )


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"


def _render_message(message: ChatMessage) -> str:
    parts = []
    if message.text or message.content is not None:
        parts.append(message.text)
    for call in message.tool_calls:
        parts.append(f"→ {call.name}({call.arguments})  [{call.id}]")
    if message.role == "tool" and message.tool_call_id:
        parts.insert(0, f"[result of {message.tool_call_id}]")
    if message.content is None and not message.tool_calls:
        parts.append("(no content)")
    return "\n".join(p for p in parts if p)


# --- commands -------------------------------------------------------------------------------


async def _cmd_replay(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    conversations = read_conversations(args.files)
    total = sum(len(c.messages) for c in conversations)
    database = _database(stack)
    out.note(f"replaying {len(conversations)} conversations ({total} messages) into {database}")
    with out.progress("replaying", total) as advance:
        report = await replay(
            stack,
            conversations,
            fresh=args.fresh,
            fetch_limit=args.fetch_limit,
            model=args.model,
            on_message=advance,
        )
    p50, p99 = report.percentile(0.50), report.percentile(0.99)
    if out.json_mode:
        out.json(
            {
                "database": database,
                "stack": stack.describe().splitlines(),
                "conversations": report.conversations,
                "messages_read": report.messages_read,
                "messages_stored": report.messages_stored,
                "messages_already_stored": report.messages_skipped,
                "pii_found": dict(sorted(report.pii.items())) if report.scrubbing else None,
                "summaries_made": report.summaries_made if report.summarizing else None,
                "raw": {"messages": report.raw_messages, "tokens": report.raw_tokens},
                "model_view": {"messages": report.view_messages, "tokens": report.view_tokens},
                "token_model": args.model,
                "fetches": len(report.fetch_seconds),
                "fetch_p50_ms": None if p50 is None else p50 * 1e3,
                "fetch_p99_ms": None if p99 is None else p99 * 1e3,
            }
        )
        return 0
    pii_total = sum(report.pii.values())
    rows: list[tuple[str, Any]] = [
        ("database", database),
        ("conversations", report.conversations),
        ("messages stored", report.messages_stored),
        ("messages already stored", report.messages_skipped),
        ("PII found", pii_total if report.scrubbing else "no scrub layer"),
    ]
    rows += [(f"  {entity}", n) for entity, n in sorted(report.pii.items())]
    rows += [
        ("summaries made", report.summaries_made if report.summarizing else "no summarize layer"),
        ("raw history (messages)", report.raw_messages),
        ("model view (messages)", report.view_messages),
        (f"raw history (tokens, {args.model})", report.raw_tokens),
        (f"model view (tokens, {args.model})", report.view_tokens),
        ("fetches", len(report.fetch_seconds)),
        ("fetch p50", _ms(p50)),
        ("fetch p99", _ms(p99)),
    ]
    out.table("chatlayers replay", ("", "value"), rows, show_header=False)
    out.note(
        f"The stored conversations are in {database}; chat history can hold personal data "
        "(erase a user with `chatlayers delete --user ID`)."
    )
    return 0


async def _cmd_show(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    user_id = args.user
    if user_id is None:
        keys = await _listable(stack).list_keys(None, args.session)
        users = sorted({k.user_id for k in keys if k.agent_id == args.agent})
        if len(users) != 1:
            found = ", ".join(repr(u) for u in users) or "none"
            raise ConfigError(
                f"--user is needed: session {args.session!r} (agent {args.agent!r}) has "
                f"users: {found}"
            )
        user_id = users[0]
    key = ChatKey(user_id, args.session, args.agent)
    source = stack.base if args.raw else stack
    messages = await source.fetch(key, limit=args.limit)
    view = "raw" if args.raw else "model"
    if out.json_mode:
        out.json({"view": view, **conversation_record(key, messages)})
        return 0
    if not messages:
        out.note(f"no messages stored for {key}")
        return 0
    rows = []
    for index, message in enumerate(messages):
        role = message.role + (" (summary)" if message.is_summary else "")
        rows.append((index, role, _render_message(message)))
    title = f"{'raw record' if args.raw else 'model view'} of {key}: {len(messages)} messages"
    if out.rich:
        out.table(title, ("#", "role", "content"), rows)
    else:
        out.text(title)
        for index, role, text in rows:
            out.text(f"[{index}] {role}")
            for line in text.splitlines() or [""]:
                out.text(f"    {line}")
    return 0


async def _cmd_stack(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    lines = stack.describe().splitlines()
    if out.json_mode:
        out.json({"source": stack.source, "components": lines, "database": _database(stack)})
        return 0
    out.table(
        f"stack from {stack.source} (outermost first)",
        ("#", "component"),
        [(i, line) for i, line in enumerate(lines, 1)],
    )
    return 0


async def _cmd_export(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    if args.output in (None, "-"):
        conversations, messages = await export_conversations(
            stack, out.out, user_id=args.user, session_id=args.session
        )
        out.note(f"exported {conversations} conversations ({messages} messages)")
        return 0
    target = Path(args.output)
    tmp = target.with_name(target.name + ".partial")
    with tmp.open("w", encoding="utf-8") as fh:
        conversations, messages = await export_conversations(
            stack, fh, user_id=args.user, session_id=args.session
        )
    tmp.replace(target)
    if out.json_mode:
        out.json({"file": str(target), "conversations": conversations, "messages": messages})
    else:
        out.text(f"exported {conversations} conversations ({messages} messages) to {target}")
    return 0


async def _cmd_import(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    conversations = read_conversations([args.file])  # everything validated before any write
    with out.progress("importing", len(conversations)) as advance:
        stored, skipped = await import_conversations(stack, conversations, on_conversation=advance)
    if out.json_mode:
        out.json(
            {
                "conversations": len(conversations),
                "messages_stored": stored,
                "messages_already_stored": skipped,
            }
        )
    else:
        out.text(
            f"imported {len(conversations)} conversations: {stored} messages stored, "
            f"{skipped} already present"
        )
    return 0


async def _cmd_stats(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    stats = await collect_stats(stack, user_id=args.user)
    data = attrs.asdict(stats)
    if out.json_mode:
        out.json({"database": _database(stack), **data})
        return 0
    rows = [("database", _database(stack)), *data.items()]
    out.table("chatlayers stats", ("", "value"), rows, show_header=False)
    return 0


async def _cmd_delete(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    check_key_part("user_id", args.user)
    if (args.session is None) != (args.agent is None):
        raise ConfigError("give both --session and --agent to delete one conversation")
    listable = find_listable(stack)
    before: int | None = None
    if listable is not None:
        keys = await listable.list_keys(args.user, args.session)
        if args.agent is not None:
            keys = [k for k in keys if k.agent_id == args.agent]
        before = len(keys)
    if args.session is not None:
        await stack.delete(ChatKey(args.user, args.session, args.agent))
        what = f"conversation {ChatKey(args.user, args.session, args.agent)}"
    else:
        await stack.delete_user(args.user)
        what = f"user {args.user!r}"
    if out.json_mode:
        out.json({"deleted": what, "conversations": before})
    else:
        suffix = f" ({before} conversations)" if before is not None else ""
        out.text(f"deleted {what}{suffix}")
    return 0


async def _cmd_compact(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    compact = getattr(stack.base, "compact_all", None)
    if not callable(compact):
        raise ConfigError(
            f"compact works on a jsonl store; this stack's store is {_store_label(stack)}"
        )
    results = await compact()
    files = list(results) if isinstance(results, list | tuple) else []
    totals = {
        field: sum(int(getattr(r, field, 0) or 0) for r in files)
        for field in ("kept", "dropped", "bytes_before", "bytes_after")
    }
    if out.json_mode:
        out.json({"store": _store_label(stack), "files_compacted": len(files), **totals})
    else:
        out.text(
            f"compacted {len(files)} files of {_store_label(stack)}: {totals['dropped']} lines "
            f"dropped, {totals['kept']} kept, {totals['bytes_before']} -> "
            f"{totals['bytes_after']} bytes"
        )
    return 0


# --- argument parsing -----------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("stack selection")
    group.add_argument(
        "--url", default=default, help="stack URL chain, e.g. summarize::scrub::sqlite:///chats.db"
    )
    group.add_argument(
        "--config", default=default, metavar="FILE", help="TOML or JSON stack config file"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine-readable JSON output",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``chatlayers`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="chatlayers",
        description=(
            "Store, inspect and move LLM conversation histories. The stack comes from --url, "
            "--config, CHATLAYERS_URL, CHATLAYERS_CONFIG, else "
            "summarize::scrub::sqlite:///chatlayers.db (a file in the working directory)."
        ),
    )
    _common(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Any, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _common(sub, top=False)
        sub.set_defaults(handler=handler)
        return sub

    p = command("replay", _cmd_replay, "replay conversation files through the stack, turn by turn")
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="JSONL (one conversation per line) or JSON list"
    )
    p.add_argument("--fresh", action="store_true", help="delete each replayed conversation first")
    p.add_argument(
        "--fetch-limit",
        type=int,
        default=None,
        metavar="N",
        help="fetch at most N messages, as an orchestrator with a window would",
    )
    p.add_argument(
        "--model", default="gpt-4o", help="model whose tokenizer counts tokens (default gpt-4o)"
    )

    p = command("show", _cmd_show, "print what the model would see for a conversation (or --raw)")
    p.add_argument("--user", default=None, help="user id (found from the session when omitted)")
    p.add_argument("--session", required=True, help="session id")
    p.add_argument("--agent", default=DEFAULT_AGENT, help=f"agent id (default {DEFAULT_AGENT})")
    p.add_argument("--raw", action="store_true", help="the stored record, not the model view")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N newest messages")

    command("stack", _cmd_stack, "print the composed stack, outermost first, secrets redacted")

    p = command("export", _cmd_export, "write stored conversations as JSONL (OpenAI format + key)")
    p.add_argument("--user", default=None, help="only this user")
    p.add_argument("--session", default=None, help="only this session")
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write to FILE (default stdout)"
    )

    p = command("import", _cmd_import, "import a JSONL export (validated whole before writing)")
    p.add_argument("file", metavar="FILE")

    p = command("stats", _cmd_stats, "count users, sessions, agents, messages and bytes")
    p.add_argument("--user", default=None, help="only this user")

    p = command(
        "delete", _cmd_delete, "erase a user's conversations (or one with --session/--agent)"
    )
    p.add_argument("--user", required=True)
    p.add_argument("--session", default=None)
    p.add_argument("--agent", default=None)

    command("compact", _cmd_compact, "compact a JSONL store's files")
    return parser


def _open(args: argparse.Namespace) -> Stack:
    from storage.config import open_storage

    url, config = getattr(args, "url", None), getattr(args, "config", None)
    if url and config:
        raise ConfigError("give --url or --config, not both")
    return open_storage(url or (Path(config) if config else None))


async def _run(args: argparse.Namespace, out: Output) -> int:
    stack = _open(args)
    async with stack:
        code: int = await args.handler(args, out, stack)
        return code


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(f"chatlayers: warning: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``chatlayers`` command; return the exit status (0 ok, 1 error, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning  # one readable line, no source excerpt
            return anyio.run(_run, args, out)
    except ChatStorageError as exc:
        from storage.config import redact_url

        sys.stderr.write(f"chatlayers: error: {redact_url(str(exc))}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("chatlayers: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
