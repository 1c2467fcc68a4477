"""What a fresh user's trial of ``chatlayers`` found, through the console script a user runs
(a subprocess), with a second process where the case needs one: the lease message, ``delete``
of a user with nothing stored, a store option meant for another store, ``why`` without a
summarizing layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import open_storage
from storage.abilities import CheckpointStorage, find_ability
from storage.message import ChatKey, ChatMessage
from tests.cli.test_migrate import run

KEY = ChatKey("ada", "trip", "assistant")


async def _save_turns(url: str, turns: int) -> None:
    async with open_storage(url) as stack:
        for n in range(turns):
            await stack.save(KEY, ChatMessage("user", f"question {n}", id=f"u{n}"))
            await stack.save(KEY, ChatMessage("assistant", f"answer {n}", id=f"a{n}"))


@pytest.mark.anyio
async def test_a_busy_lease_names_the_conversation_and_the_wait_as_people_write_them(
    tmp_path: Path,
) -> None:
    """Another process holds the key's summarizing lease while the CLI compacts."""
    url = f"summarize::sqlite:///{tmp_path / 'chats.db'}"
    await _save_turns(url, 3)
    async with open_storage(f"sqlite:///{tmp_path / 'chats.db'}") as store:
        checkpoints = find_ability(store, CheckpointStorage)
        assert checkpoints is not None
        assert await checkpoints.acquire_lease(KEY, "another-worker", 300)
        busy = run("compact", "--url", url, "--user", "ada", "--session", "trip", check=1)
    assert (
        "another worker is summarizing 'ada'/'trip'/'assistant'; try again within 5 minutes"
        in busy.stderr
    )
    assert "ChatKey(" not in busy.stderr
    assert "300.0" not in busy.stderr


@pytest.mark.anyio
async def test_delete_of_a_user_with_nothing_stored_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    await _save_turns(url, 1)
    nobody = run("delete", "--url", url, "--user", "nobody", "--yes", check=1)
    assert "nothing is stored for user 'nobody': nothing to delete" in nobody.stderr
    assert "deleted" not in nobody.stdout
    dry = run("delete", "--url", url, "--user", "nobody", "--dry-run", check=1)
    assert "nothing is stored for user 'nobody'" in dry.stderr
    session = run("delete", "--url", url, "--user", "ada", "--session", "nope", check=1)
    assert "nothing is stored for session 'nope' of user 'ada'" in session.stderr
    agent = ("--user", "ada", "--session", "trip", "--agent", "nope")
    one = run("delete", "--url", url, *agent, check=1)
    assert "nothing is stored for conversation 'ada'/'trip'/'nope'" in one.stderr
    # As show does for a conversation that is not stored: the same exit status.
    run("show", "--url", url, "--user", "nobody", "--session", "trip", check=1)
    assert (
        "deleted user 'ada' (1 conversation)" in run("delete", "--url", url, "--user", "ada").stdout
    )


@pytest.mark.parametrize(
    ("store", "given", "meant"),
    [
        ("sqlite:///{}/chats.db?ttl=30d", "ttl", "retention"),
        ("jsonl://{}/chats?expiry=30d", "expiry", "retention"),
        ("redis://127.0.0.1:1/0?retention=30d", "retention", "ttl"),
        ("sqlite:///{}/chats.db?retenton=30d", "retenton", "retention"),
    ],
)
def test_an_expiry_under_another_stores_name_points_to_this_ones(
    tmp_path: Path, store: str, given: str, meant: str
) -> None:
    done = run("stats", "--url", store.format(tmp_path), check=1)
    assert f"option {given!r} (did you mean {meant!r}?" in done.stderr
    assert "Error 111" not in done.stderr  # refused before any connection
