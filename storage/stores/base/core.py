"""``StoreCore``: the ``ChatStorage`` part of the store base, and what every template uses.

A public method of the base is a *template*: it checks the key and the arguments, refuses a
closed store, calls the store's hook and turns the driver's exceptions into
``StorageUnavailableError`` (``raise ... from exc``). A hook returns its result, or an
awaitable of it: a store whose calls never wait (memory; SQLite, which runs on the
event-loop thread) writes plain functions and pays no coroutine frame for them, a store
that waits on I/O writes ``async def``. Hot templates (``fetch``, ``head``, ``fetch_since``)
tell the two apart inline; the others through :meth:`StoreCore._call`.

Retention lives here too, since it runs on the write path: a store with ``retention`` purges
(its ``_purge`` hook) after a write at most once per ``purge_interval`` of its clock.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, ParamSpec, Self, TypeAlias, TypeVar, Union, cast

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
from storage.stores.times import Clock, clock_now

__all__ = [
    "MaybeAwaitable",
    "SessionRow",
    "StoreCore",
    "check_key",
    "check_limit",
    "require_asyncio",
    "translated",
]

R = TypeVar("R")
P = ParamSpec("P")

#: What a hook returns: its result, or an awaitable of it.
MaybeAwaitable: TypeAlias = Union[R, Awaitable[R]]  # noqa: UP007 (a generic alias)

#: One row of a session for the ``fetch_all_chats`` merge: (created_at, seq, agent_id, message).
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


def translated(
    fn: Callable[..., Coroutine[Any, Any, R]],
) -> Callable[..., Coroutine[Any, Any, R]]:
    """Translate the driver errors of a public coroutine outside the template (a store's
    maintenance method such as ``compact`` or ``vacuum``, a subclass's override): the base
    applies it to every public coroutine a store class defines itself."""
    if getattr(fn, "__chatlayers_translating__", False):
        return fn

    @functools.wraps(fn)
    async def method(self: StoreCore, *args: Any, **kwargs: Any) -> R:
        try:
            return await fn(self, *args, **kwargs)
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    method.__chatlayers_translating__ = True  # type: ignore[attr-defined]
    return method


class StoreCore(AsyncContextMixin):
    """The ``ChatStorage`` templates, listing, lifecycle and ``describe`` of every store."""

    scheme: ClassVar[str] = ""
    # Whether query options of the URL a store does not declare go to its driver
    # (``sslmode=`` for PostgreSQL); ``False`` (the file and memory stores): such an option
    # is a mistake, listed with the configuration's other problems.
    url_driver_options: ClassVar[bool] = True
    driver_errors: tuple[type[BaseException], ...] = ()
    # As the user typed it, secrets redacted (set by ``from_url``; ``describe`` shows it).
    display_url: str | None = None
    # Retention (None: messages are kept until deleted); stores that offer it set these.
    retention: float | None = None
    purge_interval: float = 3600.0
    _clock: Clock | None = None  # None: ``time.time``
    _last_purge: float | None = None

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

    def _save(self, key: ChatKey, batch: list[ChatMessage]) -> MaybeAwaitable[list[ChatMessage]]:
        """Store a prepared, non-empty batch atomically; return the newly stored messages."""
        raise NotImplementedError

    def _fetch(self, key: ChatKey, limit: int | None) -> MaybeAwaitable[list[ChatMessage]]:
        """The key's messages oldest first; ``limit`` (>= 1 here) newest, tool-pair safe."""
        raise NotImplementedError

    def _session_rows(self, user_id: str, session_id: str) -> MaybeAwaitable[list[SessionRow]]:
        """Every message of the session, any order."""
        raise NotImplementedError

    def _delete(self, key: ChatKey) -> MaybeAwaitable[None]:
        raise NotImplementedError

    def _delete_user(self, user_id: str) -> MaybeAwaitable[None]:
        raise NotImplementedError

    def _list_keys(
        self, user_id: str | None, session_id: str | None
    ) -> MaybeAwaitable[Iterable[ChatKey]]:
        """Every key holding a message, filtered, any order."""
        raise NotImplementedError

    def _purge(self, cutoff: datetime) -> MaybeAwaitable[int]:
        """Delete the messages created before ``cutoff`` (whole tool groups), with the
        checkpoints of their keys; return how many went. Called only with ``retention``."""
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

    # --- what the templates share ----------------------------------------------------------

    def _closed_error(self) -> StorageUnavailableError:
        return StorageUnavailableError(f"{self.describe()}: the store is closed")

    def _check_open(self) -> None:
        """Raises: StorageUnavailableError: the store is closed."""
        if self._closed:
            raise self._closed_error()

    async def _call(
        self, hook: Callable[P, MaybeAwaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """``hook(*args)`` (awaited when it returns an awaitable), its driver errors
        translated."""
        try:
            result = hook(*args, **kwargs)
            if inspect.isawaitable(result):
                return cast(R, await result)
            return result
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    def _now(self) -> datetime:
        """The store's clock as an aware UTC datetime."""
        return clock_now(self._clock)

    async def _purge_now(self, now: datetime) -> int:
        """Purge what is older than ``now - retention`` (``retention`` set)."""
        assert self.retention is not None
        self._last_purge = now.timestamp()
        return await self._call(self._purge, now - timedelta(seconds=self.retention))

    async def _purge_if_due(self) -> None:
        """After a write: purge when ``purge_interval`` has passed since this instance last
        did (first, so concurrent writers do not all purge)."""
        now = self._now()
        last = self._last_purge
        if last is not None and now.timestamp() - last < self.purge_interval:
            return
        await self._purge_now(now)

    # --- ChatStorage ---------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        if type(key) is not ChatKey:
            check_key(key)
        batch = prepare_batch(messages)
        if not batch:
            return []
        if self._closed:
            raise self._closed_error()
        stored = await self._call(self._save, key, batch)
        if self.retention is not None:
            await self._purge_if_due()
        return stored

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        if type(key) is not ChatKey:
            check_key(key)
        if limit is not None and (type(limit) is not int or limit <= 0):
            check_limit(limit)  # raises unless 0
            return []
        if self._closed:
            raise self._closed_error()
        try:
            found = self._fetch(key, limit)
            return found if isinstance(found, list) else await found
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        self._check_open()
        rows = await self._call(self._session_rows, user_id, session_id)
        rows.sort(key=lambda row: (row[0], row[1]))
        return [AgentMessage(agent_id, message) for _, _, agent_id, message in rows]

    async def delete(self, key: ChatKey) -> None:
        check_key(key)
        self._check_open()
        await self._call(self._delete, key)

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        self._check_open()
        await self._call(self._delete_user, user_id)

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
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        if user_id is not None:
            check_key_part("user_id", user_id)
        if session_id is not None:
            check_key_part("session_id", session_id)
        self._check_open()
        keys = await self._call(self._list_keys, user_id, session_id)
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
