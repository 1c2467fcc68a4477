# ruff: noqa: E501  (the templates quote the published error messages whole)
"""What model clients accept: a view checked by the clients' own rules, not only ours.

:func:`refusals` runs one view (the request a client would send: the view as OpenAI dicts)
through every check and returns what refused it (empty: accepted everywhere):

- ``qwen``: a jinja2 template reproducing the ``raise_exception`` guards of the Qwen3.5 chat
  template (``chat_template`` of the Qwen/Qwen3.5 models' ``tokenizer_config.json`` on
  Hugging Face, as shipped in llama-cpp-python's ``llama_chat_format.py``
  ``Qwen35ChatHandler``): "No messages provided.", "No user query found in messages.",
  "System message must be at the beginning.", "System message cannot contain images.",
  "Unexpected item type in content.", "Unexpected message role.";
- ``mistral``: a jinja2 template reproducing the guards of the Mistral Small 3.x / Devstral /
  Ministral chat template (``chat_template.jinja`` of mistralai's Hugging Face repos, as
  Unsloth republishes it): a system message only first, text chunks only in it, and "After
  the optional system message, conversation roles must alternate user and assistant roles
  except for tool calls and results.";
- ``mistral-common``: Mistral's own request validation (``MistralRequestValidatorV13`` over
  ``ChatCompletionRequest.from_openai``). Mistral clients give tool calls their own 9-character
  ids (vLLM's Mistral tool parser does), so ids are mapped to such ids first, pairing kept;
- ``anthropic``, ``gemini``, ``bedrock``: litellm's request transforms run offline
  (``AnthropicConfig().transform_request``, the Gemini ``transform_request_body``,
  ``AmazonConverseConfig().transform_request``; no network), their output checked against
  the providers' documented rules: the conversation opens with a user turn, turns alternate,
  every tool call's result is in the next user turn and answers a call of the turn before;
- ``validate_history``: chatlayers' own rules.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from storage.history import validate_history
from storage.message import ChatMessage

if TYPE_CHECKING:
    from litellm.types.llms.openai import AllMessageValues

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CLIENTS = ("qwen", "mistral", "mistral-common", "anthropic", "gemini", "bedrock", "validate")

QWEN_GUARDS = """
{%- macro render(content, is_system) -%}
  {%- if content is string -%}{{ content }}
  {%- elif content is iterable and content is not mapping -%}
    {%- for item in content -%}
      {%- if 'image' in item or 'image_url' in item or item.type == 'image' -%}
        {%- if is_system %}{{ raise_exception('System message cannot contain images.') }}{% endif -%}
      {%- elif 'text' in item -%}{{ item.text }}
      {%- else -%}{{ raise_exception('Unexpected item type in content.') }}
      {%- endif -%}
    {%- endfor -%}
  {%- elif content is none or content is undefined -%}
  {%- else -%}{{ raise_exception('Unexpected content type.') }}
  {%- endif -%}
{%- endmacro -%}
{%- if not messages %}{{ raise_exception('No messages provided.') }}{% endif -%}
{%- set ns = namespace(user=false) -%}
{%- for message in messages -%}
  {%- if message.role == 'user' %}{% set ns.user = true %}{% endif -%}
{%- endfor -%}
{%- if not ns.user %}{{ raise_exception('No user query found in messages.') }}{% endif -%}
{%- for message in messages -%}
  {%- if message.role == 'system' -%}
    {%- if not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{% endif -%}
    <|im_start|>system {{ render(message.content, true) }}<|im_end|>
  {%- elif message.role in ['user', 'assistant', 'tool'] -%}
    <|im_start|>{{ message.role }} {{ render(message.content, false) }}<|im_end|>
  {%- else -%}{{ raise_exception('Unexpected message role.') }}
  {%- endif -%}
{%- endfor -%}
"""

MISTRAL_GUARDS = """
{%- if messages[0]['role'] == 'system' -%}
  {%- if messages[0]['content'] is not string -%}
    {%- for block in messages[0]['content'] -%}
      {%- if block['type'] != 'text' -%}
        {{ raise_exception('Only text chunks are supported in system message contents.') }}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- set ns = namespace(index=0) -%}
{%- for message in loop_messages -%}
  {%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) -%}
    {%- if (message.role == 'user') != (ns.index % 2 == 0) -%}
      {{ raise_exception('After the optional system message, conversation roles must alternate user and assistant roles except for tool calls and results.') }}
    {%- endif -%}
    {%- set ns.index = ns.index + 1 -%}
  {%- endif -%}
{%- endfor -%}
{%- for message in loop_messages -%}
  {%- if message.role not in ['user', 'assistant', 'tool'] -%}
    {{ raise_exception('Only user, assistant and tool roles are supported, got ' + message.role) }}
  {%- endif -%}
  [{{ message.role }}]
{%- endfor -%}
"""


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
_TEMPLATES = {
    name: _ENV.from_string(src)
    for name, src in (("qwen", QWEN_GUARDS), ("mistral", MISTRAL_GUARDS))
}


def wire(view: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    return [m.to_openai() for m in view]


def _template(name: str) -> Callable[[list[dict[str, Any]]], None]:
    def check(messages: list[dict[str, Any]]) -> None:
        _TEMPLATES[name].render(messages=messages, raise_exception=_raise)

    return check


def _mistral_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool call id as a 9-character alphanumeric id, results paired as before."""
    out = copy.deepcopy(messages)
    current: dict[str, str] = {}
    for n, message in enumerate(out):
        if message.get("tool_calls"):
            current = {}
            for call in message["tool_calls"]:
                new = hashlib.sha256(f"{n}:{call['id']}".encode()).hexdigest()[:9]
                current[call["id"]] = new
                call["id"] = new
        elif message.get("role") == "tool":
            message["tool_call_id"] = current.get(message["tool_call_id"], "unmatched")
    return out


