"""Values as the store writes them into ``text`` columns, which cannot hold NUL.

Key parts cannot hold NUL (``ChatKey`` refuses it); message ids, record ids and kinds, and
lease owners can, so they are escaped (``\\0``, and ``\\`` as ``\\\\``) in their columns; the
JSON records escape NUL as ``\\u0000`` themselves. The searchable words are chatlayers' own
normalized words (:func:`storage.search.tokenize`): case- and accent-insensitive like every
other store's search, and never holding NUL.

PostgreSQL's text-search parser would split some of those words again (``my_api_key`` into
``my``, ``api``, ``key``; a non-ASCII word by the server's locale), so every store would not
match alike. Each word therefore reaches the parser as one run of ASCII letters and digits,
which it keeps whole and unchanged (:func:`search_term`): a word already like that as is,
any other as ``qz`` and the hex of its UTF-8 (``qz`` + a SHA-256 for a very long one); the
query's words are encoded the same way. Plain words never start with ``qz``, so the encoding
is injective: a word matches exactly the same word, on every store.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from storage.errors import InvalidKeyError
from storage.message import ChatKey, ChatMessage
from storage.search import message_search_text, tokenize

__all__ = [
    "MAX_CALL_BYTES",
    "MAX_SEARCH_CHARS",
    "escape_column",
    "key_args",
    "oversized",
    "search_term",
    "search_words",
    "unescape_column",
    "utf8_part",
]

# PostgreSQL reads no protocol message over 1 GiB - 2 bytes (nor any value over 1 GiB): it
# logs "invalid message length" and drops the connection, after the client spent minutes
# sending. The text a call sends (records, words, ids) is kept under this, with room for the
# rest of the message.
MAX_CALL_BYTES: Final = 1_000_000_000
# A tsvector holds at most 1 MB; the first 200,000 characters of words always fit.
MAX_SEARCH_CHARS: Final = 200_000
# Words the parser keeps whole: ASCII letters and digits, well below its 2,047-byte limit.
_PLAIN: Final = re.compile(r"[a-z0-9]{1,200}")
_HEX_BYTES: Final = 400  # longer words are hashed (a lexeme stays under 1 KB)
# search_words reads the text in pieces of about this many characters, each cut before an
# ASCII character that is no word character: it ends any word, and normalization never
# joins across it (no canonical composition ends with an ASCII character, and it reorders
# nothing before it).
_PIECE_CHARS: Final = 65_536
_CUT: Final = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]")


def search_term(word: str) -> str:
    """The lexeme a normalized word is indexed and searched as (see the module docstring)."""
    if _PLAIN.fullmatch(word) and not word.startswith("qz"):
        return word
    data = word.encode("utf-8")
    if len(data) <= _HEX_BYTES:
        return "qz" + data.hex()
    return "qzh" + hashlib.sha256(data).hexdigest()  # hex never holds "h": no clash


def escape_column(value: str) -> str:
    """``value`` for a ``text`` column: NUL as ``\\0`` and ``\\`` as ``\\\\`` (distinct ids
    stay distinct)."""
    if "\x00" in value or "\\" in value:
        return value.replace("\\", "\\\\").replace("\x00", "\\0")
    return value


_ESCAPED: Final = re.compile(r"\\(0|\\)")


def unescape_column(value: str) -> str:
    """The value :func:`escape_column` wrote."""
    if "\\" not in value:
        return value
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else "\\", value)


def utf8_part(field: str, value: str) -> str:
    """A key part checked for lone surrogates (which UTF-8, and so the server, cannot hold).

    Raises:
        InvalidKeyError: ``value`` holds a lone surrogate (its position named).
    """
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(
                f"{field} holds a lone surrogate at position {exc.start}, which cannot be "
                "stored as UTF-8"
            ) from None
    return value


def key_args(key: ChatKey) -> tuple[str, str, str]:
    """The key's parts as query arguments.

    Raises:
        InvalidKeyError: a part holds a lone surrogate.
    """
    return (
        utf8_part("user_id", key.user_id),
        utf8_part("session_id", key.session_id),
        utf8_part("agent_id", key.agent_id),
    )


def search_words(message: ChatMessage) -> str:
    """The message's searchable words (:func:`search_term`), space-separated, bounded in
    length.

    The text is read in pieces cut before ASCII punctuation or white space (where no
    normalization or word joins across), and reading stops once the words pass the bound: the first
    :data:`MAX_SEARCH_CHARS` are what tokenizing all of it gives, but a 100 MB tool result
    no longer holds the event loop for a minute making words that are then cut off.
    """
    text = message_search_text(message)
    terms: list[str] = []
    length = -1  # of the words joined by spaces
    start = 0
    while start < len(text) and length <= MAX_SEARCH_CHARS:
        cut = _CUT.search(text, start + _PIECE_CHARS)
        end = cut.start() if cut is not None else len(text)
        for word in tokenize(text[start:end]):
            term = search_term(word)
            terms.append(term)
            length += len(term) + 1
            if length > MAX_SEARCH_CHARS:
                break
        start = end
    words = " ".join(terms)
    if len(words) > MAX_SEARCH_CHARS:
        words = words[:MAX_SEARCH_CHARS].rpartition(" ")[0]
    return words


def oversized(*columns: Sequence[str], extra: int = 0) -> int | None:
    """The UTF-8 size of the text a call would send (``columns`` and ``extra`` bytes more)
    when it is over :data:`MAX_CALL_BYTES`, else ``None`` (counted without encoding while
    it cannot be)."""
    chars = sum(len(text) for column in columns for text in column)
    if chars * 4 + extra <= MAX_CALL_BYTES:  # a code point is at most 4 bytes of UTF-8
        return None
    size = extra + sum(
        len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        for column in columns
        for text in column
    )
    return size if size > MAX_CALL_BYTES else None
