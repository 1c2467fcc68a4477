"""Optional abilities beside ``ChatStorage``: small protocols a store may implement.

``ChatStorage`` (``storage.protocol``) is what every store and layer must do. The protocols
here are what a store *can* do on top: list its keys, tell a cache whether it is current,
keep a summary checkpoint, replace a conversation atomically, list a user's sessions, search,
keep application records, purge old messages, fork, rewind and read a record as it stood
(:class:`TimeTravelStorage`). Every built-in store implements all of them.

Every layer declares, per ability, whether it passes it through unchanged, transforms it
(implements its methods: a scrubber scrubs a checkpoint's messages, an encrypting layer
encrypts them) or hides it (``abilities = Abilities(passes=..., transforms=...,
hides=...)``, checked when the class is made, :mod:`.declaring`); the forwarders are made
from the protocols' own methods (:mod:`.forwarding`). An ability is offered only when every
component below offers it too: :func:`find_ability` returns a stack only when *every*
component of its ``.inner`` chain has the ability, so nothing reaches a store around a
scrubber or an encrypting layer.

Adding an ability: its protocol (:mod:`.protocols`, listed in :data:`ABILITIES`), its
forwarders (:class:`~.forwarding.AbilityForwarders`), the stores' methods, and one word in
each layer's declaration.

Sequence numbers (``seq``) are the store's own: strictly increasing within a key in commit
order, never reused for the key while its record lives (its ``epoch``). A reader that tails a
key by sequence never misses a row committed later with a smaller number.
"""

from __future__ import annotations

import warnings

from storage.abilities.cursors import decode_session_cursor, encode_session_cursor
from storage.abilities.declaring import Abilities, find_ability
from storage.abilities.forwarding import AbilityForwarders, Forward, Hidden, forward
from storage.abilities.legacy import LEGACY_MIXINS, legacy_mixin
from storage.abilities.protocols import (
    ABILITIES,
    CheckpointStorage,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    TimeTravelStorage,
)
from storage.abilities.timeline import (
    AsOf,
    Rewind,
    Timeline,
    ViewKind,
    ViewProvenance,
    check_as_of,
    mark_rewound,
    rewound_at,
    view_kind,
)
from storage.abilities.values import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionInfo,
    SessionPage,
    SummaryCheckpoint,
    Tail,
)

__all__ = [
    "ABILITIES",
    "Abilities",
    "AbilityForwarders",
    "AsOf",
    "CheckpointStorage",
    "ConversationRecord",
    "DescribableStorage",
    "Forward",
    "Head",
    "Hidden",
    "ListableStorage",
    "RecordStorage",
    "ReplaceableStorage",
    "RetentionStorage",
    "Rewind",
    "SearchHit",
    "SearchableStorage",
    "SequencedStorage",
    "SessionInfo",
    "SessionListing",
    "SessionPage",
    "SummaryCheckpoint",
    "Tail",
    "TimeTravelStorage",
    "Timeline",
    "ViewKind",
    "ViewProvenance",
    "check_as_of",
    "decode_session_cursor",
    "encode_session_cursor",
    "find_ability",
    "forward",
    "mark_rewound",
    "rewound_at",
    "view_kind",
]


def __getattr__(name: str) -> type:
    if name in LEGACY_MIXINS:
        warnings.warn(
            f"storage.abilities.{name} is deprecated: declare the layer's abilities instead "
            "(abilities = Abilities(passes=..., transforms=..., hides=...))",
            DeprecationWarning,
            stacklevel=2,
        )
        return legacy_mixin(name)
    raise AttributeError(f"module 'storage.abilities' has no attribute {name!r}")
