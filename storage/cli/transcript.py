"""Readable exports: a Markdown transcript and pretty JSON documents of conversations.

Markdown (Swarms' MEMORY.md shape): one ``##`` heading per conversation, one ``###`` heading
per message with its role and time, text as written, tool calls and tool results in fenced
blocks (a fence longer than any backtick run inside, so no content can close it early).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from storage.message import ChatKey, ChatMessage

__all__ = ["fence", "markdown_conversation"]

_TICKS = re.compile(r"`+")


def fence(text: str, info: str = "") -> str:
    """``text`` in a fenced code block that nothing inside can close."""
    longest = max((len(m.group()) for m in _TICKS.finditer(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def _time(message: ChatMessage) -> str:
    if message.created_at is None:
        return "time unknown"
    return message.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty_json(text: str) -> tuple[str, str]:
    """``(text, info)``: JSON re-indented for reading, anything else as is."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text, ""
    return json.dumps(value, ensure_ascii=False, indent=2), "json"


_HEADING = re.compile(r"^( {0,3})(#{1,6})(?=\s|$)", re.M)


def _text(text: str) -> str:
    """Message text with its own Markdown headings escaped (``\\#``), so a system prompt's
    ``# Policy`` cannot become a heading of the transcript."""
    return _HEADING.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def _message(message: ChatMessage) -> list[str]:
    role = message.role + (" (summary)" if message.is_summary else "")
    if message.role == "tool":
        role = f"tool result `{message.tool_call_id}`"
    lines = [f"### {role} · {_time(message)}", ""]
    text = message.text
    if message.role == "tool":
        body, info = _pretty_json(text)
        lines += [fence(body, info), ""]
    elif text:
        lines += [_text(text), ""]
    for call in message.tool_calls:
        body, info = _pretty_json(call.arguments)
        lines += [f"**tool call** `{call.name}` (`{call.id}`)", "", fence(body, info), ""]
    if message.content is None and not message.tool_calls and message.role != "tool":
        lines += ["*(no content)*", ""]
    return lines


def markdown_conversation(key: ChatKey, messages: Sequence[ChatMessage], view: str) -> str:
    """One conversation as Markdown (``view``: ``"raw record"`` or ``"model view"``)."""
    lines = [
        f"## {key.user_id} / {key.session_id} / {key.agent_id}",
        "",
        f"*{view}, {len(messages)} message{'s' if len(messages) != 1 else ''}*",
        "",
    ]
    for message in messages:
        lines += _message(message)
    return "\n".join(lines) + "\n"
