"""count_tokens: tiktoken, offline, the OpenAI cookbook's per-message overhead; and the public
surface of ``summarizers``."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import summarizers
from storage.errors import ConfigError
from storage.message import ChatMessage, ToolCall
from summarizers import count_tokens
from summarizers.tokens import encoding_for_model, get_encoding
from tests.paths import REPO

ROOT = REPO

# The example of the OpenAI cookbook "How to count tokens with tiktoken"
# (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken): the API reports
# 129 prompt tokens for gpt-4-0613 and 124 for gpt-4o.
COOKBOOK = [
    ChatMessage.from_openai(d)
    for d in [
        {
            "role": "system",
            "content": "You are a helpful, pattern-following assistant that "
            "translates corporate jargon into plain English.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "New synergies will help drive top-line growth.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Things working well together will increase revenue.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "Let's circle back when we have "
            "more bandwidth to touch base on opportunities for increased leverage.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Let's talk later when we're less busy about how to do better.",
        },
        {
            "role": "user",
            "content": "This late pivot means we don't have time to boil the "
            "ocean for the client deliverable.",
        },
    ]
]


def test_matches_the_openai_cookbook() -> None:
    assert count_tokens(COOKBOOK, model="gpt-4") == 129
    assert count_tokens(COOKBOOK, model="gpt-4o") == 124
    assert count_tokens(COOKBOOK) == 124  # default model gpt-4o


def test_tool_calls_results_and_parts_are_counted() -> None:
    enc = get_encoding("o200k_base").encode_ordinary
    args = '{"reservation_id": "ZFA04Y", "cabin": "business"}'
    bare = ChatMessage("assistant", None)
    called = ChatMessage("assistant", None, [ToolCall("call_1", "update_reservation", args)])
    assert count_tokens([called]) - count_tokens([bare]) == len(enc("update_reservation")) + len(
        enc(args)
    )
    result = ChatMessage("tool", "ok", tool_call_id="call_1")
    assert count_tokens([result]) == 3 + len(enc("tool")) + len(enc("ok")) + len(enc("call_1")) + 3
    parts = ChatMessage("user", [{"type": "text", "text": "hello"}, {"type": "image_url"}])
    assert count_tokens([parts]) == count_tokens([ChatMessage("user", "hello")])


def test_empty_history_and_special_token_text() -> None:
    assert count_tokens([]) == 0
    # Special-token strings in user text are plain text, never an error.
    assert count_tokens([ChatMessage("user", "<|endoftext|>")]) > 3 + 1 + 3


def test_model_names_map_to_encodings() -> None:
    assert encoding_for_model("gpt-4o").name == "o200k_base"
    assert encoding_for_model("openai/gpt-4").name == "cl100k_base"
    assert encoding_for_model("anthropic/claude-3-5-sonnet").name == "o200k_base"  # fallback
    assert encoding_for_model("gpt-4o") is encoding_for_model("gpt-4o-mini")  # cached


def test_unsupported_encoding_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot be loaded offline"):
        get_encoding("gpt2")


_message = st.builds(
    ChatMessage,
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.one_of(st.none(), st.text(max_size=50)),
    st.lists(
        st.builds(ToolCall, st.text(max_size=8), st.text(max_size=12), st.text(max_size=30)),
        max_size=2,
    ),
    st.one_of(st.none(), st.text(max_size=8)),
    st.one_of(st.none(), st.text(max_size=8)),
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(_message, max_size=8), model=st.sampled_from(["gpt-4o", "gpt-4"]))
def test_property_grows_strictly_and_adds_up(messages: list[ChatMessage], model: str) -> None:
    counts = [count_tokens(messages[:n], model) for n in range(len(messages) + 1)]
    assert all(a < b for a, b in itertools.pairwise(counts))
    if len(messages) >= 2:  # per-message parts add up; the reply primer counts once
        head, tail = messages[:1], messages[1:]
        assert counts[-1] == count_tokens(head, model) + count_tokens(tail, model) - 3


def _run(code: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
    }
    # Any download attempt fails at once: the tests prove the files are read locally.
    environ["HTTPS_PROXY"] = environ["HTTP_PROXY"] = "http://127.0.0.1:9"
    for key, value in env.items():
        if value is not None:
            environ[key] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_offline_without_cache_dir_uses_litellms_files_without_importing_litellm() -> None:
    proc = _run(
        """
        import os, sys
        from storage.message import ChatMessage
        from summarizers import count_tokens
        assert "TIKTOKEN_CACHE_DIR" not in os.environ
        print(count_tokens([ChatMessage("user", "hello world")], "gpt-4"))
        print(count_tokens([ChatMessage("user", "hello world")], "gpt-4o"))
        print("litellm" in sys.modules, os.environ["TIKTOKEN_CACHE_DIR"].endswith("tokenizers"))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["9", "9", "False", "True"]


