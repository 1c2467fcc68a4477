"""The ``Forward*`` mixins of earlier releases, kept importable (deprecated) so that layers
written against them keep working: each is a mixin of forwarders for its abilities, which a
layer without a declaration then transforms (:mod:`.declaring`). New layers declare
``abilities = Abilities(...)`` instead."""

from __future__ import annotations

import functools
from typing import Final

from storage.abilities.forwarding import forward
from storage.abilities.protocols import (
    CheckpointStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    ability_methods,
)

__all__ = ["LEGACY_MIXINS", "legacy_mixin"]

LEGACY_MIXINS: Final[dict[str, tuple[type, ...]]] = {
    "ForwardListing": (ListableStorage,),
    "ForwardSequenced": (SequencedStorage,),
    "ForwardCheckpoints": (SequencedStorage, CheckpointStorage),
    "ForwardReplace": (ReplaceableStorage,),
    "ForwardSessions": (SessionListing,),
    "ForwardSearch": (SearchableStorage,),
    "ForwardRecords": (RecordStorage,),
    "ForwardRetention": (RetentionStorage,),
}


@functools.cache
def legacy_mixin(name: str) -> type:
    """The deprecated mixin ``name`` (one class per name)."""
    abilities = LEGACY_MIXINS[name]
    namespace: dict[str, object] = {
        method: forward(getattr(ability, method))
        for ability in abilities
        for method in ability_methods(ability)
    }
    namespace["__doc__"] = (
        f"Deprecated: forwards {', '.join(a.__name__ for a in abilities)} to ``self.inner``; "
        "declare ``abilities = Abilities(...)`` on the layer instead."
    )
    namespace["__module__"] = "storage.abilities"
    return type(name, (), namespace)
