"""The README's adapter examples run, each in a fresh process inside a temporary directory.

The snippets below are the README text. ``my_*`` names stand for the reader's own agents,
classifier and chain; the prelude of each example defines them from the offline fakes of the
adapter tests (no network). Any README code block that uses ``storage.adapters`` or
``storage.sync`` is run the same way, so the README cannot drift from working code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

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
        "from tests.test_adapter_agent_squad import EchoAgent, KeywordClassifier\n"
        "my_classifier = KeywordClassifier()\n"
        'my_agents = [EchoAgent("tech"), EchoAgent("billing")]\n'
    ),
    "openai_agents": (
        "from tests.test_adapter_openai_agents import (\n"
        "    ScriptedModel, function_call, text_message, weather_agent)\n"
        "my_agent = weather_agent(ScriptedModel([\n"
        "    [function_call('get_weather', '{\"city\": \"Paris\"}', 'call_1')],\n"
        "    [text_message('It is sunny in Paris.')]]))\n"
    ),
    "langchain": (
        "import warnings\n"
        'warnings.filterwarnings("ignore", message=".*RunnableWithMessageHistory is deprecated")\n'
        "from tests.test_adapter_langchain import _recording_chain\n"
        'my_chain = _recording_chain(["Hello Ada!"], [])\n'
    ),
    "sync": "",
}

EXAMPLES = [
    pytest.param(
        "agent_squad", AGENT_SQUAD, "tech answers: Mail me: ada@example.org", id="agent-squad"
    ),
    pytest.param("openai_agents", OPENAI_AGENTS, "It is sunny in Paris.", id="openai-agents"),
    pytest.param("langchain", LANGCHAIN, "Hello Ada!", id="langchain"),
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
        }[framework]
    )
    assert len(code.strip().splitlines()) <= 14  # a short example stays short
    out = run_example(PRELUDES[framework], code, tmp_path)
    assert expected in out
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("chats.db*"))
    assert stored  # it wrote where the example says
    assert b"ada@example.org" not in stored  # ... through the scrubbing layer


def readme_blocks() -> list[str]:
    readme = REPO / "README.md"
    if not readme.exists():
        return []
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if "storage.adapters" in b or "storage.sync" in b]


@pytest.mark.parametrize(
    "code",
    readme_blocks()
    or [pytest.param("", marks=pytest.mark.skip(reason="README.md has no adapter example yet"))],
)
def test_readme_adapter_blocks_run(code: str, tmp_path: Path) -> None:
    if "AgentSquadChatStorage" in code:
        framework = "agent_squad"
    elif "OpenAIAgentsSession" in code:
        framework = "openai_agents"
    elif "LangChainChatMessageHistory" in code:
        framework = "langchain"
    else:
        framework = "sync"
    out = run_example(PRELUDES[framework], code, tmp_path)
    assert out.strip()
