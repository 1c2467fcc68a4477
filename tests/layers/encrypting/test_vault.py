"""Reversible placeholders: with a vault, the scrubber's placeholders keep their original values
encrypted under the user's data key; ``reveal`` shows them to an authorised reader, the model
path never does, and the vault is shredded with the user. In a JSON tool result or tool-call
arguments the originals are put back JSON-escaped."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import ConfigError
from storage.layers.encrypting import EncryptingChatStorage, StoreKeyring, new_master_key
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
KEY = ChatKey("ada", "s", "support")
EMAIL = "ada.lovelace@example.org"
PHONE = "+44 20 7946 0958"


def stack(tmp: Path) -> tuple[TransformingChatStorage, EncryptingChatStorage]:
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp / "data" / "c.db"),
        keys=MASTER,
        keyring=tmp / "k.db",
        vault=True,
        create_keyring=True,
    )
    assert layer.vault is not None
    return TransformingChatStorage(layer, PIIScrubber("pii-secret", vault=layer.vault)), layer


def data_bytes(tmp: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (tmp / "data").iterdir())


async def test_reveal_restores_originals_and_the_model_path_never_does(tmp_path: Path) -> None:
    top, layer = stack(tmp_path)
    (user,) = await top.save(KEY, ChatMessage("user", f"mail {EMAIL} or call {PHONE}"))
    call = ToolCall("c1", "send_mail", json.dumps({"to": EMAIL, "note": 'say "hi"'}))
    (_assistant,) = await top.save(KEY, ChatMessage("assistant", None, [call]))
    fetched = await top.fetch(KEY)
    assert EMAIL not in repr(fetched)
    assert PHONE not in repr(fetched)
    assert "<EMAIL_ADDRESS_" in fetched[0].text
    shown = await layer.reveal(KEY, fetched[0])
    assert shown.text == f"mail {EMAIL} or call {PHONE}"
    assert shown.id == user.id
    assert await layer.reveal(KEY, fetched[0].text) == shown.text
    args = (await layer.reveal(KEY, fetched[1])).tool_calls[0].arguments
    assert json.loads(args)["to"] == EMAIL  # still valid JSON
    # Revealing changed nothing stored; the vault is hidden from the application's records.
    assert await top.fetch(KEY) == fetched
    assert await layer.fetch_records(KEY) == []
    assert await layer.fetch_records(KEY, kind="chatlayers.vault") == []
    # Placeholders are per conversation: another conversation's vault reveals nothing.
    other = ChatKey("ada", "s2", "support")
    assert await layer.reveal(other, fetched[0].text) == fetched[0].text
    await layer.aclose()
    data = data_bytes(tmp_path)
    assert EMAIL.encode() not in data
    # The phone number in any spacing (a lone "7946" can occur in hex ids by chance).
    for form in (PHONE, PHONE.replace(" ", ""), "7946 0958", "79460958"):
        assert form.encode() not in data


async def test_the_vault_is_shredded_with_the_user(tmp_path: Path) -> None:
    top, layer = stack(tmp_path)
    (stored,) = await top.save(KEY, ChatMessage("user", f"I am {EMAIL}"))
    assert EMAIL in await layer.reveal(KEY, stored.text)
    await top.delete_user("ada")
    assert await layer.reveal(KEY, stored.text) == stored.text  # nothing left to reveal
    (again,) = await top.save(KEY, ChatMessage("user", "back again, no PII"))
    assert await layer.reveal(KEY, again) == again
    await layer.aclose()
    assert EMAIL.encode() not in data_bytes(tmp_path)


async def test_reveal_needs_a_vault(tmp_path: Path) -> None:
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"),
        keys=MASTER,
        keyring=tmp_path / "k.db",
        create_keyring=True,
    )
    with pytest.raises(ConfigError, match="vault"):
        await layer.reveal(KEY, "<EMAIL_ADDRESS_00000000>")
    with pytest.raises(TypeError):
        await EncryptingChatStorage(
            SQLiteChatStorage(tmp_path / "d.db"),
            keys=MASTER,
            keyring=tmp_path / "k.db",
            vault=True,
            create_keyring=True,
        ).reveal(KEY, 42)
    await layer.aclose()


# Values a JSON document must escape: quotes, backslashes, control characters, line and
# paragraph separators, non-ASCII and astral characters (no lone surrogate: not text).
AWKWARD = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\r", "\x00", "\x1f", "\u2028", "é", "𝄞", "/"])
    | st.characters(blacklist_categories=["Cs"]),
    max_size=30,
).map(lambda text: f"a{text}")  # a keyed value needs a letter or digit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=AWKWARD, ascii_only=st.booleans())
def test_reveal_keeps_a_json_tool_result_and_tool_call_arguments_valid(
    name: str, ascii_only: bool
) -> None:
    """The scrubber replaces a keyed JSON value (``last_name``) whole; ``reveal`` must put
    it back JSON-escaped: the tool result and the arguments parse back to the originals."""
    result = {"last_name": name, "note": f"for {name}", "n": 1}
    arguments = {"first_name": name, "list": [name]}

    async def check() -> None:
        ring = StoreKeyring(InMemoryChatStorage(), "memory://")
        layer = EncryptingChatStorage(InMemoryChatStorage(), keys=MASTER, keyring=ring, vault=True)
        assert layer.vault is not None
        top = TransformingChatStorage(layer, PIIScrubber("pii-secret", vault=layer.vault))
        call = ToolCall("call_1", "lookup", json.dumps(arguments, ensure_ascii=ascii_only))
        await top.save_messages(
            KEY,
            [
                ChatMessage("user", "who is it?"),
                ChatMessage("assistant", None, [call]),
                ChatMessage(
                    "tool", json.dumps(result, ensure_ascii=ascii_only), tool_call_id="call_1"
                ),
            ],
        )
        _, asked, answered = await top.fetch(KEY)
        assert json.loads(str(answered.content))["last_name"].startswith("<PERSON_")
        shown = await layer.reveal(KEY, answered)
        assert json.loads(str(shown.content)) == result
        assert json.loads(await layer.reveal(KEY, str(answered.content))) == result
        shown_call = (await layer.reveal(KEY, asked)).tool_calls[0]
        assert json.loads(shown_call.arguments) == arguments
        await layer.aclose()

    anyio.run(check)
