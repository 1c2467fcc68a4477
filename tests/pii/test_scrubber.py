"""``PIIScrubber`` as a transform: scope, placeholders, modes, secret, known values, overlaps,
custom detectors and the recognizer interface."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from storage.errors import ConfigError
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import EntityRecognizer, PIIScrubber, RegexDetector
from storage.stores.memory import InMemoryChatStorage

KEY = ChatKey("user-1", "session-1", "agent-1")
OTHER = ChatKey("user-2", "session-1", "agent-1")
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)_[0-9a-f]{8}>")
EMAIL = "mia.li3818@example.com"


@pytest.fixture
def scrubber() -> PIIScrubber:
    return PIIScrubber(secret="test-secret")


def entities(text: str) -> list[str]:
    return PLACEHOLDER.findall(text)


# --- scope of a message ---------------------------------------------------------------------


def test_content_text(scrubber: PIIScrubber) -> None:
    message = ChatMessage("user", f"write to {EMAIL} please")
    out = scrubber(message, KEY)
    assert isinstance(out.content, str)
    assert EMAIL not in out.content
    assert out.content.startswith("write to <EMAIL_ADDRESS_")
    assert out.content.endswith("> please")


def test_identity_kept_and_same_object_when_nothing_found(scrubber: PIIScrubber) -> None:
    clean = ChatMessage.from_openai({"role": "user", "content": "hello there"})
    assert scrubber(clean, KEY) is clean
    dirty = ChatMessage.from_openai({"role": "user", "content": f"I am {EMAIL}"}, id="m-1")
    out = scrubber(dirty, KEY)
    assert out is not dirty
    assert (out.id, out.created_at, out.present, out.role) == ("m-1", None, dirty.present, "user")
    assert out.to_openai().keys() == dirty.to_openai().keys()


def test_content_parts(scrubber: PIIScrubber) -> None:
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": f"mail {EMAIL}"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    out = scrubber(ChatMessage("user", parts), KEY)
    assert isinstance(out.content, tuple)
    assert EMAIL not in out.content[0]["text"]
    assert entities(out.content[0]["text"]) == ["EMAIL_ADDRESS"]
    assert out.content[0]["type"] == "text"
    assert out.content[1] == parts[1]


def test_tool_call_arguments_values_only(scrubber: PIIScrubber) -> None:
    arguments = json.dumps(
        {"email": EMAIL, "call_id": "call_abc123", "nested": [{"phone": "+1-202-555-0173"}], "n": 3}
    )
    call = ToolCall("call_4111111111111111", "send_email_to_mia.li3818@example.com", arguments)
    message = ChatMessage("assistant", None, (call,))
    out = scrubber(message, KEY)
    new_call = out.tool_calls[0]
    assert new_call.id == call.id  # ids untouched, even when they look like PII
    assert new_call.name == call.name  # function names untouched
    parsed = json.loads(new_call.arguments)
    assert list(parsed) == ["email", "call_id", "nested", "n"]
    assert entities(parsed["email"]) == ["EMAIL_ADDRESS"]
    assert parsed["call_id"] == "call_abc123"
    assert entities(parsed["nested"][0]["phone"]) == ["PHONE_NUMBER"]
    assert parsed["n"] == 3


def test_json_formatting_kept_where_unchanged(scrubber: PIIScrubber) -> None:
    arguments = '{ "a" :  "x",\n  "email":"' + EMAIL + '" ,"b":[1, 2.5e3, null, true]}'
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c1", "f", arguments),)), KEY)
    new = out.tool_calls[0].arguments
    assert new.startswith('{ "a" :  "x",\n  "email":"<EMAIL_ADDRESS_')
    assert new.endswith('>" ,"b":[1, 2.5e3, null, true]}')


def test_keys_are_not_scrubbed(scrubber: PIIScrubber) -> None:
    arguments = json.dumps({EMAIL: "value"})
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c1", "f", arguments),)), KEY)
    assert out.tool_calls[0].arguments == arguments


def test_escaped_json_strings(scrubber: PIIScrubber) -> None:
    arguments = json.dumps({"note": f'said "hi" \u00e9\n{EMAIL}\t'})  # ASCII with escapes
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c1", "f", arguments),)), KEY)
    new = out.tool_calls[0].arguments
    assert new.isascii()
    note = json.loads(new)["note"]
    assert note.startswith('said "hi" \u00e9\n<EMAIL_ADDRESS_')
    assert note.endswith(">\t")


def test_integer_json_value_that_is_a_card_becomes_a_string(scrubber: PIIScrubber) -> None:
    arguments = '{"card": 4111111111111111, "amount": 12345678}'
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c1", "f", arguments),)), KEY)
    parsed = json.loads(out.tool_calls[0].arguments)
    assert entities(parsed["card"]) == ["CREDIT_CARD"]
    assert parsed["amount"] == 12345678


def test_invalid_json_arguments_scrubbed_as_text(scrubber: PIIScrubber) -> None:
    arguments = '{"email": "' + EMAIL + '"'  # truncated JSON
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c1", "f", arguments),)), KEY)
    assert EMAIL not in out.tool_calls[0].arguments
    assert out.tool_calls[0].arguments.startswith('{"email": "<EMAIL_ADDRESS_')


def test_tool_result_json(scrubber: PIIScrubber) -> None:
    result = json.dumps({"user": {"email": EMAIL, "dob": "1990-04-05", "id": "mia_li_3668"}})
    message = ChatMessage("tool", result, tool_call_id="call_4111111111111111", name="get_user")
    out = scrubber(message, KEY)
    assert out.tool_call_id == message.tool_call_id
    assert out.name == "get_user"
    assert isinstance(out.content, str)
    parsed = json.loads(out.content)
    assert entities(parsed["user"]["email"]) == ["EMAIL_ADDRESS"]
    assert entities(parsed["user"]["dob"]) == ["DATE_OF_BIRTH"]  # its key names it
    assert parsed["user"]["id"] == "mia_li_3668"


def test_tool_result_text(scrubber: PIIScrubber) -> None:
    message = ChatMessage("tool", f"Error: {EMAIL} not found", tool_call_id="c1")
    out = scrubber(message, KEY)
    assert isinstance(out.content, str)
    assert entities(out.content) == ["EMAIL_ADDRESS"]
    assert out.content.startswith("Error: <")
    assert out.content.endswith("> not found")


def test_legacy_function_call_and_refusal(scrubber: PIIScrubber) -> None:
    data = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "lookup", "arguments": json.dumps({"email": EMAIL})},
        "refusal": f"I will not email {EMAIL}",
    }
    out = scrubber(ChatMessage.from_openai(data), KEY).to_openai()
    assert EMAIL not in json.dumps(out)
    assert out["function_call"]["name"] == "lookup"
    assert entities(json.loads(out["function_call"]["arguments"])["email"]) == ["EMAIL_ADDRESS"]


# --- placeholders ---------------------------------------------------------------------------


def test_placeholder_stable_within_a_conversation(scrubber: PIIScrubber) -> None:
    a = scrubber.scrub_text(f"{EMAIL} and {EMAIL.upper()}", KEY)
    b = scrubber.scrub_text(f"again {EMAIL}", KEY)
    first, second = PLACEHOLDER.finditer(a)
    assert first.group() == second.group()  # case-insensitive normalisation of e-mails
    assert first.group() in b


def test_same_number_spelled_differently_shares_a_placeholder(scrubber: PIIScrubber) -> None:
    text = scrubber.scrub_text("4111 1111 1111 1111 or 4111-1111-1111-1111", KEY)
    assert len(set(PLACEHOLDER.findall(text))) == 1
    assert len({m.group() for m in PLACEHOLDER.finditer(text)}) == 1


def test_placeholders_differ_across_conversations_and_secrets(scrubber: PIIScrubber) -> None:
    here = scrubber.scrub_text(EMAIL, KEY)
    there = scrubber.scrub_text(EMAIL, OTHER)
    elsewhere = PIIScrubber(secret="another-secret").scrub_text(EMAIL, KEY)
    assert len({here, there, elsewhere}) == 3
    assert PIIScrubber(secret="test-secret").scrub_text(EMAIL, KEY) == here  # no state kept


def test_idempotent_and_never_rematched(scrubber: PIIScrubber) -> None:
    text = f"{EMAIL}, +44 20 7946 0958, 4111111111111111, GB82WEST12345698765432, 10.0.0.1"
    once = scrubber.scrub_text(text, KEY)
    assert scrubber.scrub_text(once, KEY) == once
    before = sum(scrubber.counts.values())
    scrubber.scrub_text(once, KEY)
    assert sum(scrubber.counts.values()) == before


def test_existing_placeholder_shaped_text_is_left_alone(scrubber: PIIScrubber) -> None:
    text = "<PHONE_NUMBER_12345678> <EMAIL_ADDRESS_0123abcd>"
    assert scrubber.scrub_text(text, KEY) == text


# --- overlaps -------------------------------------------------------------------------------


def test_overlapping_detections_become_one_placeholder() -> None:
    scrubber = PIIScrubber(secret="s", known_values={"PERSON": ["Mia Li", "mia.li3818"]})
    out = scrubber.scrub_text(f"Hi Mia Li ({EMAIL}).", KEY)
    assert entities(out) == ["PERSON", "EMAIL_ADDRESS"]
    assert re.fullmatch(r"Hi <PERSON_[0-9a-f]{8}> \(<EMAIL_ADDRESS_[0-9a-f]{8}>\)\.", out)


def test_overlap_takes_the_longest_detections_entity() -> None:
    scrubber = PIIScrubber(secret="s", known_values={"ACCOUNT": ["4111 1111 1111 1111 card"]})
    out = scrubber.scrub_text("pay with 4111 1111 1111 1111 card now", KEY)
    assert re.fullmatch(r"pay with <ACCOUNT_[0-9a-f]{8}> now", out)
    assert scrubber.counts == {"ACCOUNT": 1}


def test_partially_overlapping_detections_merge_into_their_union() -> None:
    scrubber = PIIScrubber(
        secret="s", detectors={"A": "alpha beta", "B": "beta gamma"}, entities=[]
    )
    out = scrubber.scrub_text("x alpha beta gamma y", KEY)
    assert re.fullmatch(r"x <[AB]_[0-9a-f]{8}> y", out)
    assert sum(scrubber.counts.values()) == 1


def test_ssn_shaped_phone_candidate_is_one_ssn(scrubber: PIIScrubber) -> None:
    assert entities(scrubber.scrub_text("ssn 123-45-6789.", KEY)) == ["US_SSN"]


# --- modes ----------------------------------------------------------------------------------


def test_mask_mode_keeps_last_four_of_cards_and_phones() -> None:
    scrubber = PIIScrubber(secret="s", mode="mask")
    out = scrubber.scrub_text(f"card 4111-1111-1111-1111, call (555) 010-4477, {EMAIL}", KEY)
    assert out.startswith("card ****-****-****-1111, call (***) ***-4477, <EMAIL_ADDRESS_")
    assert scrubber.scrub_text(out, KEY) == out
    assert scrubber.counts == {"CREDIT_CARD": 1, "PHONE_NUMBER": 1, "EMAIL_ADDRESS": 1}


def test_redact_mode_is_the_default(scrubber: PIIScrubber) -> None:
    assert scrubber.mode == "redact"
    assert entities(scrubber.scrub_text("4111111111111111", KEY)) == ["CREDIT_CARD"]


# --- secret ---------------------------------------------------------------------------------


def test_secret_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "env-secret")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_env = PIIScrubber()
    assert from_env.scrub_text(EMAIL, KEY) == PIIScrubber("env-secret").scrub_text(EMAIL, KEY)
    assert "env-secret" not in from_env.describe()
    assert "CHATLAYERS_PII_SECRET" in from_env.describe()


def test_random_secret_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATLAYERS_PII_SECRET", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = PIIScrubber()  # building a stack only to read it stays quiet ...
        b = PIIScrubber()
    with pytest.warns(RuntimeWarning, match="not be stable across restarts"):
        first = a.scrub_text(EMAIL, KEY)  # ... the first scrub warns
    with pytest.warns(RuntimeWarning):
        second = b.scrub_text(EMAIL, KEY)
    assert first == second  # one secret per process
    assert a.scrub_text(EMAIL, KEY) != PIIScrubber("x").scrub_text(EMAIL, KEY)


def test_bytes_secret() -> None:
    assert PIIScrubber(b"abc").scrub_text(EMAIL, KEY) == PIIScrubber("abc").scrub_text(EMAIL, KEY)


def test_describe_holds_no_secret_and_no_values() -> None:
    scrubber = PIIScrubber(secret="hunter2", known_values={"PERSON": ["Mia Li"]}, mode="mask")
    line = scrubber.describe()
    assert "\n" not in line
    assert "hunter2" not in line
    assert "Mia" not in line
    assert "mode=mask" in line
    assert "EMAIL_ADDRESS" in line
    assert repr(scrubber) == line


# --- counts ---------------------------------------------------------------------------------


def test_counts_by_entity(scrubber: PIIScrubber) -> None:
    scrubber(ChatMessage("user", f"{EMAIL} or a@b.co, 4111111111111111"), KEY)
    scrubber(ChatMessage("tool", json.dumps({"ip": "10.0.0.1"}), tool_call_id="c"), KEY)
    assert scrubber.counts == {"EMAIL_ADDRESS": 2, "CREDIT_CARD": 1, "IP_ADDRESS": 1}


# --- entity selection and configuration errors ----------------------------------------------


def test_entity_subset() -> None:
    scrubber = PIIScrubber(secret="s", entities=["EMAIL_ADDRESS"])
    out = scrubber.scrub_text(f"{EMAIL} 4111111111111111", KEY)
    assert entities(out) == ["EMAIL_ADDRESS"]
    assert out.endswith(" 4111111111111111")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"entities": ["EMAIL"]}, "did you mean 'EMAIL_ADDRESS'"),
        ({"entities": "EMAIL_ADDRESS"}, "not one string"),
        ({"mode": "hash"}, "mode"),
        ({"known_values": {"person": ["x"]}}, "upper case"),
        ({"known_values": {"PERSON": "Mia"}}, "iterable of strings"),
        ({"known_values": {"PERSON": [3]}}, "must be a string"),
        ({"known_values": ["Mia"]}, "must map entity"),
        ({"detectors": {"lower": "x"}}, "upper-case"),
        ({"detectors": {"X": 3}}, "must be a regex"),
        ({"recognizer": 3}, "callable"),
    ],
)
def test_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PIIScrubber(secret="s", **kwargs)  # type: ignore[arg-type]


def test_empty_secret_refused() -> None:
    with pytest.raises(ConfigError, match="non-empty"):
        PIIScrubber(secret="")


# --- known values ---------------------------------------------------------------------------


def test_known_values_case_insensitive_on_word_boundaries() -> None:
    scrubber = PIIScrubber(
        secret="s",
        known_values={"PERSON": ["Mia Li"], "STREET_ADDRESS": ["975 Sunset Drive"]},
    )
    out = scrubber.scrub_text("MIA LI lives at 975  sunset\ndrive; Miami and Lili stay.", KEY)
    assert entities(out) == ["PERSON", "STREET_ADDRESS"]
    assert out.endswith("; Miami and Lili stay.")


def test_known_value_not_found_inside_a_longer_word() -> None:
    scrubber = PIIScrubber(secret="s", known_values={"USER_ID": ["mia_li_3668"]})
    assert scrubber.scrub_text("xmia_li_3668 and mia_li_36689", KEY).count("<") == 0
    assert entities(scrubber.scrub_text("id: mia_li_3668.", KEY)) == ["USER_ID"]


def test_known_values_with_punctuation_edges() -> None:
    scrubber = PIIScrubber(secret="s", known_values={"HANDLE": ["@mia!"]})
    assert entities(scrubber.scrub_text("ping @mia! now", KEY)) == ["HANDLE"]


def test_known_values_inside_json_payloads() -> None:
    scrubber = PIIScrubber(secret="s", known_values={"USER_ID": ["mia_li_3668"]})
    arguments = json.dumps({"user_id": "mia_li_3668", "note": "for MIA_LI_3668 only"})
    out = scrubber(ChatMessage("assistant", None, (ToolCall("c", "f", arguments),)), KEY)
    parsed = json.loads(out.tool_calls[0].arguments)
    assert entities(parsed["user_id"]) == ["USER_ID"]
    assert parsed["user_id"] in parsed["note"]
    assert list(parsed) == ["user_id", "note"]


def test_known_values_per_conversation_callback() -> None:
    profiles = {"user-1": {"PERSON": ["Mia Li"]}, "user-2": {"PERSON": ["Omar Davis"]}}
    seen: list[ChatKey] = []

    def profile(key: ChatKey) -> Mapping[str, Iterable[str]]:
        seen.append(key)
        return profiles[key.user_id]

    scrubber = PIIScrubber(secret="s", known_values_for=profile, known_values={"ORG": ["Acme"]})
    text = "Mia Li and Omar Davis at Acme"
    assert entities(scrubber.scrub_text(text, KEY)) == ["PERSON", "ORG"]
    out_other = scrubber.scrub_text(text, OTHER)
    assert out_other.startswith("Mia Li and <PERSON_")
    assert seen == [KEY, OTHER]
    assert [d.entity for d in scrubber.detect(text, OTHER)] == ["PERSON", "ORG"]


def test_known_values_callback_bad_result_fails_the_call() -> None:
    scrubber = PIIScrubber(secret="s", known_values_for=lambda key: {"PERSON": "Mia"})
    with pytest.raises(ConfigError):
        scrubber.scrub_text("Mia", KEY)


# --- custom detectors and the recognizer ----------------------------------------------------


def test_custom_regex_detector() -> None:
    scrubber = PIIScrubber(secret="s", detectors={"EMPLOYEE_ID": r"\bEMP-\d{6}\b"})
    assert entities(scrubber.scrub_text("badge EMP-123456 ok", KEY)) == ["EMPLOYEE_ID"]


def test_custom_regex_detector_with_validator_and_group() -> None:
    detector = RegexDetector(
        re.compile(r"member (\d{8})"), validator=lambda v: v.startswith("9"), group=1
    )
    scrubber = PIIScrubber(secret="s", detectors={"MEMBER_ID": detector})
    out = scrubber.scrub_text("member 91234567 and member 11234567", KEY)
    assert re.fullmatch(r"member <MEMBER_ID_[0-9a-f]{8}> and member 11234567", out)


def test_custom_callable_detector() -> None:
    def vowels(text: str) -> Iterator[tuple[int, int]]:
        for m in re.finditer(r"secret-\w+", text):
            yield m.span()

    scrubber = PIIScrubber(secret="s", detectors={"CODE": vowels})
    assert entities(scrubber.scrub_text("the secret-word is", KEY)) == ["CODE"]


def test_custom_detector_replaces_builtin_of_the_same_name() -> None:
    scrubber = PIIScrubber(secret="s", detectors={"EMAIL_ADDRESS": r"mail:\S+"})
    out = scrubber.scrub_text(f"{EMAIL} mail:x", KEY)
    assert out.startswith(EMAIL)
    assert entities(out) == ["EMAIL_ADDRESS"]


def test_custom_detector_bad_span_is_an_error() -> None:
    scrubber = PIIScrubber(secret="s", detectors={"X": lambda text: [(0, len(text) + 5)]})
    with pytest.raises(ConfigError, match="outside a text"):
        scrubber.scrub_text("abc", KEY)


def test_recognizer_protocol() -> None:
    class Names:
        def __call__(self, text: str) -> Iterable[tuple[int, int, str]]:
            start = text.find("Zoe")
            return [(start, start + 3, "PERSON")] if start >= 0 else []

    recognizer = Names()
    assert isinstance(recognizer, EntityRecognizer)
    scrubber = PIIScrubber(secret="s", recognizer=recognizer)
    assert entities(scrubber.scrub_text("ask Zoe", KEY)) == ["PERSON"]
    assert "recognizer=Names" in scrubber.describe()


# --- in a stack -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_transforming_stack_stores_scrubbed_messages() -> None:
    scrubber = PIIScrubber(secret="s")
    store = TransformingChatStorage(InMemoryChatStorage(), scrubber)
    message = ChatMessage("user", f"I am {EMAIL}")
    stored = await store.save(KEY, message)
    assert stored[0].id == message.id
    fetched = await store.fetch(KEY)
    assert isinstance(fetched[0].content, str)
    assert EMAIL not in fetched[0].content
    assert entities(fetched[0].content) == ["EMAIL_ADDRESS"]
    assert await store.save(KEY, message) == []  # a retried save stays idempotent
    assert "PIIScrubber(" in store.describe()


def test_metadata_string_values_scrubbed_but_not_chatlayers_markers() -> None:
    scrubber = PIIScrubber(secret="m")
    key = ChatKey("u", "s", "a")
    message = ChatMessage(
        "assistant",
        "ok",
        metadata={
            "langchain": {"additional_kwargs": {"note": "reach me at ada@example.org"}},
            "reasoning": ["call +44 20 7946 0958"],
            "trace_id": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            "chatlayers": {"summary": True},
        },
    )
    out = scrubber(message, key)
    flat = repr(out.metadata)
    assert "ada@example.org" not in flat
    assert "7946 0958" not in flat
    assert "<EMAIL_ADDRESS_" in out.metadata["langchain"]["additional_kwargs"]["note"]
    assert out.metadata["trace_id"] == "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
    assert out.metadata["chatlayers"] == {"summary": True}
    assert out.id == message.id
    untouched = ChatMessage("user", "x", metadata={"tag": "blue"})
    assert scrubber(untouched, key) is untouched
