"""``BaseStore``: the thin base every base store shares.

What it gives a store (so the five stores cannot drift apart):

- the public ``ChatStorage`` methods, which check the key, the ``limit`` and the batch
  (:func:`storage.history.prepare_batch`) and then call the store's hooks (``_save``,
  ``_fetch``, ``_session_rows``, ``_delete``, ``_delete_user``, ``_list_keys``);
- driver-error translation in one place: a store declares ``driver_errors`` (a tuple of its
  driver's exception types; an instance attribute when the driver is imported lazily) and
  every public coroutine, the base's and the store's own ability methods alike (wrapped by
  ``__init_subclass__``), turns those into ``StorageUnavailableError`` (``raise ... from exc``);
- the sorted ``list_keys``, the ``fetch_all_chats`` merge (``created_at``, then the store's
  sequence), ``describe()`` and the async context manager;
- ``corrupt_derived``: how many times the store met a derived record (a summary checkpoint, a
  head or tally, a search index) it could not use and ignored or rebuilt from the raw record
  instead (:mod:`storage.stores.derived`; each one is logged once);
- ``from_url(url, **options)``: each store builds itself from its own URL. ``url`` is the
  store segment as the user typed it (query included); ``options`` are constructor keyword
  options already converted by their declared types (``storage.config`` converts query and
  TOML options alike by the constructor's signature). A store with driver query parameters
  (``sslmode=...``) keeps those in the URL it gives its driver (:func:`storage.stores.urls.
  drop_query`).

Adding a store: subclass, set ``scheme``, implement the hooks and ``from_url``, add one line
to the registry (``storage.config.registry``).

URL helpers (:mod:`storage.stores.urls`): a file store calls ``path_from_url(url, scheme,
options=options)`` (SQLAlchemy's ``sqlite:///rel`` / ``sqlite:////abs`` / ``sqlite://:memory:``,
``jsonl://rel`` / ``jsonl:///abs``; query parameters other than its options refused); a server
store gives its driver ``drop_query(url, options)``; ``check_query`` refuses unknown ones.

Time, one convention for every store and layer: a ``clock`` constructor option,
``Callable[[], float]`` returning seconds since the Unix epoch (default ``time.time``). It is
read for lease expiry, the retention cut-off (``datetime.fromtimestamp(clock(), UTC)``) and
``purge_interval``; tests inject :class:`storage.testing.FakeClock`. Durations in options
(``retention="30d"``, ``purge_interval="1h"``) go through
:func:`storage.durations.parse_duration` and are annotated ``Duration`` (or
``PositiveDuration``): the annotation carries the check (:mod:`storage.checked`), so config
reports a bad value with the configuration's other problems. A server store whose leases or
TTLs live on the server uses the server's clock for those and says so. Shared argument checks of the
abilities (``fetch_since``'s ``after``, leases, cursors, records, checkpoints) are in
:mod:`storage.stores.checks`; scan search and snippets in :mod:`storage.search`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar, Self, TypeVar

from storage.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    StorageUnavailableError,
)
from storage.history import prepare_batch
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.stores.derived import DerivedLog

__all__ = ["BaseStore", "SessionRow", "check_key", "check_limit", "require_asyncio"]

R = TypeVar("R")

# One row of a session for the ``fetch_all_chats`` merge: (created_at, seq, agent_id, message).
SessionRow = tuple[datetime, int, str, ChatMessage]


def check_key(key: object) -> ChatKey:
    """``key`` if it is a ``ChatKey`` (whose parts were checked when it was built).

    Raises:
        InvalidKeyError: ``key`` is not a ``ChatKey``.
    """
    if type(key) is ChatKey or isinstance(key, ChatKey):
        return key
    raise InvalidKeyError(f"expected a ChatKey, got {type(key).__name__}")


def check_limit(limit: object) -> int | None:
    """``limit`` if it is ``None`` or an int >= 0.

    Raises:
        InvalidArgumentError: ``limit`` is negative, a bool, or not an int.
    """
    if limit is None:
        return None
    if type(limit) is not int:
        raise InvalidArgumentError(f"limit must be an int >= 0 or None, got {limit!r}")
    if limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0 or None, got {limit}")
    return limit


def require_asyncio(store: str) -> None:
    """Refuse to run an asyncio-only driver (redis-py, asyncpg) on another event loop.

    Raises:
        ConfigError: the running async library is not asyncio (trio, say), naming the store.
    """
    import sniffio

    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return  # not in async context: the driver call itself will say so
    if library != "asyncio":
        raise ConfigError(
            f"{store} runs on asyncio only (its driver is asyncio-only), not on {library}: "
            "run it under asyncio (anyio.run(..., backend='asyncio'))"
        )


def _translating(
    fn: Callable[..., Coroutine[Any, Any, R]],
) -> Callable[..., Coroutine[Any, Any, R]]:
    """Wrap a store coroutine so its driver's exceptions become ``StorageUnavailableError``."""

    @functools.wraps(fn)
    async def method(self: BaseStore, *args: Any, **kwargs: Any) -> R:
        try:
            return await fn(self, *args, **kwargs)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    method.__chatlayers_translating__ = True  # type: ignore[attr-defined]
    return method


