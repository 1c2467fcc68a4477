"""Where a conversation lives in Redis: key names, part encoding, entry parsing.

Layout (``P`` = prefix; ``U``, ``S``, ``A`` = the user, session and agent ids percent-encoded)::

    P:{U:S}:m:A   LIST    the conversation's messages, oldest first; entries "SEQ RECORD"
    P:{U:S}:i:A   SET     the message ids stored for the key (idempotent saves)
    P:{U:S}:h:A   HASH    the key's head: e epoch, l last seq, c checkpoint version,
                          n message count, f / t oldest / newest created_at (µs)
    P:{U:S}:c:A   STRING  the key's summary checkpoint (JSON), apart from the messages
    P:{U:S}:r:A   HASH    the key's application records: id -> "SEQ JSON"
    P:{U:S}:l:A   STRING  the key's summarizing lease: its owner, expiring (SET NX PX)
    P:{U:S}:z:A   LIST    the messages rewinds hid (moved out of m), "SEQ REWIND_SEQ RECORD"
    P:{U:S}:k:A   LIST    the key's rewinds, oldest first: "SEQ JSON"
    P:{U:S}:v:A   HASH    every kept version of the checkpoint: version -> JSON
    P:{U:S}:a     SET     the session's agents (encoded)
    P:{U:S}:s     HASH    the session: q sequence counter, t last activity (µs), v version
    P:{U}:x       ZSET    the user's sessions (encoded) by last activity (µs)
    P:{U}:y       HASH    per session, the version of the state ``x`` shows
    P:format      STRING  the format version of everything under the prefix, set on first
                          use (1) and checked by every store instance before its first
                          command: a newer one raises ``SchemaVersionError``. The first
                          rewind under the prefix raises it to 2, so an older release (which
                          would neither list nor erase the rewound messages) refuses it.

Percent-encoding keeps only RFC 3986 unreserved characters (``A-Z a-z 0-9 - . _ ~``), so an
encoded part never holds ``:``, ``{``, ``}``, ``*``, ``?``, ``[`` or ``]``: keys cannot
collide, every key of a session shares the hash tag ``{U:S}`` (one Cluster slot), and no
user's keys can match another's pattern.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import quote, unquote

from storage.errors import CorruptRecordError, InvalidKeyError
from storage.message import ChatKey
from storage.stores.times import from_us, to_us

__all__ = [
    "KeyNames",
    "Layout",
    "decode_part",
    "known_part",
    "entries",
    "entry",
    "from_us",
    "glob_escape",
    "part",
    "to_us",
]


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@lru_cache(maxsize=16384)
def _encode_part(value: str) -> str:
    return quote(value, safe="")


def part(field: str, value: str) -> str:
    """The percent-encoded form of a key part (injective; no ``:{}*?[]`` left).

    Raises:
        InvalidKeyError: ``value`` holds a lone surrogate (it cannot be stored as UTF-8).
    """
    try:
        return _encode_part(value)
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(
            f"{field} holds a lone surrogate at position {exc.start}, which cannot be stored "
            "as UTF-8"
        ) from None


def decode_part(raw: bytes | str) -> str:
    """A key part from its encoded form."""
    text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    return unquote(text, errors="strict")


def known_part(raw: bytes | str) -> str | None:
    """A key part from its encoded form, or ``None`` when it is not one this store wrote (a
    damaged set or index member: the caller skips it)."""
    try:
        value = decode_part(raw)
    except ValueError:
        return None
    return value if value and "\x00" not in value else None


def entry(raw: bytes) -> tuple[int, bytes]:
    """Split a list or record entry ``b"SEQ PAYLOAD"``.

    Raises:
        CorruptRecordError: the entry has no sequence number.
    """
    cut = raw.find(b" ")
    if cut <= 0 or not raw[:cut].isdigit():
        raise CorruptRecordError(f"malformed Redis entry {raw[:80]!r}")
    return int(raw[:cut]), raw[cut + 1 :]


def entries(joined: bytes) -> list[bytes]:
    """The entries of a read script's reply (joined by newlines; JSON holds none)."""
    return joined.split(b"\n") if joined else []


class KeyNames:
    """The names of one key's Redis keys (see the module docstring)."""

    __slots__ = (
        "agent",
        "agents",
        "base",
        "checkpoint",
        "head",
        "ids",
        "lease",
        "member",
        "messages",
        "records",
        "rewinds",
        "rewound",
        "session",
        "versions",
    )

    def __init__(self, base: str, member: str, agent: str) -> None:
        self.base = base
        self.member = member  # the encoded session id: its name in the user's index
        self.agent = agent
        self.messages = f"{base}m:{agent}"
        self.ids = f"{base}i:{agent}"
        self.head = f"{base}h:{agent}"
        self.checkpoint = f"{base}c:{agent}"
        self.records = f"{base}r:{agent}"
        self.lease = f"{base}l:{agent}"
        self.rewound = f"{base}z:{agent}"
        self.rewinds = f"{base}k:{agent}"
        self.versions = f"{base}v:{agent}"
        self.agents = f"{base}a"
        self.session = f"{base}s"

    def of(self, fields: tuple[str, ...]) -> list[str]:
        """The names of ``fields`` (``"messages"``, ``"head"``, ...), in that order: the keys
        a script takes (:mod:`.scripts`' ``*_KEYS``)."""
        return [getattr(self, field) for field in fields]


class Layout:
    """Key names under one prefix."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def base(self, user: str, member: str) -> str:
        """``P:{U:S}:`` from encoded parts: the start of every key of the session."""
        return f"{self.prefix}:{{{user}:{member}}}:"

    def session_base(self, user_id: str, session_id: str) -> tuple[str, str]:
        """``(base, member)`` of a session."""
        member = part("session_id", session_id)
        return self.base(part("user_id", user_id), member), member

    def key(self, key: ChatKey) -> KeyNames:
        base, member = self.session_base(key.user_id, key.session_id)
        return KeyNames(base, member, part("agent_id", key.agent_id))

    def index(self, user_id: str) -> tuple[str, str]:
        """The user's session index: ``(P:{U}:x, P:{U}:y)``."""
        user = part("user_id", user_id)
        return f"{self.prefix}:{{{user}}}:x", f"{self.prefix}:{{{user}}}:y"

    def format_key(self) -> str:
        """``P:format``: the format version of the data under the prefix."""
        return f"{self.prefix}:format"

    def index_pattern(self) -> str:
        """A SCAN pattern matching every user's session index (the prefix taken literally)."""
        return f"{glob_escape(self.prefix)}:{{*}}:x"

    def user_of_index(self, name: str) -> str:
        """The encoded user id of an index key name."""
        return name[len(self.prefix) + 2 : -3]
