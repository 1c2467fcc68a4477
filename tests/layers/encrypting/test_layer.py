"""The encrypting layer: what it seals, what stays clear, bindings, config, abilities, and
``summarize::scrub::encrypt::sqlite`` keeping shared summaries."""

from __future__ import annotations

import inspect
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from storage import open_storage
from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    Forward,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import ConfigError, CorruptRecordError, InvalidMessageError
from storage.layers.encrypting import (
    EncryptingChatStorage,
    KeyErasedError,
    new_master_key,
)
from storage.layers.encrypting.cipher import is_token
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("user-1", "session-1", "agent")
MASTER = new_master_key()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def rich_history(tag: str) -> list[ChatMessage]:
    """Every field that carries data, each holding a unique ``tag``-marked string."""
    return [
        ChatMessage.from_openai(
            {"role": "system", "content": f"{tag}-system-prompt"},
            metadata={"app": f"{tag}-metadata"},
        ),
        ChatMessage.from_openai(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"{tag}-part-text"},
                    {"type": "image_url", "image_url": {"url": f"https://x.test/{tag}-url"}},
                ],
                "name": f"{tag}-speaker",
            }
        ),
        ChatMessage.from_openai(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": f"{tag}_lookup",
                            "arguments": f'{{"q": "{tag}-arguments"}}',
                        },
                    }
                ],
                "refusal": f"{tag}-extra-refusal",
            }
        ),
        ChatMessage.from_openai(
            {"role": "tool", "tool_call_id": "call_1", "content": f'{{"r": "{tag}-result"}}'}
        ),
        ChatMessage("assistant", f"{tag}-answer"),
    ]


def secrets_of(tag: str) -> list[bytes]:
    names = [
        "system-prompt",
        "metadata",
        "part-text",
        "url",
        "speaker",
        "_lookup",
        "arguments",
        "extra-refusal",
        "result",
        "answer",
        "summary",
        "record",
    ]
    return [f"{tag}{'' if n.startswith('_') else '-'}{n}".encode() for n in names]


def encrypted(inner: Any, tmp_path: Path, **options: Any) -> EncryptingChatStorage:
    return EncryptingChatStorage(
        inner,
        keys=options.pop("keys", MASTER),
        keyring=tmp_path / "keys.db",
        **options,
        create_keyring=True,
    )


def files_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# What is sealed, what stays clear ----------------------------------------------------------


async def test_round_trip_restores_every_field_exactly(tmp_path: Path) -> None:
    layer = encrypted(InMemoryChatStorage(), tmp_path)
    history = rich_history("rt")
    stored = await layer.save_messages(KEY, history)
    fetched = await layer.fetch(KEY)
    assert fetched == stored
    assert [m.to_openai() for m in fetched] == [m.to_openai() for m in history]
    assert [(m.id, m.metadata, m.extra, m.present) for m in fetched] == [
        (m.id, m.metadata, m.extra, m.present) for m in history
    ]
    # A fresh instance (empty caches) decrypts the same from the store.
    again = encrypted(layer.inner, tmp_path)
    assert await again.fetch(KEY) == stored
    assert await again.fetch(KEY, limit=3) == stored[-3:]
    assert await again.fetch(KEY, limit=2) == stored[-1:]  # the orphaned result is cut


async def test_the_store_holds_only_ids_roles_times_and_call_ids_in_clear(
    tmp_path: Path,
) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    stored = await layer.save_messages(KEY, rich_history("clear"))
    raw = await base.fetch(KEY)
    assert [m.id for m in raw] == [m.id for m in stored]
    assert [m.role for m in raw] == [m.role for m in stored]
    assert [m.created_at for m in raw] == [m.created_at for m in stored]
    assert all(is_token(m.content) for m in raw)
    assert raw[2].tool_calls == (ToolCall("call_1", "", ""),)  # the id only, name sealed
    assert raw[3].tool_call_id == "call_1"
    assert all(m.name is None and not m.metadata and not m.extra for m in raw)
    text = repr(raw)
    assert "clear-" not in text


