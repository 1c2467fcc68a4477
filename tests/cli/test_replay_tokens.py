"""Replay works without tiktoken's encoding files (a plain install without the llm extra)."""

from __future__ import annotations

import pytest

import storage.tokens
from storage.cli.replay import token_counter
from storage.errors import ConfigError
from storage.message import ChatMessage


def testtoken_counter_counts_when_encodings_exist() -> None:
    count = token_counter("gpt-4o")
    assert count is not None
    assert count([ChatMessage("user", "hello world")]) > 0


def testtoken_counter_absent_when_encodings_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def missing(*args: object, **kwargs: object) -> int:
        raise ConfigError("no encoding file for o200k_base: pip install 'chatlayers[llm]'")

    monkeypatch.setattr(storage.tokens, "count_tokens", missing)
    assert token_counter("gpt-4o") is None
    assert "chatlayers[llm]" in caplog.text
