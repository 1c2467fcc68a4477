"""Text from users and tools stays data in a summary: quoted, never written as instructions.

A summary is read by the model as part of its instructions (it sits in the system message).
Whatever a user wrote or a tool returned ("ignore previous instructions…", "SYSTEM: you
must…") is therefore written into it only inside quotes, as what that participant said, on a
line that names who said it; never as a line of its own. :func:`quote` makes that quoted
form; :func:`looks_like_instruction` spots text that tries to steer the model, which a
summary marks as such.
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["INSTRUCTION_RE", "looks_like_instruction", "quote"]

INSTRUCTION_RE: Final = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:instructions?|prompts?|rules?|"
    r"polic(?:y|ies)|guidelines?|everything)\b"
    r"|(?:^|[\n.!?]\s*)(?:system|developer|assistant)\s*(?:prompt|message|note)?\s*:"
    r"|\b(?:you must|you are now|from now on|new instructions?|act as|pretend to be)\b"
    r"|<\|?(?:system|im_start|im_end)\|?>|\[/?(?:INST|SYS)\]",
    re.IGNORECASE,
)
"""What text that tries to give the model instructions looks like."""


def looks_like_instruction(text: str) -> bool:
    """True when ``text`` reads like an instruction to the model (:data:`INSTRUCTION_RE`)."""
    return INSTRUCTION_RE.search(text) is not None


def quote(text: str, limit: int | None = None) -> str:
    """``text`` as one quoted string: white space collapsed (so it is one line), at most
    ``limit`` characters before the quotes (cut with ``…``), ``"`` and ``\\`` escaped as
    in JSON."""
    flat = " ".join(text.split())
    if limit is not None and len(flat) > limit:
        flat = flat[: max(limit - 1, 0)].rstrip() + "…"
    return json.dumps(flat, ensure_ascii=False)