async def test_no_plaintext_reaches_sqlite_or_jsonl_files(tmp_path: Path) -> None:
    for name, base in (
        ("sqlite", SQLiteChatStorage(tmp_path / "db" / "chats.db")),
        ("jsonl", JsonlChatStorage(tmp_path / "jsonl")),
    ):
        tag = f"bytes{name}"
        layer = encrypted(base, tmp_path / f"keyring-{name}")
        await layer.save_messages(KEY, rich_history(tag))
        await layer.save_record(
            KEY, ConversationRecord("approval", {"note": f"{tag}-record"}, id="r1")
        )
        summary = ChatMessage(
            "system", f"{tag}-summary", metadata={"chatlayers": {"summary": True}}
        )
        tail = await layer.fetch_since(KEY, 0)
        made = SummaryCheckpoint((summary,), tail.seqs[-1], tail.head.epoch, "manual", NOW)
        saved = await layer.save_checkpoint(KEY, made, expected_version=0)
        assert saved is not None
        assert saved.messages[0].text == f"{tag}-summary"
        loaded = await layer.load_checkpoint(KEY)
        assert loaded is not None
        assert loaded.messages[0].is_summary
        assert loaded.messages[0].text == f"{tag}-summary"
        assert (await layer.fetch_records(KEY))[0].data == {"note": f"{tag}-record"}
        await layer.aclose()
        data = files_bytes(tmp_path / ("db" if name == "sqlite" else "jsonl"))
        assert (tmp_path / f"keyring-{name}" / "keys.db").exists()
        assert data  # the store did write its files
        for secret in secrets_of(tag):
            assert secret not in data, (name, secret)
        assert b"call_1" in data  # the clear tool-call id is where we looked


# Bindings ------------------------------------------------------------------------------------


async def test_a_row_copied_to_another_conversation_or_user_fails_to_decrypt(
    tmp_path: Path,
) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    await layer.save(KEY, ChatMessage("user", "mine"))
    await layer.save(ChatKey("user-2", "s", "a"), ChatMessage("user", "theirs"))
    (row,) = await base.fetch(KEY)
    other_session = ChatKey("user-1", "session-2", "agent")
    await base.save(other_session, row)
    with pytest.raises(CorruptRecordError, match="does not authenticate"):
        await layer.fetch(other_session)
    other_user = ChatKey("user-2", "s", "a")
    await base.save(other_user, row)
    with pytest.raises(CorruptRecordError, match="copied from another user"):
        await layer.fetch(other_user)
    # The same ciphertext under another message id of the same conversation.
    await base.save(KEY, attrs.evolve(row, id="forged"))
    with pytest.raises(CorruptRecordError, match="does not authenticate"):
        await encrypted(base, tmp_path).fetch(KEY)


