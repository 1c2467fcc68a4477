"""The docs' adapter examples run, each in a fresh process inside a temporary directory.

The snippets below are the text of docs/adapters.md. ``my_*`` names stand for the reader's own
agents, classifier and chain; the prelude of each example defines them from the offline fakes of
the adapter tests (no network). Any code block of the README or of docs/ that uses
``storage.adapters`` or ``storage.sync`` is run the same way, so the docs cannot drift from
working code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO, code_blocks

AGENT_SQUAD = """\
import asyncio
from agent_squad.orchestrator import AgentSquad
from storage import open_storage
from storage.adapters import AgentSquadChatStorage

async def main(classifier, agents):
    async with open_storage("summarize::scrub::sqlite:///chats.db") as stack:
        squad = AgentSquad(storage=AgentSquadChatStorage(stack), classifier=classifier)
        for agent in agents:
            squad.add_agent(agent)
        answer = await squad.route_request("Mail me: ada@example.org", "user-1", "session-1")
        print(answer.output.content[0]["text"])

asyncio.run(main(my_classifier, my_agents))
"""

OPENAI_AGENTS = """\
import asyncio
from agents import Runner
from storage import ChatKey, open_storage
from storage.adapters import OpenAIAgentsSession

async def main(agent):
    async with open_storage("summarize::scrub::sqlite:///chats.db") as stack:
        session = OpenAIAgentsSession(stack, ChatKey("user-1", "session-1", agent.name))
        result = await Runner.run(agent, "Weather in Paris?", session=session)
        print(result.final_output)

asyncio.run(main(my_agent))
"""

LANGCHAIN = """\
from langchain_core.runnables.history import RunnableWithMessageHistory
from storage import ChatKey, open_storage
from storage.adapters import LangChainChatMessageHistory
from storage.sync import SyncChatStorage

with SyncChatStorage(open_storage("summarize::scrub::sqlite:///chats.db")) as chats:
    chain = RunnableWithMessageHistory(
        my_chain,  # prompt | model, with a MessagesPlaceholder("history")
        lambda session_id: LangChainChatMessageHistory(chats, ChatKey("u1", session_id, "chat")),
        input_messages_key="question", history_messages_key="history",
    )
    reply = chain.invoke({"question": "I am Ada."}, {"configurable": {"session_id": "s1"}})
    print(reply.content)
"""

LANGGRAPH = """\
from langchain.agents import create_agent
from storage import open_storage
from storage.adapters import ChatlayersCheckpointer
from storage.sync import SyncChatStorage

with SyncChatStorage(open_storage("summarize::scrub::sqlite:///chats.db")) as chats:
    agent = create_agent(my_model, my_tools, checkpointer=ChatlayersCheckpointer(chats))
    config = {"configurable": {"thread_id": "session-1", "user_id": "user-1"}}
    agent.invoke({"messages": [{"role": "user", "content": "Mail me: ada@example.org"}]}, config)
    state = agent.invoke({"messages": [{"role": "user", "content": "Who am I?"}]}, config)
    print(state["messages"][-1].content)
"""

PYDANTIC_AI = """\
import asyncio
from storage import ChatKey, open_storage
from storage.adapters import PydanticAIHistory

async def main(agent):
    async with open_storage("summarize::scrub::sqlite:///chats.db") as stack:
        history = PydanticAIHistory(stack, ChatKey("user-1", "session-1", "assistant"))
        for prompt in ("Mail me: ada@example.org", "What did I ask?"):
            result = await agent.run(prompt, message_history=await history.load())
            await history.save(result.new_messages())
        print(result.output)

asyncio.run(main(my_agent))
"""

LLAMA_INDEX = """\
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from storage import open_storage
from storage.adapters import LlamaIndexChatStore
from storage.sync import SyncChatStorage

with SyncChatStorage(open_storage("summarize::scrub::sqlite:///chats.db")) as chats:
    store = LlamaIndexChatStore(chats, user_id="user-1")
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="session-1")
    memory.put(ChatMessage(role="user", content="Mail me: ada@example.org"))
    print(memory.get()[-1].content)
"""

SYNC = """\
from storage import ChatKey, ChatMessage, open_storage
from storage.sync import SyncChatStorage

with SyncChatStorage(open_storage("sqlite:///chats.db")) as chats:
    key = ChatKey("user-1", "session-1", "support")
    chats.save(key, ChatMessage("user", "hello from a thread without an event loop"))
    print(chats.fetch(key, limit=20)[-1].content)
