"""``export`` and ``show --raw`` of an encrypted stack give the messages, not ciphertext (the
encrypting layer opens what it sealed); the export imports into another encrypted deployment
exactly; a file of ciphertext (read past the layer, from the bare store) is refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from storage.cli import main
from storage.config import open_storage
from storage.layers.encrypting import DEFAULT_KEY_ENV, new_master_key
from storage.message import ChatKey, ChatMessage, ToolCall

KEY = ChatKey("ada", "trip", "support")
MASTER = new_master_key()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)
    monkeypatch.setenv(DEFAULT_KEY_ENV, MASTER)


def encrypted(root: Path, name: str) -> str:
    ring = root / f"{name}-keyring.db"
    return (
        f"summarize?trigger_at=2&keep_last=1::encrypt?keyring={ring}&create_keyring=true"
        f"::sqlite:///{root / name}.db"
    )


def conversation() -> list[ChatMessage]:
    call = ToolCall("c1", "get_reservation", '{"reservation_id": "H9ZU1C"}')
    out = [
        ChatMessage("user", "Where is my reservation H9ZU1C?", id="u0"),
        ChatMessage("assistant", None, (call,), id="t0"),
        ChatMessage("tool", '{"origin": "DTW", "destination": "JFK"}', tool_call_id="c1", id="r0"),
        ChatMessage("assistant", "It flies DTW to JFK.", id="a0"),
    ]
    for n in range(1, 4):
        out += [
            ChatMessage("user", f"question {n}", id=f"u{n}"),
            ChatMessage("assistant", f"answer {n}", id=f"a{n}"),
        ]
    return out


async def save_and_read(url: str) -> list[ChatMessage]:
    async with open_storage(url) as stack:
        await stack.save_messages(KEY, conversation())
        assert (await stack.fetch(KEY))[0].is_summary  # the view is summarized
        return [row.message for row in await stack.fetch_all_chats(KEY.user_id, KEY.session_id)]


def texts(messages: list[dict[str, object]]) -> list[object]:
    return [m.get("content") for m in messages]


def test_export_opens_what_the_layer_sealed_and_imports_into_another_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = encrypted(tmp_path, "a")
    record = anyio.run(save_and_read, source)
    out = tmp_path / "export.jsonl"
    assert main(["export", "--url", source, "-o", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert "ce1:" not in out.read_text()
    assert texts(exported["messages"]) == [m.content for m in record]
    assert exported["messages"][1]["tool_calls"][0]["function"]["name"] == "get_reservation"
    capsys.readouterr()
    assert main(["show", "--url", source, "--session", "trip", "--raw", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert texts(shown["messages"]) == texts(exported["messages"])
    # Into another deployment (its own keyring): the same raw record, sealed there again.
    target = encrypted(tmp_path, "b")
    assert main(["import", str(out), "--url", target]) == 0

    async def read_target() -> list[ChatMessage]:
        async with open_storage(target) as stack:
            rows = await stack.fetch_all_chats(KEY.user_id, KEY.session_id)
            return [row.message for row in rows]

    again = anyio.run(read_target)
    assert [(m.id, m.role, m.content, m.tool_calls) for m in again] == [
        (m.id, m.role, m.content, m.tool_calls) for m in record
    ]
    assert b"Where is my reservation" not in (tmp_path / "b.db").read_bytes()


def test_a_file_of_ciphertext_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(save_and_read, encrypted(tmp_path, "a"))
    sealed = tmp_path / "sealed.jsonl"
    # Read past the layer (the bare store): what the store holds is ciphertext.
    assert main(["export", "--url", f"sqlite:///{tmp_path / 'a.db'}", "-o", str(sealed)]) == 0
    assert "ce1:" in sealed.read_text()
    target = f"sqlite:///{tmp_path / 'c.db'}"

    async def one_message() -> None:
        async with open_storage(target) as stack:
            await stack.save(ChatKey("bob", "s", "a"), ChatMessage("user", "already here"))

    anyio.run(one_message)
    capsys.readouterr()
    assert main(["import", str(sealed), "--url", target]) == 1
    err = capsys.readouterr().err
    assert "sealed by an encrypting layer" in err
    assert "nothing was imported" in err
    assert main(["stats", "--url", target, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == 1  # only bob's
