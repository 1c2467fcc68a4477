"""AgentSquadChatStorage against the real agent-squad: block conversion, the semantics of
agent-squad's own InMemoryChatStorage, and the AgentSquad orchestrator over a scrubbed,
summarized SQLite stack."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("agent_squad")

from agent_squad.storage import InMemoryChatStorage as SquadInMemoryChatStorage  # type: ignore[import-untyped]  # agent-squad ships no type hints
from agent_squad.storage.chat_storage import ChatStorage as SquadChatStorage  # type: ignore[import-untyped]  # agent-squad ships no type hints
from agent_squad.types import ConversationMessage, ParticipantRole, TimestampedMessage  # type: ignore[import-untyped]  # agent-squad ships no type hints

from storage.adapters.agent_squad import (
    SAVE_ATTEMPTS,
    AgentSquadChatStorage,
    from_chat_messages,
    to_chat_messages,
)
from storage.errors import ConflictError, InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.adapters.racing import SavesAfterFetch


def view(messages: list[Any]) -> list[tuple[str, Any]]:
    return [(m.role, m.content) for m in messages]


def text(role: str, value: str) -> ConversationMessage:
    return ConversationMessage(role, [{"text": value}])


TOOL_TURN = [
    text("user", "Weather in Paris?"),
    ConversationMessage(
        "assistant",
        [
            {"text": "Checking."},
            {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}},
            {"toolUse": {"toolUseId": "t2", "name": "time", "input": {}}},
        ],
    ),
    ConversationMessage(
        "user",
        [
            {"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}},
            {
                "toolResult": {
                    "toolUseId": "t2",
                    "content": [{"json": {"hour": 9}}],
                    "status": "error",
                }
            },
        ],
    ),
    text("assistant", "Sunny at nine."),
]


# --- block conversion ----------------------------------------------------------------------


def test_tool_blocks_become_calls_and_tool_messages() -> None:
    messages = [m for message in TOOL_TURN for m in to_chat_messages(message)]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[1].content == "Checking."
    assert messages[1].tool_calls == (
        ToolCall("t1", "weather", '{"city": "Paris"}'),
        ToolCall("t2", "time", "{}"),
    )
    assert [(m.tool_call_id, m.content) for m in messages[2:4]] == [
        ("t1", "sunny"),
        ("t2", '{"hour": 9}'),  # a JSON block: the tool's output as JSON text
    ]
    # Only structure rides in metadata: the group and the status, never text.
    assert messages[3].metadata["agent_squad"]["status"] == "error"
    assert view(from_chat_messages(messages)) == view(TOOL_TURN)


ODD_SHAPES = [
    ConversationMessage("user", None),
    ConversationMessage("user", []),
    ConversationMessage("assistant", []),
    ConversationMessage("assistant", [{"text": "a"}, {"text": "b"}]),
    ConversationMessage(
        "assistant",
        [{"toolUse": {"toolUseId": "t", "name": "f", "input": [1, "x"]}}, {"text": "after"}],
    ),
    ConversationMessage(
        "user", [{"text": "before"}, {"toolResult": {"toolUseId": "t", "content": []}}]
    ),
    # Not the exact toolUse shape: kept verbatim as a content part.
    ConversationMessage("assistant", [{"toolUse": {"toolUseId": "t", "name": "f"}}]),
    ConversationMessage("assistant", [{"reasoningContent": {"reasoningText": {"text": "hm"}}}]),
    ConversationMessage("assistant", [{"text": "cited"}], citations=[{"source": "doc-1"}]),
    ConversationMessage(ParticipantRole.USER, [{"text": "enum role"}]),
]


@pytest.mark.parametrize("message", ODD_SHAPES, ids=range(len(ODD_SHAPES)))
def test_odd_shapes_round_trip(message: ConversationMessage) -> None:
    (back,) = from_chat_messages(to_chat_messages(message))
    role = message.role.value if isinstance(message.role, ParticipantRole) else message.role
    assert (back.role, back.content, back.citations) == (role, message.content, message.citations)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
plain_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=10)
text_block = plain_text.map(lambda t: {"text": t})
tool_use = st.builds(
    lambda i, n, v: {"toolUse": {"toolUseId": i, "name": n, "input": v}},
    st.text("abc123", min_size=1, max_size=4),
    st.text("fgh", min_size=1, max_size=3),
    json_values,
)
tool_result = st.builds(
    lambda i, c, s: {"toolResult": {"toolUseId": i, "content": c, **s}},
    st.text("abc123", min_size=1, max_size=4),
    st.lists(text_block | st.builds(lambda v: {"json": v}, json_values), max_size=2),
    st.sampled_from([{}, {"status": "success"}, {"status": "error"}]),
)
conversation_message = st.one_of(
    st.builds(
        ConversationMessage,
        st.just("assistant"),
        st.none() | st.lists(text_block | tool_use, max_size=4),
    ),
    st.builds(
        ConversationMessage,
        st.just("user"),
        st.none() | st.lists(text_block | tool_result, max_size=4),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(conversation_message, max_size=6))
def test_any_conversation_round_trips(messages: list[ConversationMessage]) -> None:
    stored = [m for message in messages for m in to_chat_messages(message)]
    assert view(from_chat_messages(stored)) == view(messages)


def test_bad_content_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="list of blocks"):
        to_chat_messages(ConversationMessage("user", 42))
    with pytest.raises(InvalidMessageError, match="ConversationMessage"):
        to_chat_messages({"role": "user"})


def test_a_summary_opens_the_user_message_after_it_so_roles_alternate() -> None:
    summary = ChatMessage("system", "Earlier: ...", metadata={"chatlayers": {"summary": True}})
    question = ChatMessage("user", "And my bags?", metadata={"agent_squad": {"str": True}})
    answer = ChatMessage("assistant", "Two bags.")
    back = from_chat_messages([summary, question, answer])
    assert view(back) == [
        ("user", [{"text": "Earlier: ..."}, {"text": "And my bags?"}]),
        ("assistant", [{"text": "Two bags."}]),
    ]
    # Only a leading summary is joined; a plain history keeps its messages as they were.
    plain = from_chat_messages([ChatMessage("user", "a"), ChatMessage("user", "b")])
    assert [m.role for m in plain] == ["user", "user"]


def test_summary_and_foreign_tool_messages_read_back_as_agent_squad_expects() -> None:
    summary = ChatMessage("system", "Earlier: ...", metadata={"chatlayers": {"summary": True}})
    call = ChatMessage("assistant", None, [ToolCall("c1", "f", "{}"), ToolCall("c2", "g", "x")])
    results = [
        ChatMessage("tool", "r1", tool_call_id="c1"),
        ChatMessage("tool", "r2", tool_call_id="c2"),
    ]
    back = from_chat_messages([summary, call, *results])
    assert view(back) == [
        ("user", [{"text": "Earlier: ..."}]),
        (
            "assistant",
            [
                {"toolUse": {"toolUseId": "c1", "name": "f", "input": {}}},
                {"toolUse": {"toolUseId": "c2", "name": "g", "input": "x"}},
            ],
        ),
        (
            "user",
            [
                {"toolResult": {"toolUseId": "c1", "content": [{"text": "r1"}]}},
                {"toolResult": {"toolUseId": "c2", "content": [{"text": "r2"}]}},
            ],
        ),
    ]


# --- the ChatStorage semantics, side by side with agent-squad's InMemoryChatStorage ---------


@pytest.fixture
def ordered_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """agent-squad timestamps in whole milliseconds; make every save a distinct millisecond
    so its timestamp sort has no ties (ours orders by the store's sequence)."""
    ticks = itertools.count()
    base = time.time()
    monkeypatch.setattr(time, "time", lambda: base + next(ticks) / 100)


@pytest.mark.usefixtures("ordered_clock")
@pytest.mark.anyio
async def test_same_results_as_agent_squads_in_memory_storage(tmp_path: Path) -> None:
    ours = AgentSquadChatStorage(SQLiteChatStorage(tmp_path / "chats.db"))
    theirs = SquadInMemoryChatStorage()
    assert isinstance(ours, SquadChatStorage)

    async def both(method: str, *args: Any) -> list[tuple[str, Any]]:
        a = await getattr(ours, method)(*args)
        b = await getattr(theirs, method)(*args)
        assert view(a) == view(b), (method, args)
        return view(a)

    turns = [
        ("u", "s", "tech", text("user", "my printer")),
        ("u", "s", "tech", text("user", "consecutive user: dropped")),
        ("u", "s", "tech", text("assistant", "restart it")),
        ("u", "s", "billing", text("user", "my invoice")),
        ("u", "s", "billing", text("assistant", "it is paid")),
        ("u", "s", "tech", text("user", "still broken")),
        ("u", "s", "tech", text("assistant", "call us")),
        ("u", "other-session", "tech", text("user", "elsewhere")),
    ]
    for user, session, agent, message in turns:
        await both("save_chat_message", user, session, agent, message)
    await both("save_chat_messages", "u", "s", "billing", TOOL_TURN)
    for size in (None, 0, 1, 2, 3, 4, 100):
        await both("fetch_chat", "u", "s", "tech", size)
        await both("fetch_chat", "u", "s", "billing", size)
    merged = await both("fetch_all_chats", "u", "s")
    assert merged[:3] == [
        ("user", [{"text": "my printer"}]),
        ("assistant", [{"text": "[tech] restart it"}]),
        ("user", [{"text": "my invoice"}]),
    ]
    assert await both("fetch_chat", "nobody", "s", "tech") == []
    assert await both("fetch_all_chats", "nobody", "s") == []


@pytest.mark.anyio
async def test_max_history_size_trims_what_is_returned_never_what_is_stored() -> None:
    stack = InMemoryChatStorage()
    storage = AgentSquadChatStorage(stack)
    for n in range(5):
        await storage.save_chat_message("u", "s", "a", text("user", f"q{n}"), 4)
        returned = await storage.save_chat_message("u", "s", "a", text("assistant", f"a{n}"), 3)
    assert [m.content[0]["text"] for m in returned] == ["q4", "a4"]  # 3 rounds down to 2
    assert len(await stack.fetch(ChatKey("u", "s", "a"))) == 10
    assert len(await storage.fetch_chat("u", "s", "a")) == 10


@pytest.mark.anyio
async def test_long_tool_histories_read_through_a_window() -> None:
    stack = InMemoryChatStorage()
    storage = AgentSquadChatStorage(stack)
    for _ in range(6):
        await storage.save_chat_messages("u", "s", "a", TOOL_TURN)
    full = await storage.fetch_chat("u", "s", "a")
    assert len(full) == 24
    for size in (2, 4, 6, 10, 22, 24, 30):
        assert view(await storage.fetch_chat("u", "s", "a", size)) == view(full[-size:])


@pytest.mark.anyio
async def test_timestamps_are_kept() -> None:
    stack = InMemoryChatStorage()
    storage = AgentSquadChatStorage(stack)
    await storage.save_chat_message(
        "u", "s", "a", TimestampedMessage("user", [{"text": "old"}], timestamp=1_700_000_000_123)
    )
    (stored,) = await stack.fetch(ChatKey("u", "s", "a"))
    assert stored.created_at is not None
    assert stored.created_at.timestamp() * 1000 == pytest.approx(1_700_000_000_123)
    assert stored.created_at.microsecond == 123_000


# --- the AgentSquad orchestrator over summarize::scrub::sqlite -----------------------------

# (agent-squad ships no type hints: its imports are untyped)
from agent_squad.agents import Agent, AgentOptions  # type: ignore[import-untyped]  # noqa: E402
from agent_squad.classifiers import Classifier, ClassifierResult  # type: ignore[import-untyped]  # noqa: E402
from agent_squad.orchestrator import AgentSquad  # type: ignore[import-untyped]  # noqa: E402
from agent_squad.types import AgentSquadConfig  # noqa: E402


def _text(message: Any) -> str:
    """The text blocks of an agent-squad message, one per line."""
    return "\n".join(b["text"] for b in message.content if "text" in b)


class EchoAgent(Agent):  # type: ignore[misc]
    """Answers without a model and records the history the orchestrator hands it."""

    def __init__(self, name: str) -> None:
        super().__init__(AgentOptions(name=name, description=f"handles {name} questions"))
        self.seen: list[tuple[str, list[tuple[str, str]]]] = []

    async def process_request(
        self,
        input_text: str,
        user_id: str,
        session_id: str,
        chat_history: list[ConversationMessage],
        additional_params: dict[str, str] | None = None,
    ) -> ConversationMessage:
        self.seen.append((user_id, [(m.role, _text(m)) for m in chat_history]))
        return ConversationMessage("assistant", [{"text": f"{self.id} answers: {input_text}"}])


class KeywordClassifier(Classifier):  # type: ignore[misc]
    """Picks the agent by keyword (no model) and records the history it is shown."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[tuple[str, str]]] = []

    async def process_request(
        self, input_text: str, chat_history: list[ConversationMessage]
    ) -> ClassifierResult:
        self.seen.append([(m.role, m.content[0]["text"]) for m in chat_history])
        agent_id = "billing" if "invoice" in input_text else "tech"
        return ClassifierResult(selected_agent=self.agents[agent_id], confidence=1.0)


@pytest.mark.anyio
async def test_agent_squad_orchestrator_over_a_scrubbed_summarized_sqlite_stack(
    tmp_path: Path,
) -> None:
    from storage.layers.summarizing import SummarizingChatStorage
    from storage.layers.transforming import TransformingChatStorage
    from storage.pii import PIIScrubber
    from summarizers import ExtractiveSummarizer

    path = tmp_path / "chats.db"
    stack = SummarizingChatStorage(
        TransformingChatStorage(SQLiteChatStorage(path), PIIScrubber(secret="t")),
        ExtractiveSummarizer(),
        trigger_at=2,
        keep_last=1,
    )
    classifier = KeywordClassifier()
    tech, billing = EchoAgent("tech"), EchoAgent("billing")
    squad = AgentSquad(
        options=AgentSquadConfig(USE_DEFAULT_AGENT_IF_NONE_IDENTIFIED=False),
        storage=AgentSquadChatStorage(stack),
        classifier=classifier,
    )
    squad.add_agent(tech)
    squad.add_agent(billing)

    turns = {
        "alice": ["printer", "printer", "invoice", "printer", "printer"],
        "bob": ["router", "router", "router", "router", "invoice"],
    }
    emails: list[str] = []
    for n in range(5):
        for user, topics in turns.items():
            email = f"{user}.{n}@example.org"
            emails.append(email)
            question = f"My {topics[n]} is broken, write to {email}"
            response = await squad.route_request(question, user, "session-1")
            agent = "billing" if topics[n] == "invoice" else "tech"
            # route_request turns errors into text: check it is the agent's answer.
            assert response.output.content[0]["text"] == f"{agent} answers: {question}"

    # The classifier saw the raw merged history of the session: every earlier message of
    # that user, across both agents, attributed, never summarized.
    alice_last, bob_last = classifier.seen[-2], classifier.seen[-1]
    assert len(alice_last) == len(bob_last) == 2 * 4
    assert alice_last[4] == ("user", alice_last[4][1])
    assert alice_last[5][1].startswith("[billing] billing answers: My invoice is broken")
    assert all("Summary" not in text for _, text in alice_last + bob_last)
    assert not any("bob" in text for _, text in alice_last)
    # ...scrubbed: the stack stored placeholders, not the addresses.
    assert "<EMAIL_ADDRESS_" in alice_last[0][1]
    assert all(email not in text for email in emails for _, text in alice_last + bob_last)

    # Each user's tech agent saw the summarized buffer once the raw history passed
    # trigger_at * 2 = 4: the fourth tech question came with 6 raw messages, served as the
    # summary and the last turn (keep_last=1), the summary opening that turn's user message
    # (agent-squad histories have no system role, and Bedrock wants roles to alternate).
    for user in turns:
        histories = [history for who, history in tech.seen if who == user]
        assert [len(history) for history in histories] == [0, 2, 4, 2]
        (role, text), answer = histories[-1]
        assert role == "user"
        summary, _, question = text.partition("</conversation_summary>\n")
        assert "<conversation_summary>" in summary  # the framed summary, first
        # The turn kept verbatim is the third tech turn as stored (scrubbed).
        raw = await stack.inner.fetch(ChatKey(user, "session-1", "tech"))
        assert [("user", question), answer] == [(m.role, m.text) for m in raw[4:6]]
        assert "<EMAIL_ADDRESS_" in question
    assert [len(history) for _, history in billing.seen] == [0, 0]
    # The inner store kept every raw message.
    assert len(await stack.fetch_all_chats("alice", "session-1")) == 10

    await stack.aclose()
    data = stored_bytes(tmp_path)
    assert b"printer is broken" in data  # the check reads the stored records
    assert not [email for email in emails if email.encode() in data]


def stored_bytes(folder: Path) -> bytes:
    """The database file with its WAL and shared-memory files."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("chats.db"))


@pytest.mark.anyio
async def test_two_workers_saving_one_role_at_once_store_one_message(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = AgentSquadChatStorage(SQLiteChatStorage(db))

    def user(text: str) -> ConversationMessage:
        return ConversationMessage(role=ParticipantRole.USER.value, content=[{"text": text}])

    async def save_meanwhile() -> None:
        await two.save_chat_message("u", "s", "a", user("from two"))

    racing = SavesAfterFetch(SQLiteChatStorage(db), save_meanwhile, times=0)
    one = AgentSquadChatStorage(racing)
    await one.save_chat_message("u", "s", "a", user("hi"))
    await one.save_chat_message(
        "u",
        "s",
        "a",
        ConversationMessage(role=ParticipantRole.ASSISTANT.value, content=[{"text": "hello"}]),
    )
    racing.times = 1  # the other worker saves a user message right after this one's check
    got = await one.save_chat_message("u", "s", "a", user("from one"))
    texts = [m.content[0]["text"] for m in got]
    assert texts == ["hi", "hello", "from two"]  # never two user messages in a row
    assert [m.content[0]["text"] for m in await two.fetch_chat("u", "s", "a")] == texts


@pytest.mark.anyio
async def test_a_save_that_keeps_losing_the_race_pauses_between_attempts_then_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "chats.db"
    other = SQLiteChatStorage(db)

    async def save_meanwhile() -> None:  # another worker's reply lands after every check
        await other.save(ChatKey("u", "s", "a"), ChatMessage("assistant", "elsewhere"))

    pauses: list[int] = []

    async def back_off(attempt: int) -> None:
        pauses.append(attempt)

    monkeypatch.setattr("storage.adapters.agent_squad.back_off", back_off)
    racing = SavesAfterFetch(SQLiteChatStorage(db), save_meanwhile, times=SAVE_ATTEMPTS)
    squad = AgentSquadChatStorage(racing)
    message = ConversationMessage(role=ParticipantRole.USER.value, content=[{"text": "mine"}])
    with pytest.raises(ConflictError, match=f"changed {SAVE_ATTEMPTS} times"):
        await squad.save_chat_message("u", "s", "a", message)
    assert pauses == list(range(1, SAVE_ATTEMPTS))  # a pause before every new attempt
    stored = await other.fetch(ChatKey("u", "s", "a"))
    assert "mine" not in [m.text for m in stored]  # nothing saved
    assert len(stored) == SAVE_ATTEMPTS