def _mistral_common(messages: list[dict[str, Any]]) -> None:
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.validator import (
        MistralRequestValidatorV13,
        ValidationMode,
    )

    request = ChatCompletionRequest.from_openai(_mistral_ids(messages))
    MistralRequestValidatorV13(mode=ValidationMode.test).validate_messages(request.messages)


def _tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted(
        {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
        | {m["name"] for m in messages if m.get("role") == "tool" and m.get("name")}
    )
    schema = {"type": "object", "properties": {}}
    return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]


def _check_turns(
    turns: Sequence[tuple[str, list[str], list[str]]], user: str, provider: str
) -> None:
    """``turns``: (role, tool call ids, tool result ids) per provider message."""
    if not turns or turns[0][0] != user:
        raise AssertionError(f"{provider}: the conversation must open with a {user} turn")
    for n, (role, calls, results) in enumerate(turns):
        if n and role == turns[n - 1][0]:
            raise AssertionError(f"{provider}: turns {n - 1} and {n} have the same role")
        if calls:
            after = turns[n + 1][2] if n + 1 < len(turns) else None
            if after is not None and sorted(after) != sorted(calls):
                raise AssertionError(f"{provider}: turn {n}'s calls are not answered next")
            if after is None and role != user:
                pass  # a call at the very end waits for its result: not a request
        if results and (not n or sorted(turns[n - 1][1]) != sorted(results)):
            raise AssertionError(f"{provider}: turn {n} answers calls the turn before did not make")


def _litellm_copy(messages: list[dict[str, Any]]) -> list[AllMessageValues]:
    """A copy of ``messages`` (OpenAI chat dicts) for a litellm transform, which may edit it."""
    return cast("list[AllMessageValues]", copy.deepcopy(messages))


def _anthropic(messages: list[dict[str, Any]]) -> None:
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    body = AnthropicConfig().transform_request(
        "claude-sonnet-4-5-20250929", _litellm_copy(messages), {"tools": _tools(messages)}, {}, {}
    )
    turns = []
    for m in body["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else []
        calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        turns.append((m["role"], calls, results))
    _check_turns(turns, "user", "anthropic")
    _prompt_first(messages, [b.get("text", "") for b in body.get("system") or []], "anthropic")


def _gemini(messages: list[dict[str, Any]]) -> None:
    from litellm.llms.vertex_ai.gemini.transformation import transform_request_body

    body = transform_request_body(
        _litellm_copy(messages), "gemini-2.5-flash", {}, "gemini", {}, None
    )
    turns = []
    for content in body["contents"]:
        parts = content.get("parts") or []
        calls = [p["function_call"]["name"] for p in parts if "function_call" in p]
        results = [p["function_response"]["name"] for p in parts if "function_response" in p]
        turns.append((content["role"], calls, results))
    _check_turns(turns, "user", "gemini")
    system: Mapping[str, Any] = body.get("system_instruction") or {}
    _prompt_first(messages, [p.get("text", "") for p in system.get("parts") or []], "gemini")


def _bedrock(messages: list[dict[str, Any]]) -> None:
    from litellm.llms.bedrock.chat.converse_transformation import AmazonConverseConfig

    body = AmazonConverseConfig().transform_request(
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        _litellm_copy(messages),
        {"tools": _tools(messages)},
        {},
        {},
    )
    turns = []
    for m in body["messages"]:
        blocks = m["content"]
        calls = [b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b]
        results = [b["toolResult"]["toolUseId"] for b in blocks if "toolResult" in b]
        turns.append((m["role"], calls, results))
    _check_turns(turns, "user", "bedrock")
    _prompt_first(messages, [b.get("text", "") for b in body.get("system") or []], "bedrock")


def _prompt_first(messages: list[dict[str, Any]], system: list[str], provider: str) -> None:
    """The view's leading system text is the provider's system prompt, first and whole."""
    if messages and messages[0].get("role") == "system":
        lead = messages[0]["content"]
        text = lead if isinstance(lead, str) else "".join(p.get("text", "") for p in lead)
        if "".join(system)[: len(text)] != text:
            raise AssertionError(f"{provider}: the leading system text is not the system prompt")


def _validate(messages: list[dict[str, Any]]) -> None:
    validate_history(messages)


_CHECKS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "qwen": _template("qwen"),
    "mistral": _template("mistral"),
    "mistral-common": _mistral_common,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "bedrock": _bedrock,
    "validate": _validate,
}


def refusals(view: Sequence[ChatMessage]) -> dict[str, str]:
    """``client -> why it refused`` for every client of :data:`CLIENTS` that refuses ``view``."""
    messages = wire(view)
    out: dict[str, str] = {}
    for name, check in _CHECKS.items():
        try:
            check(messages)
        except Exception as exc:  # every client's own error type
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out
