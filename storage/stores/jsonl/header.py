"""The header line of a JSONL file: its epoch, and in a rewound file the key's rewinds (the
line format is described in :mod:`storage.stores.jsonl.lines`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from storage.abilities import Rewind
from storage.codec import check_format_version

__all__ = [
    "HEADER_VERSION",
    "check_header",
    "file_epoch",
    "format_header",
    "head_epoch",
    "parse_full_header",
    "parse_header",
]

_HDR: Final = b'{"hdr":1,"epoch":"'
_ANY_HDR: Final = b'{"hdr":'
HEADER_VERSION: Final = 2  # the newest header this release writes (a rewound file's)


def format_header(epoch: str, rewinds: Sequence[Rewind] = ()) -> bytes:
    """The header line of a file (with its newline): version 1, or version 2 holding the
    key's ``rewinds`` (``epoch`` is the file's own epoch, without a rewind part)."""
    if not rewinds:
        return _HDR + epoch.encode("ascii") + b'"}\n'
    body = {"hdr": 2, "epoch": epoch, "rewinds": [r.to_json() for r in rewinds]}
    return json.dumps(body, separators=(",", ":")).encode("ascii") + b"\n"


def head_epoch(epoch: str, rewinds: Sequence[Rewind]) -> str:
    """The key's epoch (``Head.epoch``) of a file with its own ``epoch`` and ``rewinds``."""
    return f"{epoch}r{rewinds[-1].seq}" if rewinds else epoch


def file_epoch(epoch: str) -> str:
    """The file's own part of a key's epoch (the epoch without its rewind part)."""
    return epoch.partition("r")[0]


def parse_header(line: bytes) -> str | None:
    """The key's epoch a header line (without its newline) gives, or ``None``.

    Raises:
        SchemaVersionError: a header of a newer format version.
    """
    epoch = _v1_epoch(line)
    if epoch is not None:
        return epoch
    if line.startswith(_ANY_HDR):
        parsed = parse_full_header(line)
        if parsed is not None:
            return head_epoch(*parsed)
    return None


def _v1_epoch(line: bytes) -> str | None:
    """The epoch of a version-1 header line, or ``None``."""
    if line.startswith(_HDR) and line.endswith(b'"}'):
        epoch = line[len(_HDR) : -2]
        if epoch and epoch.isalnum() and epoch.isascii():
            return epoch.decode("ascii")
    return None


def parse_full_header(line: bytes) -> tuple[str, tuple[Rewind, ...]] | None:
    """``(file epoch, rewinds)`` of a header line, or ``None`` when it is not one.

    Raises:
        SchemaVersionError: a header of a newer format version.
    """
    epoch = _v1_epoch(line)
    if epoch is not None:
        return epoch, ()
    try:
        data = json.loads(line)
        version = data.get("hdr")
    except (ValueError, AttributeError, RecursionError):
        return None  # not a header: an unreadable line, skipped like any other
    if isinstance(version, int) and not isinstance(version, bool) and version > HEADER_VERSION:
        check_format_version(version, "a JSONL file's header")
    if version != 2:
        return None
    own = data.get("epoch")
    try:
        rewinds = tuple(Rewind.from_json(r) for r in data["rewinds"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not isinstance(own, str) or not own.isalnum() or not own.isascii() or "r" in own:
        return None
    return own, rewinds


def check_header(line: bytes) -> None:
    """Refuse a header (a first line starting ``{"hdr":``) of a newer format version.

    Raises:
        SchemaVersionError: its ``hdr`` is a number above :data:`HEADER_VERSION`.
    """
    parse_full_header(line)
