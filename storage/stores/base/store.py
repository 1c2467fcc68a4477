"""``BaseStore``: every template together, and what a store class declares by its hooks.

A store offers an optional ability exactly when it implements that ability's hooks
(:data:`ABILITY_HOOKS`, and those :data:`REQUIRED_HOOKS` names); the base hides the public
methods of an ability whose hooks a store does not implement (they are ``None`` on the
class, which is how a ``runtime_checkable`` protocol is told "not this one"), so
:func:`storage.abilities.find_ability` never finds a method that would raise
``NotImplementedError``. Implementing only some hooks of an ability is a ``TypeError`` when
the class is made. A store class that sets a public method of an
ability to ``None`` itself hides that ability, whatever its bases implement.
"""

from __future__ import annotations

import inspect
from typing import Any, Final

from storage.stores.base.checkpoints import CheckpointTemplate
from storage.stores.base.core import translated
from storage.stores.base.records import RecordsTemplate
from storage.stores.base.replace import ReplaceTemplate
from storage.stores.base.retention import RetentionTemplate
from storage.stores.base.search import SearchTemplate
from storage.stores.base.sequenced import SequencedTemplate
from storage.stores.base.sessions import SessionsTemplate
from storage.stores.base.timetravel import TimeTravelTemplate

__all__ = ["ABILITY_HOOKS", "BaseStore"]

#: Per optional ability (its protocol's name in :mod:`storage.abilities`): each public
#: method and the hook a store implements for it.
ABILITY_HOOKS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "SequencedStorage": (("head", "_head"), ("fetch_since", "_fetch_since")),
    "CheckpointStorage": (
        ("load_checkpoint", "_load_checkpoint"),
        ("save_checkpoint", "_save_checkpoint"),
        ("acquire_lease", "_acquire_lease"),
        ("release_lease", "_release_lease"),
    ),
    "ReplaceableStorage": (("replace", "_replace"), ("save_messages_if", "_save_messages_if")),
    "SessionListing": (("list_sessions", "_list_sessions"),),
    "SearchableStorage": (("search", "_search"),),
    "RecordStorage": (("save_record", "_save_record"), ("fetch_records", "_fetch_records")),
    "RetentionStorage": (("purge", "_purge"),),
    # fetch_as_of, provenance and fork are written over the timeline (fork also over
    # save_messages_if: REQUIRED_HOOKS).
    "TimeTravelStorage": (
        ("rewind", "_rewind"),
        ("fetch_timeline", "_timeline"),
        ("fetch_as_of", "_timeline"),
        ("provenance", "_timeline"),
        ("fork", "_timeline"),
    ),
}

#: Hooks of other abilities a store offering one must implement too.
REQUIRED_HOOKS: Final[dict[str, tuple[str, ...]]] = {
    "TimeTravelStorage": ("_save_messages_if",),
}


class BaseStore(
    SequencedTemplate,
    CheckpointTemplate,
    ReplaceTemplate,
    SessionsTemplate,
    SearchTemplate,
    RecordsTemplate,
    RetentionTemplate,
    TimeTravelTemplate,
):
    """The base of every base store.

    A store subclasses it, sets ``scheme`` and ``driver_errors`` (a tuple of its driver's
    exception types; an instance attribute when the driver is imported lazily), implements
    ``from_url`` and the hooks of what it offers: the ``ChatStorage`` ones (``_save``,
    ``_fetch``, ``_session_rows``, ``_delete``, ``_delete_user``, ``_list_keys``,
    ``_close``) and those of each optional ability (:data:`ABILITY_HOOKS`). The public
    methods are the base's (key and argument checks, the closed check, driver-error
    translation: once, here); a hook may return its result or an awaitable of it.

    A public coroutine a store class defines itself (a maintenance method such as
    ``compact``, or a subclass overriding a public method) still has its driver errors
    translated (:func:`~storage.stores.base.core.translated`).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.iscoroutinefunction(value):
                setattr(cls, name, translated(value))
        for ability, pairs in ABILITY_HOOKS.items():
            made = [_implements(cls, public, hook) for public, hook in pairs]
            if any(vars(cls).get(public, ...) is None for public, _ in pairs):
                made = [False] * len(pairs)  # the class hides the ability itself
            if all(made):
                lacking = [h for h in REQUIRED_HOOKS.get(ability, ()) if not _defines(cls, h)]
                if lacking:
                    raise TypeError(
                        f"{cls.__name__} implements {ability}, which also needs "
                        f"{', '.join(lacking)}"
                    )
                for public, _ in pairs:
                    if getattr(cls, public) is None:  # hidden by a base that lacked it
                        setattr(cls, public, getattr(BaseStore, public))
            elif any(made):
                missing = [hook for (_, hook), done in zip(pairs, made, strict=True) if not done]
                raise TypeError(
                    f"{cls.__name__} implements part of {ability}: add {', '.join(missing)}"
                )
            else:
                for public, _ in pairs:
                    setattr(cls, public, None)


def _implements(cls: type, public: str, hook: str) -> bool:
    """Whether ``cls`` implements ``hook``, or overrides ``public`` itself."""
    return _defines(cls, hook) or _defines(cls, public)


def _defines(cls: type, name: str) -> bool:
    """Whether a class of ``cls``'s MRO below the base defines ``name`` (not as ``None``)."""
    for klass in cls.__mro__:
        if klass in _BASES:
            return False
        if name in vars(klass):
            return vars(klass)[name] is not None
    return False


_BASES: Final = frozenset(BaseStore.__mro__)
