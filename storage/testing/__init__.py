"""The conformance kit: the tests every chatlayers store passes, for third-party stores too.

Every built-in store (memory, SQLite, JSONL, Redis, Redis Cluster, PostgreSQL) runs this
suite in chatlayers' own tests (``tests/conformance``). A store written elsewhere runs the
same tests by subclassing :class:`ConformanceSuite` in its own test suite (pytest with
anyio's plugin, which ``pip install anyio`` registers)::

    # tests/test_conformance.py of the package that provides ``mystore://``
    import pytest

    from storage.testing import ConformanceSuite, StoreHarness
    from mypkg import MyChatStorage


    class TestMyStore(ConformanceSuite):
        backends = ("asyncio",)            # default: asyncio and trio

        @pytest.fixture
        def harness(self, tmp_path):
            path = tmp_path / "db"
            return StoreHarness(
                open=lambda **options: MyChatStorage(path, **options),
                url=f"mystore:///{path}",  # opened by other processes (kill -9, two writers)
            )

Run it with ``pytest``: the class expands to one test per rule, layering
(``plain``, ``scrub``, ``summarize::scrub``) and backend. What the kit checks:

- the ``ChatStorage`` protocol: ordering, idempotence, atomic batches, limits,
  hostile keys, copies, the merged view, deletion, concurrency, and that a closed store
  refuses calls with ``StorageUnavailableError``;
- every optional ability the stack has (:func:`storage.abilities.find_ability`; tests of an
  ability the store lacks are skipped): heads and tails, checkpoint compare-and-set and
  leases, replace and conditional saves, compare-and-replace (a message another instance
  appends after the version was read is never erased, also through an adapter's edit),
  session listing and its cursor, search isolation, records, retention purge (with an
  injected clock: :class:`FakeClock`);
- the transforming layer's drop and raise paths and the *active* summarizing path over the
  store, lone surrogates and nesting beyond the limit refused on every stack;
- encryption faults with the store under ``encrypt::`` (needs the ``encrypt`` extra): a
  missing keyring is an error, never a new one; an older keyring is refused and a lost data
  key is not an erasure; a save racing an erasure (another instance, another process) is
  refused and leaves nothing, and an erased user who comes back reads;
- reliability (when ``url`` is given and the store persists): a writer process killed with
  SIGKILL mid-write loses nothing it acknowledged and leaves no partial batch; two writer
  processes on one key keep every message, in each writer's order, batches contiguous; with a
  ``server`` fixture (:class:`ServerControl`), a server killed and restarted mid-run;
- faults (:mod:`storage.testing.fault_tests`): a retention purge with a tool call and its
  results straddling the cut-off keeps tool groups whole; forged ``list_sessions`` cursors are
  ``InvalidArgumentError`` (fuzzed with hypothesis when installed); paging while sessions lose
  conversations lists each session once, at its last activity; ``search`` matches what the
  reference store matches over texts with punctuation, underscores, unicode and digits. With
  the harness's ``damage`` hook (:data:`CHECKPOINT_DAMAGE`, :data:`TALLY_DAMAGE`,
  :data:`INDEX_DAMAGE`, :data:`NEWER_FORMAT`): a broken summary checkpoint, head, session
  tally or search index never hides the raw record nor raises, through ``summarize::`` and a
  second instance (and is counted in ``corrupt_derived`` when the store has it); data of a
  newer format is ``SchemaVersionError`` and, with ``snapshot``, left byte for byte untouched.

The ``url`` is opened in the child process with ``storage.open_storage``, so a store that
registers its scheme through the ``chatlayers.stores`` entry point works unchanged there.
Stores take the project's one clock convention: a ``clock`` option, ``Callable[[], float]``
returning seconds since the Unix epoch (``time.time``), read for lease expiry, the retention
cut-off and the purge interval; set ``clock_option=None`` in the harness if there is none.
"""

from __future__ import annotations

from storage.testing.harness import (
    CHECKPOINT_DAMAGE,
    INDEX_DAMAGE,
    LAYERINGS,
    NEWER_FORMAT,
    TALLY_DAMAGE,
    FakeClock,
    ServerControl,
    StoreHarness,
    open_store,
)
from storage.testing.suite import ConformanceSuite

__all__ = [
    "CHECKPOINT_DAMAGE",
    "INDEX_DAMAGE",
    "LAYERINGS",
    "NEWER_FORMAT",
    "TALLY_DAMAGE",
    "ConformanceSuite",
    "FakeClock",
    "ServerControl",
    "StoreHarness",
    "open_store",
]
