"""The hold of a key whose compaction could not bring its view under the budget, kept in the
checkpoint so that every instance (and a restarted worker) takes the same decision.

A compaction that leaves the view over the trigger holds the key: no new attempt until the
view has grown by ``step`` (budget unit) or a new turn has started in its raw tail (a new
user message moves the boundary a compaction may cut at, so more can be summarized), or,
when its newest turn is over the trigger on its own (a long agent turn, cut between tool-call
groups), a new group has started in it (a new assistant message: the older groups can go).
The hold is derived from stored data only: it is written into the checkpoint's first summary
message as ``metadata["chatlayers"]["hold"] = {"unit": ..., "size": ..., "turns": ...,
"groups": ...}`` (``groups`` only for a long turn) and read back by every instance that loads
or installs that checkpoint; the view never shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from storage.message import ChatMessage, thaw

__all__ = ["Hold", "Unit", "read_hold", "with_hold", "without_hold"]

Unit = Literal["tokens", "messages"]


@attrs.frozen
class Hold:
    """A held key's release marks.

    Attributes:
        size: the view's size (budget unit) at which a new attempt is made.
        turns: user messages in the view's raw tail when the hold was set; one more (a new
            turn) releases the hold as well.
        groups: assistant messages in the raw tail when the hold was set, when its newest
            turn was over the trigger on its own; one more (a new tool-call group) releases
            the hold as well. ``None``: the newest turn was not.
    """

    size: int
    turns: int
    groups: int | None = None


def _own(message: ChatMessage) -> Mapping[str, object] | None:
    marker = message.metadata.get("chatlayers")
    return marker if isinstance(marker, Mapping) else None


def read_hold(messages: Sequence[ChatMessage], unit: Unit) -> Hold | None:
    """The hold stored in a checkpoint's ``messages`` (``None``: none, or one counted in
    another unit, i.e. written under another budget)."""
    for message in messages:
        marker = _own(message)
        found = marker.get("hold") if marker is not None else None
        if isinstance(found, Mapping):
            size, turns, groups = found.get("size"), found.get("turns"), found.get("groups")
            if found.get("unit") == unit and type(size) is int and type(turns) is int:
                return Hold(size, turns, groups if type(groups) is int else None)
            return None
    return None


def with_hold(messages: Sequence[ChatMessage], hold: Hold | None, unit: Unit) -> list[ChatMessage]:
    """``messages`` with ``hold`` written into the first summary message that is not a
    verbatim copy (none there: unchanged)."""
    out = list(messages)
    if hold is None:
        return out
    for index, message in enumerate(out):
        marker = _own(message)
        if marker is None or not marker.get("summary") or marker.get("verbatim"):
            continue
        meta = thaw(message.metadata)
        own = dict(meta["chatlayers"])
        own["hold"] = {"unit": unit, "size": hold.size, "turns": hold.turns}
        if hold.groups is not None:
            own["hold"]["groups"] = hold.groups
        meta["chatlayers"] = own
        out[index] = attrs.evolve(message, metadata=meta)
        break
    return out


def without_hold(message: ChatMessage) -> ChatMessage:
    """``message`` without a stored hold (unchanged when it has none)."""
    marker = _own(message)
    if marker is None or "hold" not in marker:
        return message
    meta = thaw(message.metadata)
    own = dict(meta["chatlayers"])
    own.pop("hold", None)
    meta["chatlayers"] = own
    return attrs.evolve(message, metadata=meta)
