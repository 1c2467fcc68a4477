"""``chatlayers keys new|init|rotate|status|accept``: rotation re-wraps
every data key under the newest master key without rewriting a message, after which the old
master key can be removed; status counts data keys by master-key fingerprint and never prints
a key; a missing keyring is named (never made by a command that reads it), ``init`` makes one
on purpose and ``accept`` takes a restored older one."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from storage.cli import main
from storage.layers.encrypting import (
    DEFAULT_KEY_ENV,
    EncryptingChatStorage,
    fingerprint,
    load_master_keys,
    new_master_key,
)
from storage.layers.encrypting.master import parse_master_keys
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

OLD = new_master_key()
NEW = new_master_key()
USERS = ("ada", "grace", "linus")


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    for key in (OLD, NEW):
        assert key not in captured.out
        assert key not in captured.err
    return code, captured.out, captured.err


def fp(key: str) -> str:
    return parse_master_keys(key, "test").newest.fingerprint


def url(tmp: Path) -> str:
    return f"encrypt?keyring={tmp / 'keyring.db'}::sqlite:///{tmp / 'chats.db'}"


def layer(tmp: Path) -> EncryptingChatStorage:
    return EncryptingChatStorage(
        SQLiteChatStorage(tmp / "chats.db"), keyring=tmp / "keyring.db", create_keyring=True
    )


async def fill(tmp: Path) -> None:
    async with layer(tmp) as store:
        for user in USERS:
            await store.save(ChatKey(user, "s", "a"), ChatMessage("user", f"hello from {user}"))


async def read_all(tmp: Path) -> dict[str, list[str]]:
    async with layer(tmp) as store:
        return {
            user: [m.text for m in await store.fetch(ChatKey(user, "s", "a"))] for user in USERS
        }


async def raw_rows(tmp: Path) -> list[object]:
    async with SQLiteChatStorage(tmp / "chats.db") as base:
        return [m for user in USERS for m in await base.fetch(ChatKey(user, "s", "a"))]


def test_keys_new_prints_a_fresh_valid_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "new"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["keys", "new", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["key"]
    assert first != second
    assert len(first) == 44
    keys = parse_master_keys(f"{first},{second}", "test")  # both parse: 32 bytes each
    assert len(keys.keys) == 2
    assert fingerprint(keys.newest.secret) == keys.newest.fingerprint != first[:16]


def test_rotate_rewraps_every_data_key_and_the_old_key_can_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    anyio.run(fill, tmp_path)
    expected = {user: [f"hello from {user}"] for user in USERS}

    code, out, _ = run(capsys, "keys", "status", "--url", url(tmp_path))
    assert code == 0
    assert "3 data keys" in out
    assert fp(OLD) in out

    # A new master key first, the old one after it: new data keys use NEW, all still read.
    monkeypatch.setenv(DEFAULT_KEY_ENV, f"{NEW},{OLD}")
    code, out, _ = run(capsys, "keys", "status", "--json", "--url", url(tmp_path))
    status = json.loads(out)
    assert status["data_keys"] == 3
    assert status["by_master"] == [
        {"fingerprint": fp(NEW), "data_keys": 0, "position": 1},
        {"fingerprint": fp(OLD), "data_keys": 3, "position": 2},
    ]
    before = anyio.run(raw_rows, tmp_path)
    code, out, _ = run(capsys, "keys", "rotate", "--url", url(tmp_path))
    assert code == 0
    assert "re-wrapped 3 data keys" in out
    assert fp(NEW) in out
    assert anyio.run(raw_rows, tmp_path) == before  # no message was rewritten
    code, out, _ = run(capsys, "keys", "rotate", "--url", url(tmp_path))
    assert "re-wrapped 0 data keys" in out
    assert "3 already were" in out

    # The old key removed: everything still reads.
    monkeypatch.setenv(DEFAULT_KEY_ENV, NEW)
    assert anyio.run(read_all, tmp_path) == expected
    code, out, _ = run(capsys, "keys", "status", "--json", "--url", url(tmp_path))
    assert json.loads(out)["by_master"] == [{"fingerprint": fp(NEW), "data_keys": 3, "position": 1}]
    assert OLD.encode() not in (tmp_path / "keyring.db").read_bytes()


def test_status_and_rotate_name_a_master_key_that_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    anyio.run(fill, tmp_path)
    monkeypatch.setenv(DEFAULT_KEY_ENV, NEW)  # OLD dropped before rotating: a mistake
    code, out, _ = run(capsys, "keys", "status", "--url", url(tmp_path))
    assert code == 0
    assert "not configured" in out
    assert "cannot be read" in out
    assert fp(OLD) in out
    code, _, err = run(capsys, "keys", "rotate", "--url", url(tmp_path))
    assert code == 1
    assert fp(OLD) in err
    assert "add them after the newest key" in err
    # Giving it back after the new one repairs it.
    monkeypatch.setenv(DEFAULT_KEY_ENV, f"{NEW},{OLD}")
    code, out, _ = run(capsys, "keys", "rotate", "--url", url(tmp_path))
    assert code == 0
    assert "re-wrapped 3 data keys" in out
    assert load_master_keys(None, None).newest.fingerprint == fp(NEW)


def test_keys_needs_a_stack_with_the_encrypt_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "keys", "status", "--url", f"sqlite:///{tmp_path / 'c.db'}")
    assert code == 1
    assert "needs a stack with the encrypt layer" in err


def test_keys_help_lists_the_actions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["keys", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for action in ("new", "init", "rotate", "status", "accept"):
        assert action in out


@pytest.mark.parametrize("typed", ["{tmp}/enc/keys.db", "sqlite:///{tmp}/enc/keys.db"])
def test_stack_prints_the_keyring_as_typed(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    typed: str,
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    keyring = typed.format(tmp=tmp_path)
    code, out, _ = run(
        capsys, "stack", "--url", f"encrypt?keyring={keyring}::sqlite:///{tmp_path / 'c.db'}"
    )
    assert code == 0
    (line,) = [line for line in out.splitlines() if "EncryptingChatStorage(" in line]
    assert f"(keyring={keyring}," in line


def test_keys_status_names_an_unset_key_env_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NU_KEYS", raising=False)
    stack = f"encrypt?key_env=NU_KEYS&keyring={tmp_path / 'k.db'}::sqlite:///{tmp_path / 'c.db'}"
    code, _, err = run(capsys, "keys", "status", "--url", stack)
    assert code != 0
    assert "NU_KEYS (key_env) is not set" in err
    assert "chatlayers keys new" in err
    assert "holds no master key" not in err
    monkeypatch.setenv("NU_KEYS", " ")
    code, _, err = run(capsys, "keys", "status", "--url", stack)
    assert code != 0
    assert "NU_KEYS (key_env) is empty" in err


def test_a_missing_keyring_is_named_and_keys_init_makes_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    stack = f"encrypt?keyring={tmp_path / 'keyring.db'}::sqlite:///{tmp_path / 'chats.db'}"
    code, _, err = run(capsys, "keys", "status", "--url", stack)
    assert code == 1
    assert str(tmp_path / "keyring.db") in err
    assert "does not exist" in err
    assert "is the volume holding it mounted? " in err  # a question, then the hint
    assert "chatlayers keys init" in err
    assert not (tmp_path / "keyring.db").exists()  # status made no keyring
    code, out, _ = run(capsys, "keys", "init", "--url", stack)
    assert code == 0
    assert "created the keyring" in out
    code, out, _ = run(capsys, "keys", "init", "--url", stack)
    assert code == 0
    assert "exists already" in out
    code, out, _ = run(capsys, "keys", "status", "--json", "--url", stack)
    assert json.loads(out)["data_keys"] == 0
    anyio.run(fill, tmp_path)  # docs/encryption.md's path: then the stack works as configured
    assert anyio.run(read_all, tmp_path) == {user: [f"hello from {user}"] for user in USERS}


def test_keys_init_refuses_a_new_keyring_over_another_keyrings_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    anyio.run(fill, tmp_path)
    (tmp_path / "keyring.db").rename(tmp_path / "elsewhere.db")  # the volume is not mounted
    code, _, err = run(capsys, "keys", "init", "--url", url(tmp_path))
    assert code == 1
    assert "no new keyring is made" in err
    assert not (tmp_path / "keyring.db").exists()


def test_keys_accept_takes_a_restored_keyring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_KEY_ENV, OLD)
    anyio.run(fill, tmp_path)
    backup = (tmp_path / "keyring.db").read_bytes()

    async def one_more() -> None:
        async with layer(tmp_path) as store:
            await store.save(ChatKey("late", "s", "a"), ChatMessage("user", "after the backup"))

    anyio.run(one_more)
    (tmp_path / "keyring.db").write_bytes(backup)  # restored from the older backup
    code, _, err = run(capsys, "keys", "status", "--url", url(tmp_path))
    assert code == 1
    assert "older than the data" in err
    assert "chatlayers keys accept" in err
    code, out, _ = run(capsys, "keys", "accept", "--url", url(tmp_path))
    assert code == 0
    assert "is now the data store's" in out
    code, out, _ = run(capsys, "keys", "status", "--url", url(tmp_path))
    assert code == 0
    assert "3 data keys" in out
    assert anyio.run(read_all, tmp_path) == {user: [f"hello from {user}"] for user in USERS}