async def test_a_swapped_role_or_unencrypted_row_is_refused(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    await layer.save(KEY, ChatMessage("user", "hello"))
    (_row,) = await base.fetch(KEY)
    key2 = ChatKey("user-1", "s2", "a")
    await base.save(key2, ChatMessage("user", "plain text written around the layer"))
    with pytest.raises(CorruptRecordError, match="not encrypted"):
        await layer.fetch(key2)
    key3 = ChatKey("user-1", "s3", "a")
    await layer.save(key3, ChatMessage("user", "x", id="same"))
    (victim,) = await base.fetch(key3)
    await base.delete(key3)
    await base.save(key3, attrs.evolve(victim, role="assistant"))
    with pytest.raises(CorruptRecordError, match="sealed id or role"):
        await encrypted(base, tmp_path).fetch(key3)
    assert (await layer.fetch(KEY))[0].text == "hello"


async def test_a_tampered_token_fails_with_a_clear_error(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    await layer.save(KEY, ChatMessage("user", "hello"))
    (row,) = await base.fetch(KEY)
    assert isinstance(row.content, str)
    flipped = row.content[:-3] + ("A" if row.content[-3] != "A" else "B") + row.content[-2:]
    key2 = ChatKey("user-1", "t", "a")
    await base.save(key2, attrs.evolve(row, content=flipped))
    with pytest.raises(CorruptRecordError):
        await encrypted(base, tmp_path).fetch(key2)


# Abilities ---------------------------------------------------------------------------------


async def test_abilities_are_forwarded_except_search(tmp_path: Path) -> None:
    layer = encrypted(SQLiteChatStorage(tmp_path / "c.db"), tmp_path)
    for ability in (
        ListableStorage,
        SequencedStorage,
        CheckpointStorage,
        ReplaceableStorage,
        SessionListing,
        RecordStorage,
        RetentionStorage,
    ):
        assert find_ability(layer, ability) is layer, ability
    # A store cannot search ciphertext: the ability is not offered.
    assert find_ability(layer, SearchableStorage) is None
    assert not hasattr(layer, "search")
    # Every method that carries message data is the layer's own (or the payload seam's,
    # over the layer's hooks), not a pass-through.
    for name in (
        "save",
        "save_messages",
        "fetch",
        "fetch_all_chats",
        "delete",
        "delete_user",
        "aclose",
        "fetch_since",
        "load_checkpoint",
        "save_checkpoint",
        "replace",
        "save_messages_if",
        "save_record",
        "fetch_records",
        "purge",
    ):
        own = inspect.getattr_static(EncryptingChatStorage, name)
        assert not isinstance(own, Forward), name
        assert own.__module__.startswith(
            ("storage.layers.encrypting.", "storage.layers.payload")
        ), name
    await layer.aclose()


async def test_replace_conditional_save_and_merged_view_decrypt(tmp_path: Path) -> None:
    layer = encrypted(InMemoryChatStorage(), tmp_path)
    await layer.save_messages(KEY, [ChatMessage("user", "a"), ChatMessage("assistant", "b")])
    other = ChatKey(KEY.user_id, KEY.session_id, "other-agent")
    await layer.save(other, ChatMessage("user", "c"))
    merged = await layer.fetch_all_chats(KEY.user_id, KEY.session_id)
    assert [(m.agent_id, m.message.text) for m in merged] == [
        ("agent", "a"),
        ("agent", "b"),
        ("other-agent", "c"),
    ]
    replaced = await layer.replace(KEY, [ChatMessage("user", "new")])
    assert [m.text for m in await layer.fetch(KEY)] == ["new"] == [m.text for m in replaced]
    head = await layer.head(KEY)
    stored = await layer.save_messages_if(
        KEY, [ChatMessage("assistant", "ok")], expected_version=head.version
    )
    assert [m.text for m in stored] == ["ok"]
    tail = await layer.fetch_since(KEY, 0)
    assert [m.text for m in tail.messages] == ["new", "ok"]
    with pytest.raises(InvalidMessageError):
        await layer.replace(KEY, [ChatMessage("tool", "orphan", tool_call_id="x")])


async def test_records_are_sealed_and_bound_to_their_kind(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    record = await layer.save_record(KEY, ConversationRecord("approval", {"ok": True}, id="r"))
    assert record.data == {"ok": True}
    assert record.seq > 0
    (raw,) = await base.fetch_records(KEY)
    assert raw.kind == "approval"
    assert raw.id == "r"
    assert set(raw.data) == {"ce1"}
    key2 = ChatKey("user-1", "x", "y")
    await base.save_record(key2, attrs.evolve(raw, kind="other"))
    with pytest.raises(CorruptRecordError, match="does not authenticate"):
        await layer.fetch_records(key2)
    assert [r.data for r in await layer.fetch_records(KEY, kind="approval")] == [{"ok": True}]


async def test_summarize_scrub_encrypt_sqlite_keeps_shared_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_MASTER_KEYS", MASTER)
    url = (
        "summarize?trigger_at=2&keep_last=1::scrub?secret=s3cret-pii::"
        f"encrypt?create_keyring=true&keyring={tmp_path / 'keys.db'}::"
        f"sqlite:///{tmp_path / 'chats.db'}"
    )
    first = open_storage(url)
    layer = first.find(SummarizingChatStorage)
    assert layer is not None
    assert layer.summaries == "store"
    encrypt = first.find(EncryptingChatStorage)
    assert encrypt is not None
    assert find_ability(encrypt, CheckpointStorage) is encrypt
    for n in range(4):
        await first.save(KEY, ChatMessage("user", f"question {n} from ada@example.org"))
        await first.save(KEY, ChatMessage("assistant", f"answer {n} about the invoice"))
    view = await first.fetch(KEY)
    assert view[0].is_summary
    assert layer.summaries_made == 1
    assert "ada@example.org" not in repr(view)  # scrubbed above the encryption
    # Another worker (a fresh stack over the same files) serves the same view, no new summary.
    second = open_storage(url)
    assert await second.fetch(KEY) == view
    other = second.find(SummarizingChatStorage)
    assert other is not None
    assert other.summaries_made == 0
    assert other.checkpoints_loaded == 1
    # The checkpoint in the store is ciphertext with its clear summary marker.
    base = first.base
    checkpoint = await base.load_checkpoint(KEY)  # type: ignore[attr-defined]
    assert checkpoint is not None
    assert is_token(checkpoint.messages[0].content)
    assert checkpoint.messages[0].is_summary
    await first.aclose()
    await second.aclose()
    data = files_bytes(tmp_path)
    assert b"invoice" not in data
    assert b"question" not in data


# Configuration -----------------------------------------------------------------------------


async def test_url_options_and_key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEYS", f"{MASTER},{new_master_key()}")
    url = (
        f"encrypt?create_keyring=true&key_env=MY_KEYS&keyring={tmp_path / 'k.db'}::"
        f"sqlite:///{tmp_path / 'c.db'}"
    )
    async with open_storage(url) as stack:
        await stack.save(KEY, ChatMessage("user", "hi"))
        assert [m.text for m in await stack.fetch(KEY)] == ["hi"]
        text = stack.describe()
        assert "master keys=2 from $MY_KEYS" in text
        assert MASTER not in text
    monkeypatch.delenv("MY_KEYS")
    with pytest.raises(ConfigError, match="MY_KEYS"):
        open_storage(url)
    # A malformed key is named by its position, never quoted.
    monkeypatch.setenv("MY_KEYS", f"{MASTER},not-a-key-at-all")
    with pytest.raises(ConfigError, match="master key 2 of \\$MY_KEYS") as caught:
        open_storage(url)
    assert "not-a-key" not in str(caught.value)
    with pytest.raises(ConfigError, match="needs option 'keyring'"):
        open_storage(f"encrypt::sqlite:///{tmp_path / 'c.db'}")


def test_a_keyring_inside_the_data_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_KEYS", MASTER)
    db = tmp_path / "chats.db"
    with pytest.raises(ConfigError, match="own file"):
        EncryptingChatStorage(SQLiteChatStorage(db), keys=MASTER, keyring=db, create_keyring=True)
    with pytest.raises(ConfigError, match="own file"):
        open_storage(
            f"encrypt?create_keyring=true&key_env=TEST_KEYS&keyring=sqlite:///{db}::sqlite:///{db}"
        )
    with pytest.raises(ConfigError, match="inside the data store"):
        EncryptingChatStorage(
            JsonlChatStorage(tmp_path / "j"),
            keys=MASTER,
            keyring=tmp_path / "j" / "k.db",
            create_keyring=True,
        )
    store = InMemoryChatStorage()
    from storage.layers.encrypting import StoreKeyring

    with pytest.raises(ConfigError, match="the data store itself"):
        EncryptingChatStorage(
            store, keys=MASTER, keyring=StoreKeyring(store, "memory://"), create_keyring=True
        )
    with pytest.raises(ConfigError, match="loses every data key"):
        EncryptingChatStorage(
            SQLiteChatStorage(db), keys=MASTER, keyring="memory://", create_keyring=True
        )
    with pytest.raises(ConfigError, match="give keys or key_env"):
        EncryptingChatStorage(
            store, keys=MASTER, key_env="X", keyring=tmp_path / "k.db", create_keyring=True
        )
    with pytest.raises(ConfigError, match="given twice"):
        EncryptingChatStorage(
            store, keys=[MASTER, MASTER], keyring=tmp_path / "k.db", create_keyring=True
        )
    assert not os.path.exists(tmp_path / "k.db")  # nothing opened at construction


async def test_works_under_the_scrubber_and_the_transforming_layer(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    stack = TransformingChatStorage(encrypted(base, tmp_path), PIIScrubber(secret="x"))
    (stored,) = await stack.save(KEY, ChatMessage("user", "mail ada@example.org"))
    assert "ada@example.org" not in stored.text
    assert "<EMAIL_ADDRESS_" in stored.text
    assert await stack.fetch(KEY) == [stored]
    assert "EMAIL" not in repr(await base.fetch(KEY))


async def test_a_missing_master_key_names_its_fingerprint(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    old = encrypted(base, tmp_path)
    await old.save(KEY, ChatMessage("user", "x"))
    fp = old.masters.newest.fingerprint
    other = encrypted(base, tmp_path, keys=new_master_key())
    with pytest.raises(ConfigError, match=f"master key {fp}"):
        await other.fetch(KEY)


async def test_an_erased_users_rows_raise_key_erased(tmp_path: Path) -> None:
    base = InMemoryChatStorage()
    layer = encrypted(base, tmp_path)
    await layer.save(KEY, ChatMessage("user", "x"))
    rows = await base.fetch(KEY)
    await layer.delete_user(KEY.user_id)
    await base.save_messages(KEY, rows)  # a restored backup of the ciphertext
    with pytest.raises(KeyErasedError, match="erased"):
        await layer.fetch(KEY)


def test_the_encryption_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """A quick run end to end (its timings are not judged here)."""
    from benchmarks.encryption import main

    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    for row in ("| fetch 1000 (warm) |", "| fetch 1000 (cold) |", "| save 1 |", "Target:"):
        assert row in out


async def test_a_checkpoint_that_does_not_decrypt_never_hides_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tampered checkpoint ciphertext is a derived record: ignored (counted, logged), the
    view rebuilt from the raw record by every instance, and replaced by the next summary."""
    monkeypatch.setenv("CHATLAYERS_MASTER_KEYS", MASTER)
    url = (
        "summarize?trigger_at=2&keep_last=1::"
        f"encrypt?create_keyring=true&keyring={tmp_path / 'keys.db'}::"
        f"sqlite:///{tmp_path / 'chats.db'}"
    )
    first = open_storage(url)
    for n in range(4):
        await first.save(KEY, ChatMessage("user", f"question {n}"))
        await first.save(KEY, ChatMessage("assistant", f"answer {n}"))
    assert (await first.fetch(KEY))[0].is_summary
    base = first.base
    stored = await base.load_checkpoint(KEY)  # type: ignore[attr-defined]
    assert stored is not None
    token = stored.messages[0].content
    assert isinstance(token, str)
    assert is_token(token)
    flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    broken = attrs.evolve(
        stored, messages=(attrs.evolve(stored.messages[0], content=flipped), *stored.messages[1:])
    )
    assert await base.save_checkpoint(  # type: ignore[attr-defined]
        KEY, broken, expected_version=stored.version
    )
    raw = [m.message.text for m in await first.fetch_all_chats(KEY.user_id, KEY.session_id)]

    second = open_storage(url)  # another worker, cold
    encrypt = second.find(EncryptingChatStorage)
    assert encrypt is not None
    view = await second.fetch(KEY)
    assert encrypt.corrupt_derived >= 1  # each read that met it counts
    # Rebuilt from the raw record: every raw message is there, or summarized anew.
    texts = [m.text for m in view]
    assert view[0].is_summary or texts == raw
    await second.save(KEY, ChatMessage("user", "question 4"))
    await second.save(KEY, ChatMessage("assistant", "answer 4"))
    assert (await second.fetch(KEY))[0].is_summary
    replaced = await encrypt.load_checkpoint(KEY)
    assert replaced is not None
    assert replaced.version > stored.version + 1
    assert (await open_storage(url).fetch(KEY))[0].is_summary
    await first.aclose()
    await second.aclose()
