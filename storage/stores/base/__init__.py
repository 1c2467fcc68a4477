"""The base every base store shares: templates over per-store hooks.

What it gives a store (so the five stores cannot drift apart):

- every public method, written once: the ``ChatStorage`` methods (:mod:`.core`) and those
  of each optional ability (:mod:`.sequenced`, :mod:`.checkpoints`, :mod:`.replace`,
  :mod:`.sessions`, :mod:`.search`, :mod:`.records`, :mod:`.retention`,
  :mod:`.timetravel`). Each checks the key
  and its arguments (:mod:`storage.stores.checks`, :func:`storage.history.prepare_batch`),
  refuses a closed store, calls the store's hook (``_save``, ``_head``, ``_replace``, ...)
  and turns the driver's exceptions into ``StorageUnavailableError`` (``raise ... from
  exc``), from one declared tuple of driver exceptions (``driver_errors``);
- the abilities a store offers are the hooks it implements (:mod:`.store`);
- the sorted ``list_keys``, the ``fetch_all_chats`` merge (``created_at``, then the store's
  sequence), retention on writes, ``describe()`` and the async context manager;
- ``corrupt_derived``: how many times the store met a derived record (a summary checkpoint, a
  head or tally, a search index) it could not use and ignored or rebuilt from the raw record
  instead (:mod:`storage.stores.derived`; each one is logged once);
- ``from_url(url, **options)``: each store builds itself from its own URL. ``url`` is the
  store segment as the user typed it (query included); ``options`` are constructor keyword
  options already converted by their declared types (``storage.config`` converts query and
  TOML options alike by the constructor's signature, and runs the ``Check`` of every
  annotated option first: :mod:`storage.stores.options`). A store with driver query
  parameters (``sslmode=...``) keeps those in the URL it gives its driver
  (:func:`storage.stores.urls.drop_query`).

Adding a store: subclass :class:`BaseStore`, set ``scheme``, implement ``from_url`` and the
hooks, add one line to the registry (``storage.config.registry``). A store is a thin class
whose hooks delegate to per-ability modules (``sessions``, ``checkpoints``, ``records``, ...).

URL helpers (:mod:`storage.stores.urls`): a file store calls ``path_from_url(url, scheme,
options=options)`` (SQLAlchemy's ``sqlite:///rel`` / ``sqlite:////abs`` / ``sqlite://:memory:``,
``jsonl://rel`` / ``jsonl:///abs``; query parameters other than its options refused); a server
store gives its driver ``drop_query(url, options)``; ``check_query`` refuses unknown ones.

Shared helpers: times in exact microseconds and the clock (:mod:`storage.stores.times`),
record epochs (:mod:`storage.stores.epochs`), checkpoint and record JSON
(:mod:`storage.stores.payloads`), scan search and snippets (:mod:`storage.search`).

Time, one convention for every store and layer: a ``clock`` constructor option,
``Callable[[], float]`` returning seconds since the Unix epoch (default ``time.time``). It is
read for lease expiry, the retention cut-off and ``purge_interval``; tests inject
:class:`storage.testing.FakeClock`. Durations in options (``retention="30d"``) go through
:func:`storage.durations.parse_duration` and are annotated ``Duration`` (or
``PositiveDuration``). A server store whose leases or TTLs live on the server uses the
server's clock for those and says so.
"""

from __future__ import annotations

from storage.stores.base.core import (
    MaybeAwaitable,
    SessionRow,
    check_key,
    check_limit,
    require_asyncio,
    translated,
)
from storage.stores.base.replace import conflict
from storage.stores.base.sequenced import EMPTY_HEAD
from storage.stores.base.sessions import page_of
from storage.stores.base.store import ABILITY_HOOKS, BaseStore
from storage.stores.base.timetravel import check_message_id, not_in_view

__all__ = [
    "ABILITY_HOOKS",
    "EMPTY_HEAD",
    "BaseStore",
    "MaybeAwaitable",
    "SessionRow",
    "check_key",
    "check_limit",
    "check_message_id",
    "conflict",
    "not_in_view",
    "page_of",
    "require_asyncio",
    "translated",
]
