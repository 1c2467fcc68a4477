"""Which fields of a message carry text, and scrubbing each of them (see :class:`PIIScrubber`).

A message's content, tool-call arguments, legacy ``extra`` fields and JSON-like metadata
values; content parts (OpenAI and agent-squad shapes), URLs of image parts, tool-use inputs
and tool-result blocks: each function returns its input itself
when nothing changed, so an unchanged message is never copied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from storage.message import ChatMessage, ToolCall, trusted_message, trusted_tool_call
from storage.pii.run import Run

__all__ = ["scrub_json_value", "scrub_message", "scrub_part", "scrub_value"]


def _scrub_url(url: str, run: Run) -> str:
    """A URL's text (path, query string, fragment); a ``data:`` URL is payload: kept."""
    if url[:5].lower() == "data:":
        return url
    return run.text(url)


def _with(part: Mapping[str, Any], field: str, new: Any) -> Mapping[str, Any] | dict[str, Any]:
    return part if new is part[field] else {**part, field: new}


def scrub_part(part: Any, scrub: Callable[[str], str], run: Run) -> Any:
    """Scrub one content part; ``part`` itself when nothing changed.

    OpenAI parts: ``text``; ``refusal``; ``image_url.url`` (a ``data:`` URL is base64 payload
    and is kept); ``file.filename`` (``file_data`` is base64 and ``file_id`` an id: kept);
    ``input_audio`` is payload only. agent-squad (Bedrock) blocks: ``text``; ``toolResult``
    whose ``content`` holds ``{"text"}`` and ``{"json"}`` blocks (string values scrubbed,
    keys kept); ``toolUse.input`` (the call's arguments as a JSON object).
    """
    if not isinstance(part, Mapping):
        return part
    out: Mapping[str, Any] = part
    for field in ("text", "refusal"):
        value = out.get(field)
        if isinstance(value, str):
            new = scrub(value)
            if new != value:
                out = {**out, field: new}
    for field, scrub_field in _PART_FIELDS:
        if field in out:
            out = scrub_field(out, run)
    return out


