"""``chatlayers sessions --all`` as a user runs it (its own process) while another process
keeps saving to the sessions it lists: every session is listed exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from storage.config import open_storage
from storage.message import ChatKey, ChatMessage

USER = "busy"
SESSIONS = [f"s{n:03d}" for n in range(120)]


async def _seed(url: str) -> None:
    async with open_storage(url) as store:
        for name in SESSIONS:
            await store.save(ChatKey(USER, name, "agent"), ChatMessage("user", f"hi {name}"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
def test_sessions_all_lists_each_once_while_another_process_saves(
    tmp_path: Path, scheme: str
) -> None:
    url = f"sqlite:///{tmp_path / 'chats.db'}" if scheme == "sqlite" else f"jsonl://{tmp_path}/j"
    anyio.run(_seed, url)
    touch = {"user": USER, "sessions": SESSIONS, "agent": "agent", "rounds": 10_000}
    spec = json.dumps({"url": url, "touch": touch})
    writer = subprocess.Popen(
        [sys.executable, "-m", "storage.testing.child", spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().startswith(b"round"), writer.stderr
        cli = Path(sys.executable).parent / "chatlayers"  # the console script, as installed
        command = [str(cli) if cli.exists() else "chatlayers"]
        walks = []
        argv = ["sessions", "--url", url, "--user", USER, "--all", "--limit", "3", "--json"]
        for _ in range(3):
            done = subprocess.run(
                [*command, *argv],
                capture_output=True,
                env=_env(),
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
            walks.append([s["session_id"] for s in json.loads(done.stdout)["sessions"]])
            assert writer.poll() is None, "the writer stopped"
    finally:
        writer.kill()
        writer.wait()
    for seen in walks:
        assert sorted(seen) == SESSIONS, f"{len(set(seen))} of {len(SESSIONS)} listed"
