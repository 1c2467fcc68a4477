"""``chatlayers keys rotate`` while workers run, as in a deployment: a worker process saving
and fetching, and the CLI rotating in another. A worker given only the old master key fails
with an error that names the situation (the keyring was rotated to a key it lacks: give it
NEW,OLD); the documented rollout (every worker NEW,OLD first, then rotate, then drop OLD)
has no failed save or fetch."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.layers.encrypting import DEFAULT_KEY_ENV, EncryptingChatStorage, new_master_key
from storage.layers.encrypting.master import parse_master_keys
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage
from tests.cli.test_migrate import chatlayers, env

OLD = new_master_key()
NEW = new_master_key()
USERS = ("ada", "grace", "linus")

# Saves and fetches every user's conversation until the stop file appears, one JSON line
# per call: {"ok": true} or {"error": "..."}.
WORKER = """
import json, sys
from pathlib import Path
import anyio
from storage import open_storage
from storage.errors import ChatStorageError
from storage.message import ChatKey, ChatMessage

async def main(url, stop):
    async with open_storage(url) as stack:
        n = 0
        while not Path(stop).exists():
            for user in ("ada", "grace", "linus"):
                key = ChatKey(user, "s", "a")
                for call in ("save", "fetch"):
                    try:
                        if call == "save":
                            await stack.save(key, ChatMessage("user", f"{user} {n}"))
                        else:
                            await stack.fetch(key)
                        print(json.dumps({"ok": call}), flush=True)
                    except ChatStorageError as exc:
                        print(json.dumps({"error": str(exc), "call": call}), flush=True)
            n += 1
            await anyio.sleep(0.01)

anyio.run(main, sys.argv[1], sys.argv[2])
"""


def fp(key: str) -> str:
    return parse_master_keys(key, "test").newest.fingerprint


def url(tmp: Path) -> str:
    return f"encrypt?keyring={tmp / 'keyring.db'}::sqlite:///{tmp / 'chats.db'}"


async def fill(tmp: Path) -> None:
    """Every user has a data key, wrapped by OLD."""
    inner = SQLiteChatStorage(tmp / "chats.db")
    keyring = tmp / "keyring.db"
    async with EncryptingChatStorage(inner, keyring=keyring, create_keyring=True, keys=OLD) as s:
        for user in USERS:
            await s.save(ChatKey(user, "s", "a"), ChatMessage("user", f"hello from {user}"))


def keys_env(keys: str) -> dict[str, str]:
    out = env()
    out[DEFAULT_KEY_ENV] = keys
    return out


class Worker:
    """A worker process of the deployment, with the master keys it was given."""

    def __init__(self, tmp: Path, keys: str) -> None:
        name = "-".join(fp(k) for k in keys.split(","))
        self.stop = tmp / f"stop-{name}"
        self.log = (tmp / f"worker-{name}.jsonl").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, url(tmp), str(self.stop)],
            env=keys_env(keys),
            stdout=self.log,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.path = Path(self.log.name)

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.lines()) < count:
            assert self.process.poll() is None, self.process.stderr and self.process.stderr.read()
            assert time.monotonic() < deadline, "the worker made too few calls"
            time.sleep(0.05)

    def finish(self) -> list[dict[str, Any]]:
        self.stop.touch()
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        self.log.close()
        return self.lines()


def rotate(tmp: Path, keys: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*chatlayers(), "keys", "rotate", "--url", url(tmp)],
        env=keys_env(keys),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    for key in (OLD, NEW):
        assert key not in done.stdout + done.stderr
    return done


@pytest.fixture(autouse=True)
def _deployment(tmp_path: Path) -> None:
    anyio.run(fill, tmp_path)


def test_a_worker_given_only_the_old_key_is_told_it_lacks_the_rotated_one(
    tmp_path: Path,
) -> None:
    stale = Worker(tmp_path, OLD)
    try:
        stale.wait_for(6)  # it works before the rotation
        done = rotate(tmp_path, f"{NEW},{OLD}")
        assert done.returncode == 0, done.stderr
        # The CLI cannot see the workers' keys: it says what they must hold, and what next.
        assert f"every worker must hold master key {fp(NEW)} first" in done.stderr
        assert f"next: drop {fp(OLD)} from ${DEFAULT_KEY_ENV} on every worker" in done.stdout
        after = len(stale.lines())
        stale.wait_for(after + 6)
    finally:
        lines = stale.finish()
    assert all("ok" in line for line in lines[:6])
    errors = [line["error"] for line in lines[after:] if "error" in line]
    assert {line["call"] for line in lines[after:] if "error" in line} == {"save", "fetch"}
    error = errors[-1]
    assert f"wrapped by master key {fp(NEW)}" in error
    assert f"If `chatlayers keys rotate` moved the keyring to {fp(NEW)}" in error
    assert f"set ${DEFAULT_KEY_ENV} to NEW,OLD" in error
    assert OLD not in error
    assert NEW not in error


def test_the_documented_rollout_fails_no_save_or_fetch(tmp_path: Path) -> None:
    # 1. Every worker is given NEW,OLD (restarted with it) ...
    both = Worker(tmp_path, f"{NEW},{OLD}")
    try:
        both.wait_for(6)
        # 2. ... and only then the keyring is rotated, while the worker runs.
        done = rotate(tmp_path, f"{NEW},{OLD}")
        assert done.returncode == 0, done.stderr
        assert "re-wrapped 3 data keys" in done.stdout
        after = len(both.lines())
        both.wait_for(after + 12)
    finally:
        lines = both.finish()
    assert [line for line in lines if "error" in line] == []
    # 3. OLD is dropped: a worker with NEW alone reads and writes everyone.
    new_only = Worker(tmp_path, NEW)
    try:
        new_only.wait_for(12)
    finally:
        lines = new_only.finish()
    assert [line for line in lines if "error" in line] == []
    status = subprocess.run(
        [*chatlayers(), "keys", "status", "--url", url(tmp_path), "--json"],
        env=keys_env(NEW),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    by_master = json.loads(status.stdout)["by_master"]
    assert by_master == [{"fingerprint": fp(NEW), "data_keys": 3, "position": 1}]
