"""Which fields of a message carry text, and scrubbing each of them (see :class:`PIIScrubber`).

Content parts (OpenAI and agent-squad shapes), URLs of image parts, tool-use inputs and
tool-result blocks, and JSON-like metadata values: each function returns its input itself
when nothing changed, so an unchanged message is never copied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from storage.pii.run import Run

__all__ = ["scrub_json_value", "scrub_part", "scrub_value"]


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
    image = out.get("image_url")
    if isinstance(image, Mapping) and isinstance(image.get("url"), str):
        url = _scrub_url(image["url"], run)
        if url != image["url"]:
            out = {**out, "image_url": {**image, "url": url}}
    elif isinstance(image, str):  # the older shorthand: "image_url": "https://..."
        url = _scrub_url(image, run)
        if url != image:
            out = {**out, "image_url": url}
    file = out.get("file")
    if isinstance(file, Mapping) and isinstance(file.get("filename"), str):
        filename = run.text(file["filename"])
        if filename != file["filename"]:
            out = {**out, "file": {**file, "filename": filename}}
    result = out.get("toolResult")
    if isinstance(result, Mapping) and isinstance(result.get("content"), list | tuple):
        blocks = [_scrub_block(block, run) for block in result["content"]]
        if any(new is not old for new, old in zip(blocks, result["content"], strict=True)):
            out = {**out, "toolResult": {**result, "content": blocks}}
    use = out.get("toolUse")
    if isinstance(use, Mapping) and isinstance(use.get("input"), Mapping):
        new_input = scrub_json_value(use["input"], run, None)
        if new_input is not use["input"]:
            out = {**out, "toolUse": {**use, "input": new_input}}
    return out


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