def _scrub_image_url(part: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    image = part.get("image_url")
    if isinstance(image, Mapping) and isinstance(image.get("url"), str):
        url = _scrub_url(image["url"], run)
        if url != image["url"]:
            return {**part, "image_url": {**image, "url": url}}
    elif isinstance(image, str):  # the older shorthand: "image_url": "https://..."
        url = _scrub_url(image, run)
        if url != image:
            return {**part, "image_url": url}
    return part


def _scrub_file(part: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    file = part.get("file")
    if isinstance(file, Mapping) and isinstance(file.get("filename"), str):
        filename = run.text(file["filename"])
        if filename != file["filename"]:
            return {**part, "file": {**file, "filename": filename}}
    return part


def _scrub_tool_result(part: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    result = part.get("toolResult")
    if isinstance(result, Mapping) and isinstance(result.get("content"), list | tuple):
        blocks = [_scrub_block(block, run) for block in result["content"]]
        if any(new is not old for new, old in zip(blocks, result["content"], strict=True)):
            return {**part, "toolResult": {**result, "content": blocks}}
    return part


def _scrub_tool_use(part: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    use = part.get("toolUse")
    if isinstance(use, Mapping) and isinstance(use.get("input"), Mapping):
        new_input = scrub_json_value(use["input"], run, None)
        if new_input is not use["input"]:
            return {**part, "toolUse": {**use, "input": new_input}}
    return part


# The fields of a part that need more than a scrubbed string, each with its scrubber.
_PART_FIELDS: Final[
    tuple[tuple[str, Callable[[Mapping[str, Any], Run], Mapping[str, Any]]], ...]
] = (
    ("image_url", _scrub_image_url),
    ("file", _scrub_file),
    ("toolResult", _scrub_tool_result),
    ("toolUse", _scrub_tool_use),
)


def _scrub_block(block: Any, run: Run) -> Any:
    """One block of an agent-squad ``toolResult``: ``{"text": ...}`` or ``{"json": ...}``."""
    if not isinstance(block, Mapping):
        return block
    out: Mapping[str, Any] = block
    text = block.get("text")
    if isinstance(text, str):
        new = run.payload(text)
        if new != text:
            out = {**out, "text": new}
    if "json" in block:
        value = scrub_json_value(block["json"], run, None)
        if value is not block["json"]:
            out = {**out, "json": value}
    return out


def scrub_json_value(value: Any, run: Run, key: str | None) -> Any:
    """Scrub JSON data already parsed (a tool's input or result): string values, and whole
    integers that are PII; keys kept; a value under a key that names an entity (``"dob"``,
    ``"zip"``) is replaced whole. ``value`` itself when unchanged. Depth is bounded by
    validation (``MAX_DEPTH``)."""
    if isinstance(value, str):
        keyed = run.keyed(key, value) if key is not None else None
        if keyed is not None:
            return keyed
        scrubbed = run.payload(value)
        return value if scrubbed == value else scrubbed
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        digits = str(value)
        if key is not None and value >= 0:
            keyed = run.keyed(key, digits)
            if keyed is not None:
                return keyed
        if value >= 0 and len(digits) >= 7:
            replaced = run.integer(digits)
            if replaced is not None:
                return replaced
        return value
    if isinstance(value, Mapping):
        items = {
            k: scrub_json_value(v, run, k if isinstance(k, str) else None) for k, v in value.items()
        }
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        values = [scrub_json_value(v, run, key) for v in value]
        return value if all(a is b for a, b in zip(values, value, strict=True)) else values
    return value


def scrub_value(value: Any, run: Run) -> Any:
    """Scrub every string inside JSON-like ``value`` (keys kept); ``value`` itself if unchanged."""
    if isinstance(value, str):
        scrubbed = run.payload(value)
        return value if scrubbed == value else scrubbed
    if isinstance(value, Mapping):
        items = {k: scrub_value(v, run) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        values = [scrub_value(v, run) for v in value]
        return value if all(a is b for a, b in zip(values, value, strict=True)) else values
    return value


_AS_STORED: Final = frozenset({"content", "tool_calls"})


def scrub_message(message: ChatMessage, run: Run) -> ChatMessage:
    """Scrub every field of ``message`` that carries text (see :mod:`storage.pii.scrubber`);
    ``message`` itself when nothing changed, else a copy (same ``id``, ``created_at``,
    ``present``)."""
    scrub = run.payload if message.role == "tool" else run.text
    changes: dict[str, Any] = {}
    if content := message.content:
        _note(changes, "content", content, _scrub_content(content, scrub, run))
    if calls := message.tool_calls:
        _note(changes, "tool_calls", calls, _scrub_tool_calls(calls, run))
    if extra := message.extra:
        _note(changes, "extra", extra, _scrub_extra(extra, run))
    if metadata := message.metadata:
        _note(changes, "metadata", metadata, _scrub_metadata(metadata, run))
    return _with_changes(message, changes) if changes else message


def _note(changes: dict[str, Any], field: str, old: object, new: object) -> None:
    if new is not old:
        changes[field] = new


def _scrub_content(
    content: str | tuple[Any, ...], scrub: Callable[[str], str], run: Run
) -> str | tuple[Any, ...]:
    if isinstance(content, str):
        new_content = scrub(content)
        return content if new_content == content else new_content
    if isinstance(content, tuple):
        parts = [scrub_part(part, scrub, run) for part in content]
        if any(new is not old for new, old in zip(parts, content, strict=True)):
            return tuple(parts)
    return content


def _scrub_tool_calls(calls: tuple[ToolCall, ...], run: Run) -> tuple[ToolCall, ...]:
    """The calls with their arguments scrubbed as JSON payloads; ``calls`` if unchanged."""
    new_calls = []
    for call in calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            new_arguments = run.payload(arguments)
            if new_arguments != arguments:
                call = trusted_tool_call(call.id, call.name, new_arguments, call.type)
        new_calls.append(call)
    if any(new is not old for new, old in zip(new_calls, calls, strict=True)):
        return tuple(new_calls)
    return calls


def _scrub_extra(extra: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    """Legacy ``function_call`` arguments, the ``refusal`` text and the assistant audio's
    ``transcript`` (never its base64 ``data``); ``extra`` itself if unchanged."""
    out = dict(extra)
    call = extra.get("function_call")
    if isinstance(call, Mapping) and isinstance(call.get("arguments"), str):
        arguments = run.payload(call["arguments"])
        if arguments != call["arguments"]:
            out["function_call"] = {**call, "arguments": arguments}
    refusal = extra.get("refusal")
    if isinstance(refusal, str):
        out["refusal"] = run.text(refusal)
    audio = extra.get("audio")
    if isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str):
        transcript = run.text(audio["transcript"])
        if transcript != audio["transcript"]:
            out["audio"] = {**audio, "transcript": transcript}
    changed = any(out[k] is not extra[k] and out[k] != extra[k] for k in out)
    return out if changed else extra


def _scrub_metadata(metadata: Mapping[str, Any], run: Run) -> Mapping[str, Any]:
    # Adapters keep framework data here (reasoning summaries, LangChain kwargs, citations):
    # it reaches the store, so its string values are scrubbed too; the library's own
    # ``chatlayers`` markers are kept.
    scrubbed = {k: v if k == "chatlayers" else scrub_value(v, run) for k, v in metadata.items()}
    if any(scrubbed[k] is not v for k, v in metadata.items()):
        return scrubbed
    return metadata


def _with_changes(message: ChatMessage, changes: dict[str, Any]) -> ChatMessage:
    content = changes.get("content", message.content)
    if changes.keys() <= _AS_STORED and not isinstance(content, tuple):
        # Text and tool calls are stored as they are: no converter to run (evolve's cost).
        return trusted_message(
            message.role,
            content,
            changes.get("tool_calls", message.tool_calls),
            message.tool_call_id,
            message.name,
            message.id,
            message.created_at,
            message.metadata,
            message.extra,
            message.present,
        )
    return attrs.evolve(message, **changes)
