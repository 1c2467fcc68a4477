"""A state type defined in an importable module, for LangGraph's strict msgpack allowlist."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Info:
    n: int
