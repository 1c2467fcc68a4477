"""Every field that carries text is scrubbed; payload bytes never are; glued PII.

Shapes: OpenAI chat-completions content parts (``text``, ``refusal``, ``image_url``, ``file``,
``input_audio``), the assistant message's ``audio.transcript`` and ``refusal``, and
agent-squad (Bedrock Converse) ``toolResult`` / ``toolUse`` blocks.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from storage.message import ChatKey, ChatMessage, thaw
from storage.pii import PIIScrubber

KEY = ChatKey("u", "s", "a")
EMAIL = "ana@example.com"
PHONE = "212-555-0147"
PLACEHOLDER = r"<[A-Z_]+_[0-9a-f]{8}>"
# Base64 that, decoded as text, would hold an e-mail address: it must come back byte for byte.
PAYLOAD = base64.b64encode(f"contact {EMAIL} +1 415 555 0147".encode()).decode()


@pytest.fixture
def scrubber() -> PIIScrubber:
    return PIIScrubber(secret="fields")


def wire(message: ChatMessage) -> dict[str, Any]:
    return message.to_openai()


def test_refusal_content_part_and_refusal_field(scrubber: PIIScrubber) -> None:
    message = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": f"I won't email {EMAIL}."}],
            "refusal": f"Not calling {PHONE}.",
        }
    )
    out = wire(scrubber(message, KEY))
    assert re.fullmatch(rf"I won't email {PLACEHOLDER}\.", out["content"][0]["refusal"])
    assert re.fullmatch(rf"Not calling {PLACEHOLDER}\.", out["refusal"])
    assert out["content"][0]["type"] == "refusal"


def test_assistant_audio_transcript_scrubbed_and_audio_data_kept(scrubber: PIIScrubber) -> None:
    audio = {"id": "audio_1", "data": PAYLOAD, "expires_at": 1, "transcript": f"Mail {EMAIL}"}
    message = ChatMessage.from_openai({"role": "assistant", "content": None, "audio": audio})
    out = wire(scrubber(message, KEY))
    assert re.fullmatch(rf"Mail {PLACEHOLDER}", out["audio"]["transcript"])
    assert out["audio"]["data"] == PAYLOAD
    assert out["audio"]["id"] == "audio_1"


def test_image_url_query_string_scrubbed_data_url_kept(scrubber: PIIScrubber) -> None:
    data_url = f"data:image/png;base64,{PAYLOAD}"
    message = ChatMessage(
        "user",
        [
            {
                "type": "image_url",
                "image_url": {"url": f"https://cdn.example.org/i.png?owner={EMAIL}&x=1"},
            },
            {"type": "image_url", "image_url": {"url": data_url, "detail": "low"}},
        ],
    )
    out = wire(scrubber(message, KEY))
    url = out["content"][0]["image_url"]["url"]
    assert EMAIL not in url
    assert re.fullmatch(rf"https://cdn\.example\.org/i\.png\?owner={PLACEHOLDER}&x=1", url)
    assert out["content"][1]["image_url"] == {"url": data_url, "detail": "low"}


def test_file_name_scrubbed_file_data_and_id_kept(scrubber: PIIScrubber) -> None:
    part = {
        "type": "file",
        "file": {"filename": f"cv {PHONE}.pdf", "file_data": PAYLOAD, "file_id": "file-1"},
    }
    audio_in = {"type": "input_audio", "input_audio": {"data": PAYLOAD, "format": "wav"}}
    out = wire(scrubber(ChatMessage("user", [part, audio_in]), KEY))
    file = out["content"][0]["file"]
    assert re.fullmatch(rf"cv {PLACEHOLDER}\.pdf", file["filename"])
    assert file["file_data"] == PAYLOAD
    assert file["file_id"] == "file-1"
    assert out["content"][1] == audio_in


def test_agent_squad_tool_result_json_block_values_scrubbed_keys_kept(
    scrubber: PIIScrubber,
) -> None:
    result = {
        "toolResult": {
            "toolUseId": "tooluse_1",
            "status": "success",
            "content": [
                {"json": {"email": EMAIL, "phones": [PHONE], EMAIL: "key kept", "n": 3}},
                {"text": f"also {EMAIL}"},
            ],
        }
    }
    use = {"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"who": EMAIL}}}
    out = scrubber(ChatMessage("user", [result, use]), KEY)
    blocks = thaw(out.content)
    block = blocks[0]["toolResult"]
    assert block["toolUseId"] == "tooluse_1"
    assert block["status"] == "success"
    data = block["content"][0]["json"]
    assert list(data) == ["email", "phones", EMAIL, "n"]  # keys, their order and types kept
    assert re.fullmatch(PLACEHOLDER, data["email"])
    assert re.fullmatch(PLACEHOLDER, data["phones"][0])
    assert data[EMAIL] == "key kept"
    assert data["n"] == 3
    assert re.fullmatch(rf"also {PLACEHOLDER}", block["content"][1]["text"])
    assert blocks[1]["toolUse"]["name"] == "lookup"
    assert re.fullmatch(PLACEHOLDER, blocks[1]["toolUse"]["input"]["who"])
    assert EMAIL not in json.dumps(blocks).replace(f'"{EMAIL}": "key kept"', "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{EMAIL}{PHONE}", r"<EMAIL_ADDRESS_[0-9a-f]{8}><PHONE_NUMBER_[0-9a-f]{8}>"),
        ("call me at+14155550147", r"call me at<PHONE_NUMBER_[0-9a-f]{8}>"),
        (
            f"write:{EMAIL}+14155550147!",
            r"write:<EMAIL_ADDRESS_[0-9a-f]{8}><PHONE_NUMBER_[0-9a-f]{8}>!",
        ),
        ("tel:+44 20 7946 0958;", r"tel:<PHONE_NUMBER_[0-9a-f]{8}>;"),
    ],
)
def test_text_glued_to_pii_one_placeholder_per_entity(
    scrubber: PIIScrubber, text: str, expected: str
) -> None:
    out = scrubber.scrub_text(text, KEY)
    assert re.fullmatch(expected, out), out
    assert scrubber.scrub_text(out, KEY) == out


def test_glued_values_keep_their_own_placeholders(scrubber: PIIScrubber) -> None:
    alone = scrubber.scrub_text(f"{EMAIL} and {PHONE}", KEY).split(" and ")
    glued = scrubber.scrub_text(f"{EMAIL}{PHONE}", KEY)
    assert glued == "".join(alone)  # the same value gets the same placeholder, glued or not