class BaseStore(AsyncContextMixin):
    """The base of every base store (see the module docstring for what it gives).

    Subclasses set ``scheme`` and ``driver_errors`` and implement the hooks. Their public
    coroutine methods (ability methods such as ``head`` or ``search``) are wrapped for
    driver-error translation automatically; hooks (names starting with ``_``) are called
    inside the base's translation and are not wrapped.
    """

    scheme: ClassVar[str] = ""
    driver_errors: tuple[type[BaseException], ...] = ()
    # False for a store with no driver (memory): its ability methods are then not wrapped,
    # which keeps a microsecond-scale ``head`` free of an extra coroutine frame.
    has_driver: ClassVar[bool] = True
    # As the user typed it, secrets redacted (set by ``from_url``; ``describe`` shows it).
    display_url: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.has_driver:
            return
        for name, value in list(vars(cls).items()):
            if (
                not name.startswith("_")
                and inspect.iscoroutinefunction(value)
                and not getattr(value, "__chatlayers_translating__", False)
            ):
                setattr(cls, name, _translating(value))

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build the store from its URL (``sqlite:///chats.db``) and typed options.

        Raises:
            ConfigError: the URL is not one this store understands (the error shows the
                right spelling).
        """
        raise NotImplementedError(f"{cls.__name__} does not implement from_url")

    # --- hooks ---------------------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        """Store a prepared, non-empty batch atomically; return the newly stored messages."""
        raise NotImplementedError

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        """The key's messages oldest first; ``limit`` (>= 1 here) newest, tool-pair safe."""
        raise NotImplementedError

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        """Every message of the session, any order."""
        raise NotImplementedError

    async def _delete(self, key: ChatKey) -> None:
        raise NotImplementedError

    async def _delete_user(self, user_id: str) -> None:
        raise NotImplementedError

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        """Every key holding a message, filtered, any order."""
        raise NotImplementedError

    async def _close(self) -> None:
        """Release connections and files (called once)."""

    def _location(self) -> str:
        """The store's URL with secrets redacted, for ``describe`` when ``display_url`` is
        not set (a store built in code)."""
        return f"{self.scheme}://"

    def _describe_options(self) -> str:
        """Options worth showing in ``describe`` (``"synchronous=normal"``), or ``""``."""
        return ""

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        """The error raised for a driver exception; messages must hold no secret."""
        return StorageUnavailableError(f"{self.describe()}: {type(exc).__name__}: {exc}")

    # --- ChatStorage ---------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        check_key(key)
        batch = prepare_batch(messages)
        if not batch:
            return []
        try:
            return await self._save(key, batch)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        check_key(key)
        if limit is not None and (type(limit) is not int or limit <= 0):
            check_limit(limit)  # raises unless 0
            return []
        try:
            return await self._fetch(key, limit)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        try:
            rows = list(await self._session_rows(user_id, session_id))
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc
        rows.sort(key=lambda row: (row[0], row[1]))
        return [AgentMessage(agent_id, message) for _, _, agent_id, message in rows]

    async def delete(self, key: ChatKey) -> None:
        check_key(key)
        try:
            await self._delete(key)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        try:
            await self._delete_user(user_id)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    # --- ListableStorage -----------------------------------------------------------------

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding a message, sorted by (user_id, session_id, agent_id).

        Args:
            user_id: only this user's keys.
            session_id: only keys of this session (of any user unless ``user_id`` is given).

        Raises:
            InvalidKeyError: a filter is given but is not a valid key part.
            StorageUnavailableError: the backend cannot be reached.
        """
        if user_id is not None:
            check_key_part("user_id", user_id)
        if session_id is not None:
            check_key_part("session_id", session_id)
        try:
            keys = await self._list_keys(user_id, session_id)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc
        return sorted(keys, key=lambda k: (k.user_id, k.session_id, k.agent_id))

    # --- derived records -----------------------------------------------------------------

    _derived: DerivedLog | None = None

    @property
    def derived_log(self) -> DerivedLog:
        """The store's count of unusable derived records, by kind (created on first use)."""
        derived = self._derived
        if derived is None:
            derived = self._derived = DerivedLog()
        return derived

    @property
    def corrupt_derived(self) -> int:
        """How many times this instance met a derived record (summary checkpoint, head or
        tally, search index) it could not use, and ignored or rebuilt it from the raw record
        (each one is logged once, logger ``storage.stores.derived``)."""
        derived = self._derived
        return derived.count if derived is not None else 0

    def _derived_unusable(self, what: str, where: object, detail: object) -> None:
        """Count and (once per record) log an unusable derived record; the caller ignores or
        rebuilds it."""
        self.derived_log.unreadable(self.describe(), what, str(where), detail)

    # --- lifecycle -----------------------------------------------------------------------

    _closed: bool = False

    @property
    def closed(self) -> bool:
        """True after ``aclose``."""
        return self._closed

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._close()
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    def describe(self) -> str:
        """The store in one line: its URL as typed (secrets redacted) and its options."""
        url = self.display_url or self._location()
        options = self._describe_options()
        return f"{url} ({options})" if options else url
