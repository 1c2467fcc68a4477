"""Token counting with tiktoken, offline: the budgets of the summarizing layer and the sizes
``chatlayers replay`` reports (``summarizers.count_tokens`` and :mod:`summarizers.tokens` are
the public names; they re-export this module).

tiktoken downloads its encoding files on first use, which cannot work without network. The
files are looked up, without any download, in this order:

1. ``TIKTOKEN_CACHE_DIR`` (or ``DATA_GYM_CACHE_DIR``) when the user set it: the file must be
   there, or a ``ConfigError`` names it.
2. ``storage/_tiktoken/`` if the distribution ships the files there.
3. litellm's bundled copies in ``litellm/litellm_core_utils/tokenizers/`` (the ``llm`` extra:
   ``cl100k_base``, ``o200k_base``, ``p50k_base``), found without importing litellm.

For 2 and 3, ``TIKTOKEN_CACHE_DIR`` is pointed at that directory (tiktoken reads only that
variable). Each file's SHA-256 is checked first, because on a mismatch tiktoken would delete
the file and download it again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from storage.errors import ConfigError
from storage.message import ChatMessage

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "DEFAULT_ENCODING",
    "TokenCounter",
    "context_window",
    "count_tokens",
    "encoding_for_model",
    "get_encoding",
    "message_tokens",
]

DEFAULT_ENCODING: Final = "o200k_base"
"""Used for models tiktoken does not know (other providers): an approximation."""

_BASE_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/"
# encoding -> (file it is built from, its SHA-256), as in tiktoken_ext/openai_public.py.
_FILES: Final[Mapping[str, tuple[str, str]]] = {
    "o200k_base": (
        "o200k_base",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "o200k_harmony": (
        "o200k_base",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "cl100k_base",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "p50k_base": (
        "p50k_base",
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    ),
    "p50k_edit": (
        "p50k_base",
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    ),
    "r50k_base": (
        "r50k_base",
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    ),
}
_VENDORED_DIR: Final = Path(__file__).parent / "_tiktoken"
_INSTALL_HINT: Final = "pip install 'chatlayers[llm]'"

# OpenAI cookbook, "How to count tokens with tiktoken" (num_tokens_from_messages):
# https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken
_TOKENS_PER_MESSAGE: Final = 3
_TOKENS_PER_NAME: Final = 1
_REPLY_PRIMER: Final = 3

_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}
_dir_set_by_us = False


def count_tokens(messages: Iterable[ChatMessage], model: str = "gpt-4o") -> int:
    """Tokens ``messages`` take in a chat-completions request to ``model``.

    Counts, per the OpenAI cookbook's ``num_tokens_from_messages``
    (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken): 3 tokens per
    message, the role, the content text (and each content part's ``text``; images and other
    parts are not counted), 1 extra token for ``name`` plus its text, and 3 tokens for the
    reply primer (``<|start|>assistant<|message|>``) when there is at least one message.
    Beyond the cookbook, each tool call's name and arguments and a tool result's
    ``tool_call_id`` are counted as text. Special-token strings in text count as plain text.
    The count grows strictly with every message added; an empty list counts 0.

    Args:
        messages: the messages, oldest first.
        model: an OpenAI model name (a ``provider/`` prefix is ignored); unknown models are
            counted with ``o200k_base``.

    Raises:
        ConfigError: the encoding's file is not available offline (see the module docstring).
    """
    encode = encoding_for_model(model).encode_ordinary
    total = sum(_message_tokens(message, encode) for message in messages)
    return total + _REPLY_PRIMER if total else 0


def message_tokens(message: ChatMessage, model: str = "gpt-4o") -> int:
    """Tokens one message adds to a request (``count_tokens`` without the reply primer), so
    ``count_tokens(ms) == sum(message_tokens(m) for m in ms) + 3`` for a non-empty list.

    Raises:
        ConfigError: the encoding's file is not available offline.
    """
    return _message_tokens(message, encoding_for_model(model).encode_ordinary)


def _message_tokens(message: ChatMessage, encode: Callable[[str], list[int]]) -> int:
    total = _TOKENS_PER_MESSAGE + len(encode(message.role))
    content = message.content
    if isinstance(content, str):
        total += len(encode(content))
    elif content:
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    total += len(encode(text))
    for call in message.tool_calls:
        total += len(encode(call.name)) + len(encode(call.arguments))
    if message.tool_call_id:
        total += len(encode(message.tool_call_id))
    if message.name:
        total += _TOKENS_PER_NAME + len(encode(message.name))
    return total


class TokenCounter:
    """Per-message token counts for one model, remembered by message id, so a layer that
    keeps a running total never recounts a message it has seen (messages are immutable and
    ids unique per key).

    Args:
        model: as for :func:`count_tokens`.
        max_entries: counts remembered (least recently added forgotten first); default 100,000.

    Raises:
        ConfigError: on construction, the encoding's file is not available offline.
    """

    def __init__(self, model: str = "gpt-4o", *, max_entries: int = 100_000) -> None:
        self.model = model
        self._encode = encoding_for_model(model).encode_ordinary
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._max = max_entries

    def count(self, message: ChatMessage, key: str | None = None) -> int:
        """Tokens of ``message`` (:func:`message_tokens`), from memory after the first call.

        ``key`` replaces the message id as the memory key, for a changed copy of a message
        that keeps its id (a trimmed tool result in a summarized view).
        """
        key = message.id if key is None else key
        found = self._counts.get(key)
        if found is None:
            found = self._counts[key] = _message_tokens(message, self._encode)
            if len(self._counts) > self._max:
                self._counts.popitem(last=False)
        return found

    def total(self, messages: Iterable[ChatMessage]) -> int:
        """``count_tokens(messages)`` from remembered per-message counts."""
        total = sum(self.count(m) for m in messages)
        return total + _REPLY_PRIMER if total else 0


def context_window(model: str) -> int:
    """The context window of ``model`` in tokens (``max_input_tokens``), from the model data
    litellm ships in its package (``model_prices_and_context_window_backup.json``), read
    without importing litellm and without network.

    Raises:
        ConfigError: litellm is not installed, or it knows no context window for ``model``.
    """
    windows = _context_windows()
    for name in (model, model.rsplit("/", 1)[-1]):
        found = windows.get(name)
        if found:
            return found
    raise ConfigError(
        f"no context window known for model {model!r} in litellm's bundled model data"
    )


@functools.cache
def _context_windows() -> dict[str, int]:
    spec = importlib.util.find_spec("litellm")
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise ConfigError(f"model context windows need litellm's model data: {_INSTALL_HINT}")
    path = Path(next(iter(locations))) / "model_prices_and_context_window_backup.json"
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read litellm's model data {str(path)!r}: {exc}") from exc
    out: dict[str, int] = {}
    for name, info in data.items():
        if isinstance(info, dict):
            window = info.get("max_input_tokens") or info.get("max_tokens")
            if isinstance(window, int) and window > 0:
                out[name] = window
    return out


def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The tiktoken encoding for ``model`` (``o200k_base`` for models tiktoken does not know).

    Raises:
        ConfigError: the encoding's file is not available offline.
    """
    import tiktoken

    try:
        name = tiktoken.encoding_name_for_model(model.rsplit("/", 1)[-1])
    except KeyError:
        name = DEFAULT_ENCODING
    return get_encoding(name)


