"""Read-only deep copies of JSON-like values: how messages hold content parts, metadata and
unknown fields (``MappingProxyType`` for mappings, tuples for lists), and writable copies back.

Shallow data (all real data) takes a recursive fast path; beyond a few levels an explicit stack
takes over, so no input can exhaust the call stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "EMPTY_MAPPING",
    "Content",
    "ContentInput",
    "ContentPart",
    "freeze",
    "freeze_content",
    "freeze_mapping",
    "thaw",
]

#: One content part: a read-only mapping such as ``{"type": "text", "text": "..."}``.
ContentPart = Mapping[str, Any]
#: What ``ChatMessage.content`` holds: text, ``None``, or a tuple of content parts.
Content = str | tuple[ContentPart, ...] | None
#: What ``ChatMessage(content=...)`` accepts: text, ``None`` or any sequence of parts.
ContentInput = str | Sequence[Mapping[str, Any]] | None
#: The one empty read-only mapping (``metadata`` and ``extra`` when there is none).
EMPTY_MAPPING: Final[Mapping[str, Any]] = MappingProxyType({})

# Beyond this depth freeze/thaw switch from recursion to an explicit stack: shallow data (all
# real data) keeps the fast recursive path, and no input can exhaust the call stack.
_RECURSE_DEPTH: Final = 16


def _rebuild(
    value: Any,
    make_map: Callable[[dict[Any, Any]], Any],
    make_seq: Callable[[list[Any]], Any],
) -> Any:
    """Rebuild nested JSON-like data bottom-up with an explicit stack (any depth)."""

    def open_frame(v: Any) -> list[Any] | None:
        if isinstance(v, Mapping):
            return [iter(v.items()), {}, True, None]
        if isinstance(v, list | tuple):
            return [iter(v), [], False, None]
        return None

    top = open_frame(value)
    if top is None:
        return value
    stack = [top]
    while True:
        frame = stack[-1]
        item: Any = next(frame[0], _DONE)
        if item is _DONE:
            stack.pop()
            built = make_map(frame[1]) if frame[2] else make_seq(frame[1])
            if not stack:
                return built
            parent = stack[-1]
            if parent[2]:
                parent[1][parent[3]] = built
            else:
                parent[1].append(built)
            continue
        if frame[2]:
            frame[3], child = item
        else:
            child = item
        nested = open_frame(child)
        if nested is not None:
            stack.append(nested)
        elif frame[2]:
            frame[1][frame[3]] = child
        else:
            frame[1].append(child)


_DONE: Final[Any] = object()


def _freeze(value: Any, depth: int) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if depth >= _RECURSE_DEPTH:
        return _rebuild(value, MappingProxyType, tuple)
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v, depth + 1) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple([_freeze(v, depth + 1) for v in value])
    return value


def _thaw(value: Any, depth: int) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if depth >= _RECURSE_DEPTH:
        return _rebuild(value, _identity, _identity)
    if isinstance(value, Mapping):
        return {k: _thaw(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v, depth + 1) for v in value]
    return value


def _identity(value: Any) -> Any:
    return value


def freeze(value: Any) -> Any:
    """Return a read-only deep copy of JSON-like data: dicts become mappings, lists tuples.

    Works at any nesting depth without recursing more than a few levels."""
    return _freeze(value, 0)


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: plain, mutable JSON-like data (new objects every call).

    Works at any nesting depth without recursing more than a few levels."""
    return _thaw(value, 0)


def freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata``/``extra`` in stored form: a read-only deep copy (the empty one for none)."""
    if not value:
        return EMPTY_MAPPING
    if isinstance(value, MappingProxyType):
        return value
    return freeze(value)  # type: ignore[no-any-return]


def freeze_content(value: ContentInput) -> Content:
    """``content`` in stored form: text and ``None`` as they are, parts as a tuple of
    read-only mappings."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return tuple([_freeze(part, 1) for part in value])
    return value  # type: ignore[return-value]  # wrong types: validate_message names them