def test_users_cache_dir_without_the_file_is_a_config_error(tmp_path: Path) -> None:
    proc = _run(
        """
        from summarizers import count_tokens
        from storage.errors import ConfigError
        from storage.message import ChatMessage
        try:
            count_tokens([ChatMessage("user", "x")])
        except ConfigError as exc:
            print(exc)
        """,
        TIKTOKEN_CACHE_DIR=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "does not hold a valid o200k_base.tiktoken" in proc.stdout


def test_corrupt_file_is_refused_and_kept(tmp_path: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    bad = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    bad.write_text("garbage")
    proc = _run(
        """
        from summarizers.tokens import get_encoding
        from storage.errors import ConfigError
        try:
            get_encoding("o200k_base")
        except ConfigError as exc:
            print("refused")
        """,
        TIKTOKEN_CACHE_DIR=str(tmp_path),
    )
    assert proc.stdout.strip() == "refused", proc.stderr
    assert bad.read_text() == "garbage"  # tiktoken would have deleted it and downloaded


def test_without_litellm_the_error_names_the_extra() -> None:
    proc = _run(
        """
        import importlib.util
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "litellm" else real(name, *a)
        import storage.tokens
        storage.tokens._VENDORED_DIR = storage.tokens.Path("/nonexistent")
        from summarizers import count_tokens
        from storage.errors import ConfigError
        from storage.message import ChatMessage
        try:
            count_tokens([ChatMessage("user", "x")])
        except ConfigError as exc:
            print(exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'chatlayers[llm]'" in proc.stdout


def test_imports_stay_light() -> None:
    proc = _run(
        """
        import sys
        import storage, summarizers
        print(sorted(m for m in ("litellm", "tiktoken", "openai") if m in sys.modules))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_public_names() -> None:
    assert summarizers.__all__ == [
        "ChatSummarizer",
        "ExtractiveSummarizer",
        "LiteLLMSummarizer",
        "count_tokens",
    ]
    for name in summarizers.__all__:
        assert getattr(summarizers, name) is not None


# --- incremental counting and context windows ---------------------------------------------


def _sample() -> list[ChatMessage]:
    call = ToolCall("c1", "lookup", '{"q": "Paris weather"}')
    return [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "What's the weather in Paris?", name="ana"),
        ChatMessage("assistant", None, (call,)),
        ChatMessage("tool", "18 C, sunny", tool_call_id="c1"),
        ChatMessage("assistant", [{"type": "text", "text": "Sunny, 18 C."}]),
    ]


def test_message_tokens_sum_to_count_tokens() -> None:
    from summarizers.tokens import message_tokens

    messages = _sample()
    assert sum(message_tokens(m) for m in messages) + 3 == count_tokens(messages)
    assert message_tokens(messages[1]) > message_tokens(ChatMessage("user", "x"))


def test_token_counter_counts_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.tokens as tokens

    counter = tokens.TokenCounter("gpt-4o")
    messages = _sample()
    assert counter.total(messages) == count_tokens(messages)
    calls = 0
    real = tokens._message_tokens

    def counting(message: ChatMessage, encode: Any) -> int:
        nonlocal calls
        calls += 1
        return real(message, encode)

    grown = [*messages, ChatMessage("user", "And tomorrow?")]
    expected = count_tokens(grown)
    monkeypatch.setattr(tokens, "_message_tokens", counting)
    assert counter.total(grown) == expected
    assert calls == 1  # only the new message is counted; none is recounted


def test_context_window_from_litellm_bundled_data() -> None:
    from summarizers.tokens import context_window

    assert context_window("gpt-4o") == 128_000
    assert context_window("openai/gpt-4o") == 128_000
    with pytest.raises(ConfigError, match="no context window"):
        context_window("no-such-model-xyz")