def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, loaded once from local files, never downloaded.

    Loading takes about 0.1-0.3 s (once per process and encoding); later calls are a dict read.

    Raises:
        ConfigError: ``name`` is not one of the encodings that can be loaded offline, or its
            file is missing or corrupt.
    """
    encoding = _encodings.get(name)
    if encoding is not None:
        return encoding
    with _lock:
        encoding = _encodings.get(name)
        if encoding is None:
            encoding = _load(name)
            _encodings[name] = encoding
    return encoding


def _load(name: str) -> tiktoken.Encoding:
    global _dir_set_by_us
    try:
        source, sha256 = _FILES[name]
    except KeyError:
        raise ConfigError(
            f"tiktoken encoding {name!r} cannot be loaded offline "
            f"(supported: {', '.join(sorted(_FILES))})"
        ) from None
    file_name = hashlib.sha1(
        (_BASE_URL + source + ".tiktoken").encode(), usedforsecurity=False
    ).hexdigest()  # tiktoken names cached files by the sha1 of their URL
    user_dir = None
    if not _dir_set_by_us:
        user_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if user_dir is not None:
        if not user_dir or not _has_file(Path(user_dir) / file_name, sha256):
            raise ConfigError(
                f"TIKTOKEN_CACHE_DIR={user_dir!r} does not hold a valid {source}.tiktoken as "
                f"{file_name!r}; unset it to use the encodings litellm ships ({_INSTALL_HINT}), "
                "or copy the file there"
            )
    else:
        for directory in _candidate_dirs():
            if _has_file(directory / file_name, sha256):
                os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
                _dir_set_by_us = True
                break
        else:
            raise ConfigError(
                f"tiktoken encoding {name!r} is not available offline: install litellm, which "
                f"ships it ({_INSTALL_HINT}), or set TIKTOKEN_CACHE_DIR to a directory holding "
                f"{source}.tiktoken saved as {file_name!r}"
            )
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a tiktoken failure must not escape the library's error tree
        raise ConfigError(f"tiktoken could not load encoding {name!r}: {exc!r}") from exc


def _candidate_dirs() -> list[Path]:
    dirs = [_VENDORED_DIR]
    # find_spec locates litellm without importing it (its import takes seconds).
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            dirs.append(Path(location) / "litellm_core_utils" / "tokenizers")
    return dirs


def _has_file(path: Path, sha256: str) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == sha256