"""

PRELUDES = {
    "agent_squad": (
        "from tests.adapters.test_agent_squad import EchoAgent, KeywordClassifier\n"
        "my_classifier = KeywordClassifier()\n"
        'my_agents = [EchoAgent("tech"), EchoAgent("billing")]\n'
    ),
    "openai_agents": (
        "from tests.adapters.test_openai_agents import (\n"
        "    ScriptedModel, function_call, text_message, weather_agent)\n"
        "my_agent = weather_agent(ScriptedModel([\n"
        "    [function_call('get_weather', '{\"city\": \"Paris\"}', 'call_1')],\n"
        "    [text_message('It is sunny in Paris.')]]))\n"
    ),
    "langchain": (
        "import warnings\n"
        'warnings.filterwarnings("ignore", message=".*RunnableWithMessageHistory is deprecated")\n'
        "from tests.adapters.test_langchain import _recording_chain\n"
        'my_chain = _recording_chain(["Hello Ada!"], [])\n'
    ),
    "langgraph": (
        "from langchain_core.messages import AIMessage\n"
        "from tests.adapters.test_langgraph import ScriptedModel\n"
        "my_model = ScriptedModel(messages=iter(\n"
        "    [AIMessage('Noted.'), AIMessage('You are the one who wrote to me.')]))\n"
        "my_tools = []\n"
    ),
    "pydantic_ai": (
        "from pydantic_ai import Agent\n"
        "from pydantic_ai.messages import ModelResponse, TextPart\n"
        "from pydantic_ai.models.function import FunctionModel\n"
        "my_agent = Agent(FunctionModel(lambda messages, info: ModelResponse(\n"
        "    parts=[TextPart(f'I have {len(messages)} messages of history.')])))\n"
    ),
    "llama_index": "",
    "sync": "",
}

EXAMPLES = [
    pytest.param(
        "agent_squad", AGENT_SQUAD, "tech answers: Mail me: ada@example.org", id="agent-squad"
    ),
    pytest.param("openai_agents", OPENAI_AGENTS, "It is sunny in Paris.", id="openai-agents"),
    pytest.param("langchain", LANGCHAIN, "Hello Ada!", id="langchain"),
    pytest.param("langgraph", LANGGRAPH, "You are the one who wrote to me.", id="langgraph"),
    pytest.param("pydantic_ai", PYDANTIC_AI, "I have 3 messages of history.", id="pydantic-ai"),
    pytest.param("llama_index", LLAMA_INDEX, "Mail me: <EMAIL_ADDRESS_", id="llama-index"),
    pytest.param("sync", SYNC, "hello from a thread without an event loop", id="sync"),
]


def run_example(prelude: str, code: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CHATLAYERS_PII_SECRET": "readme-example",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("framework", "code", "expected"), EXAMPLES)
def test_readme_example_runs(framework: str, code: str, expected: str, tmp_path: Path) -> None:
    pytest.importorskip(
        {
            "sync": "anyio",
            "agent_squad": "agent_squad",
            "openai_agents": "agents",
            "langchain": "langchain_core",
            "langgraph": "langgraph",
            "pydantic_ai": "pydantic_ai",
            "llama_index": "llama_index.core",
        }[framework]
    )
    assert len(code.strip().splitlines()) <= 14  # a short example stays short
    out = run_example(PRELUDES[framework], code, tmp_path)
    assert expected in out
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("chats.db*"))
    assert stored  # it wrote where the example says
    assert b"ada@example.org" not in stored  # ... through the scrubbing layer


def readme_blocks() -> list[str]:
    """Every Python block of the README and docs/ that uses an adapter or the sync facade."""
    blocks = code_blocks("python")
    return [b for b in blocks if "storage.adapters" in b or "storage.sync" in b]


def test_the_docs_have_an_example_per_adapter() -> None:
    assert len(readme_blocks()) >= 7  # six frameworks and SyncChatStorage


@pytest.mark.parametrize("code", readme_blocks())
def test_readme_adapter_blocks_run(code: str, tmp_path: Path) -> None:
    if "AgentSquadChatStorage" in code:
        framework = "agent_squad"
    elif "OpenAIAgentsSession" in code:
        framework = "openai_agents"
    elif "LangChainChatMessageHistory" in code:
        framework = "langchain"
    elif "ChatlayersCheckpointer" in code:
        framework = "langgraph"
    elif "PydanticAIHistory" in code:
        framework = "pydantic_ai"
    elif "LlamaIndexChatStore" in code:
        framework = "llama_index"
    else:
        framework = "sync"
    out = run_example(PRELUDES[framework], code, tmp_path)
    assert out.strip()
