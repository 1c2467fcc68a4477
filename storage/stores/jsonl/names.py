"""Where a key's files are: each key part encoded into one safe file name, hashed when long.

Layout under the store's root (every name is built by :func:`encode_name`, never from raw
text)::

    <user>/<session>/.lock            flock + the session's sequence counter
    <user>/<session>/.summary         cached per-file counts and times (``sessions``)
    <user>/<session>/<agent>.jsonl    the conversation: a header line, then one message or
                                      record per line
    <user>/<session>/<agent>.key      only when a part was hashed: the full key (the sidecar)
    <user>/<session>/<agent>.ckpt     the summary checkpoint (``checkpoints``)
    <user>/<session>/<agent>.ckpts    every version of that checkpoint, one line each
    <user>/<session>/<agent>.lease    the summarizing lease (``leases``)

Every file of one key is named ``<agent><suffix>`` or ``.<agent><suffix>.tmp`` (its temporary
file); an encoded name never holds a dot, so :func:`is_key_file` finds exactly a key's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from typing import Final
from urllib.parse import unquote_to_bytes

import attrs

from storage.message import ChatKey
from storage.stores.jsonl.fsutil import write_atomic

LOCK_NAME: Final = ".lock"
DATA_SUFFIX: Final = ".jsonl"
KEY_SUFFIX: Final = ".key"
CKPT_SUFFIX: Final = ".ckpt"
LEASE_SUFFIX: Final = ".lease"
VERSIONS_SUFFIX: Final = CKPT_SUFFIX + "s"
SUMMARY_NAME: Final = ".summary"

_PLAIN: Final = re.compile(r"[a-z0-9_-]+")
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
# Device names Windows reserves whatever the case or extension.
_RESERVED: Final = frozenset(
    {"con", "prn", "aux", "nul"} | {f"com{i}" for i in range(10)} | {f"lpt{i}" for i in range(10)}
)
MAX_NAME: Final = 200  # bytes; leaves room under NAME_MAX (255) for ".jsonl" and temp names
_HASH_KEEP: Final = 100  # readable prefix kept in front of a hashed name


def _utf8(text: str) -> bytes:
    # surrogatepass: a key part may hold a lone surrogate; it still maps to one distinct name.
    return text.encode("utf-8", "surrogatepass")


def encode_name(part: str) -> str:
    """The file-system name of one key part: lowercase, safe on every file system, injective.

    ``[a-z0-9_-]`` stay as they are; every other character (upper case, ``.``, ``/``, ``%``,
    ``~``, non-ASCII) becomes ``%xx`` per UTF-8 byte with lowercase hex, so names never differ
    only by case and never contain a separator or a dot. A Windows device name (``con``,
    ``nul``, ``com1``, ...) gets its first letter escaped. A name longer than
    :data:`MAX_NAME` bytes becomes a readable prefix, ``~`` and the SHA-256 of the part (``~``
    never appears otherwise, so a hashed name cannot equal a plain one).
    """
    if _PLAIN.fullmatch(part) is None:
        name = "".join(
            ch if ch in _SAFE else "".join(f"%{b:02x}" for b in _utf8(ch)) for ch in part
        )
    else:
        name = part
    if name in _RESERVED:
        name = f"%{ord(name[0]):02x}{name[1:]}"
    if len(name) > MAX_NAME:
        cut = _HASH_KEEP
        split = name.rfind("%", cut - 2, cut)  # do not cut an escape in two
        if split != -1:
            cut = split
        name = f"{name[:cut]}~{hashlib.sha256(_utf8(part)).hexdigest()}"
    return name


def decode_name(name: str) -> str | None:
    """The key part a plain name stands for, or ``None`` (hashed, or not a name we make)."""
    if "~" in name:
        return None
    try:
        part = unquote_to_bytes(name).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return part if part and encode_name(part) == name else None


@attrs.frozen(slots=True)
class Paths:
    """The files of one key (``data``, ``ckpt``, ``lease`` empty for a whole session)."""

    user_dir: str
    session_dir: str
    lock: str
    data: str
    sidecar: str | None  # set when a part was hashed: the full key lives there
    ckpt: str = ""
    lease: str = ""

    @property
    def versions(self) -> str:
        """Every version of the key's checkpoint, one JSON line each (``<agent>.ckpts``)."""
        return self.ckpt + "s" if self.ckpt else ""

    @property
    def agent_name(self) -> str:
        """The encoded agent part (``""`` for a whole session)."""
        return os.path.basename(self.data)[: -len(DATA_SUFFIX)] if self.data else ""


@lru_cache(maxsize=4096)
def key_paths(root: str, user_id: str, session_id: str, agent_id: str) -> Paths:
    """The paths of the key ``(user_id, session_id, agent_id)`` under ``root``."""
    user = encode_name(user_id)
    session = encode_name(session_id)
    agent = encode_name(agent_id)
    user_dir = os.path.join(root, user)
    session_dir = os.path.join(user_dir, session)
    hashed = "~" in user or "~" in session or "~" in agent
    return Paths(
        user_dir,
        session_dir,
        os.path.join(session_dir, LOCK_NAME),
        os.path.join(session_dir, agent + DATA_SUFFIX),
        os.path.join(session_dir, agent + KEY_SUFFIX) if hashed else None,
        os.path.join(session_dir, agent + CKPT_SUFFIX),
        os.path.join(session_dir, agent + LEASE_SUFFIX),
    )


_KEY_SUFFIXES: Final = (DATA_SUFFIX, KEY_SUFFIX, CKPT_SUFFIX, VERSIONS_SUFFIX, LEASE_SUFFIX)


def is_key_file(name: str, agent_name: str) -> bool:
    """Whether the file ``name`` of a session directory belongs to the agent ``agent_name``:
    ``<agent><suffix>`` or the temporary ``.<agent><suffix>.tmp`` a rewrite of it leaves."""
    if name.startswith(".") and name.endswith(".tmp"):
        name = name[1:-4]
    return name.startswith(agent_name) and name[len(agent_name) :] in _KEY_SUFFIXES


def session_paths(user_dir: str, session_dir: str) -> Paths:
    """The paths of a session found on disk: its directories and lock, no agent's file."""
    return Paths(user_dir, session_dir, os.path.join(session_dir, LOCK_NAME), "", None)


def write_sidecar(path: str, key: ChatKey) -> None:
    """Write the full key next to a file whose name was hashed (atomically: temp + rename).

    Raises:
        OSError: the sidecar cannot be written.
    """
    body = json.dumps([key.user_id, key.session_id, key.agent_id]).encode("ascii") + b"\n"
    write_atomic(path, body)


def read_sidecar(path: str) -> list[str] | None:
    """The key parts a sidecar holds, or ``None`` when it is missing or not a key."""
    try:
        with open(path, "rb") as f:
            parts = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) and p for p in parts):
        return parts
    return None


def file_paths(user_dir: str, session_dir: str, name: str) -> Paths:
    """The paths of the key whose data file ``name`` was found in ``session_dir``."""
    stem = name[: -len(DATA_SUFFIX)]
    sidecar = os.path.join(session_dir, stem + KEY_SUFFIX)
    return Paths(
        user_dir,
        session_dir,
        os.path.join(session_dir, LOCK_NAME),
        os.path.join(session_dir, name),
        sidecar if "~" in stem or "~" in session_dir else None,
        os.path.join(session_dir, stem + CKPT_SUFFIX),
        os.path.join(session_dir, stem + LEASE_SUFFIX),
    )
