"""Each built-in PII entity and format, and the text that must never be taken for PII."""

from __future__ import annotations

import pytest

from storage.pii import PIIScrubber, iban_is_valid, luhn_is_valid


@pytest.fixture(scope="module")
def scrubber() -> PIIScrubber:
    return PIIScrubber(secret="entity-tests")


def found(scrubber: PIIScrubber, text: str) -> list[tuple[str, str]]:
    return [(d.entity, text[d.start : d.end]) for d in scrubber.detect(text)]


def assert_finds(scrubber: PIIScrubber, entity: str, value: str) -> None:
    text = f"before {value} after"
    assert found(scrubber, text) == [(entity, value)]


# --- e-mail ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "mia.li3818@example.com",
        "UtaKortig@jourrapide.com",
        "first.last+tag@sub.example.co.uk",
        "o'brien@example.ie",
        "x_y-z%1@h-i.example.org",
        "user@xn--bcher-kva.example",
        "user@münchen.de",
        "ADMIN@EXAMPLE.COM",
    ],
)
def test_email_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "EMAIL_ADDRESS", value)


def test_adjacent_emails_are_all_found(scrubber: PIIScrubber) -> None:
    text = "a@b.co,c@d.org;e@f.net g@h.io <i@j.com>/k@l.dev|m@n.app"
    assert [v for _, v in found(scrubber, text)] == [
        "a@b.co", "c@d.org", "e@f.net", "g@h.io", "i@j.com", "k@l.dev", "m@n.app",
    ]  # fmt: skip


def test_email_trimmed_from_its_surroundings(scrubber: PIIScrubber) -> None:
    text = "mailto:a@b.co ?email=c@d.org end of sentence e@f.net."
    assert [v for _, v in found(scrubber, text)] == ["a@b.co", "c@d.org", "e@f.net"]


@pytest.mark.parametrize("text", ["a@b", "user@localhost", "@handle", "x@1.2", "foo@bar.c"])
def test_not_emails(scrubber: PIIScrubber, text: str) -> None:
    assert found(scrubber, text) == []


# --- phone numbers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "+44 20 7946 0958",  # international, spaces
        "+1-202-555-0173",  # international, dashes
        "+447700677662",  # international, compact
        "+46 (0)8 928 571 38",  # trunk zero in parentheses
        "+1 415 555 2671 ext. 12",  # extension
        "0049 30 1234567",  # 00 international prefix
        "001-518-640-0854",
        "(555) 010-4477",  # NANP with parentheses
        "(579)888-3058",
        "555.010.4477",  # dotted
        "555-010-4477",
        "345-899-3560x4587",  # extension
        "4155552671",  # bare NANP
        "07700 900123",  # UK national
        "030 1234567",  # German national
        "01.84.17.61.18",  # French, dotted pairs
        "0490 75 40 81",
        "(08) 8747 6301",  # Australian
        "467 3395",  # local seven digits
        "9472 7916",
        "416 60 039",
        "72 128 827",
        "71-33-52-22",
    ],
)
def test_phone_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "PHONE_NUMBER", value)


def test_phone_followed_by_a_small_number_is_cut_before_it(scrubber: PIIScrubber) -> None:
    assert found(scrubber, "call 555-010-4477 2 times") == [("PHONE_NUMBER", "555-010-4477")]


@pytest.mark.parametrize(
    "text",
    [
        "population 1 234 567 people",  # thousands
        "total € 723 813 266",  # an amount
        "12 345 678 EUR",
        "1.234.567 units",
        "ZIP 12345-6789",  # US ZIP+4
        "CEP 75534-030",  # Brazilian postal code
        "room 123456",  # too short
        "id 1234567",  # bare seven digits
        "epoch 1715785200",  # bare ten digits not NANP-shaped
        "ran from 1984-1995",  # years
        "3378 217 Lovers Lane",  # house number + street number
        "975 3968 Bay Street",
        "Suite 541 6343",
        "5555555555",  # one repeated digit
        "+999 123 4567",  # no such country code
    ],
)
def test_not_phone_numbers(scrubber: PIIScrubber, text: str) -> None:
    assert [e for e, _ in found(scrubber, text) if e == "PHONE_NUMBER"] == []


# --- payment cards --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "4111111111111111",  # Visa 16
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4030874397740603788",  # Visa 19
        "4030 8743 9774 0603 788",
        "4421521028146",  # Visa 13
        "2223003122003222",  # Mastercard 2-series
        "2223 0031 2200 3222",
        "5555555555554444",  # Mastercard
        "378282246310005",  # Amex 15
        "3782 822463 10005",  # Amex grouping
        "30569309025904",  # Diners 14
        "3056 930902 5904",
        "6011111111111117",  # Discover
        "3530111333300000",  # JCB
        "180016070420458",  # JCB 15
        "675984103431",  # Maestro 12
    ],
)
def test_credit_card_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "CREDIT_CARD", value)


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",  # Luhn fails
        "7111111111111114",  # issuer digit 7 (Luhn-valid)
        "+447700677662 is a phone",  # + prefixed run: never a card
        "4111 1111 1111 11112222",  # part of a longer run
        "41111111111111111111111",  # too long
        "0000000000000000",
    ],
)
def test_not_credit_cards(scrubber: PIIScrubber, text: str) -> None:
    assert [e for e, _ in found(scrubber, text) if e == "CREDIT_CARD"] == []


def test_luhn() -> None:
    assert luhn_is_valid("79927398713")
    assert not luhn_is_valid("79927398710")


# --- IBAN -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "GB82WEST12345698765432",
        "GB82 WEST 1234 5698 7654 32",
        "gb82west12345698765432",  # lower case
        "DE89 3704 0044 0532 0130 00",
        "FR14 2004 1010 0505 0001 3M02 606",
        "NO9386011117947",  # shortest (15)
        "MT84 MALT 0110 0001 2345 MTLC AST0 01S",  # 31 characters
    ],
)
def test_iban_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "IBAN_CODE", value)


def test_iban_stops_at_country_length(scrubber: PIIScrubber) -> None:
    text = "IBAN GB82 WEST 1234 5698 7654 32 TEST"
    assert found(scrubber, text) == [("IBAN_CODE", "GB82 WEST 1234 5698 7654 32")]


@pytest.mark.parametrize(
    "text", ["GB82WEST12345698765433", "XX82WEST12345698765432", "GB82WEST1234569876543"]
)
def test_not_ibans(scrubber: PIIScrubber, text: str) -> None:
    assert [e for e, _ in found(scrubber, text) if e == "IBAN_CODE"] == []


def test_iban_is_valid() -> None:
    assert iban_is_valid("GB82 WEST 1234 5698 7654 32")
    assert not iban_is_valid("GB82 WEST 1234 5698 7654 33")


# --- US SSN ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["054-28-6917", "853-37-1694", "123 45 6789"])
def test_ssn_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "US_SSN", value)


@pytest.mark.parametrize("text", ["000-12-3456", "666-12-3456", "123-00-4567", "123-45-0000"])
def test_never_issued_ssns_are_not_ssns(scrubber: PIIScrubber, text: str) -> None:
    assert [e for e, _ in found(scrubber, text) if e == "US_SSN"] == []


# --- IP addresses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "192.168.1.10",
        "8.8.8.8",
        "255.255.255.255",
        "2001:db8::8a2e:370:7334",
        "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
        "fe80::1%eth0",
        "::1",
        "::ffff:10.0.0.1",
    ],
)
def test_ip_formats(scrubber: PIIScrubber, value: str) -> None:
    assert_finds(scrubber, "IP_ADDRESS", value)


def test_ip_at_end_of_sentence(scrubber: PIIScrubber) -> None:
    assert found(scrubber, "server 10.0.0.1. Then") == [("IP_ADDRESS", "10.0.0.1")]


@pytest.mark.parametrize(
    "text",
    [
        "256.1.1.1",
        "1.2.3",
        "1.2.3.4.5",  # a longer dotted run
        "01.02.03.04",  # leading zeros
        "00:1A:2B:3C:4D:5E",  # MAC address
        "std::vector",
        "at 12:30:45",
    ],
)
def test_not_ip_addresses(scrubber: PIIScrubber, text: str) -> None:
    assert [e for e, _ in found(scrubber, text) if e == "IP_ADDRESS"] == []


# --- secrets --------------------------------------------------------------------------------

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)


@pytest.mark.parametrize(
    ("entity", "value"),
    [
        ("API_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz123456"),
        ("API_KEY", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123456789"),
        ("API_KEY", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("API_KEY", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("API_KEY", "AKIAIOSFODNN7EXAMPLE"),
        ("API_KEY", "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234"),
        ("API_KEY", "xoxb-1234567890-abcdefghij"),
        ("API_KEY", "sk_live_abcdefghijklmnop1234"),
        ("API_KEY", "hf_abcdefghijklmnopqrstuvwxyz01234567"),
        ("API_KEY", "glpat-abcdefghij0123456789"),
        ("JWT", JWT),
    ],
)
def test_secret_formats(scrubber: PIIScrubber, entity: str, value: str) -> None:
    assert_finds(scrubber, entity, value)


def test_private_key_block(scrubber: PIIScrubber) -> None:
    block = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2\n"
        "abc+/def=\n-----END RSA PRIVATE KEY-----"
    )
    assert found(scrubber, f"key:\n{block}\nthanks") == [("PRIVATE_KEY", block)]


def test_truncated_private_key_block(scrubber: PIIScrubber) -> None:
    text = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    assert found(scrubber, text) == [("PRIVATE_KEY", text)]


def test_password_in_url_only_the_password(scrubber: PIIScrubber) -> None:
    text = "dsn postgres://admin:s3cr3t@db.example.com:5432/app and redis://:pw0rd@cache:6379"
    assert found(scrubber, text) == [("PASSWORD", "s3cr3t"), ("PASSWORD", "pw0rd")]


def test_password_and_token_query_parameters(scrubber: PIIScrubber) -> None:
    text = "https://x.example/login?user=bob&password=hunter2&token=abc123"
    assert found(scrubber, text) == [("PASSWORD", "hunter2"), ("API_KEY", "abc123")]


# --- never matched --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # UUIDs / GUIDs
        "123e4567-e89b-12d3-a456-426614174000",
        "{12345678-1234-1234-1234-123456789012}",
        "550e8400-e29b-41d4-a716-446655440000",
        # ISO timestamps and dates
        "2024-05-15T15:00:00Z",
        "2024-05-15T15:00:00.123456+05:30",
        "2024-05-15 15:00:00 EST",
        "2000-04-16 11:34:35",
        "20240515T150000Z",
        "15.05.2024",
        "05/15/2024",
        "2024.05.15",
        # version strings
        "v1.2.3",
        "version 10.0.19041.1",
        "release 2.31.0",
        "requests==2.31.0",
        "1.2.3-beta.1",
        "v192.168.1.1",
        # hex digests
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "commit 3f9a2c1d0e4b5a6978812345678901234567890a",
        "md5 5d41402abc4b2a76b9719d911017c592",
        "98765432109876543210abcdef",
        # SKUs and labelled ids
        "SKU-12345678",
        "WH-1000XM4",
        "order #12345678",
        "Order number 4111111111111111",
        "tracking 1Z999AA10123456784",
        "reservation ID 4WQ150",
        # tool-call ids
        "call_abc123",
        "call_12345678901234",
        "call_ZSMi8uUu3gU6qLwfTb8EOvmW",
        "toolu_01A09q90qw90lq917835lq9",
        "toolu_0155501044771234567",
        "fc_4111111111111111",
        "chatcmpl-9xYz1234567890",
    ],
)
def test_never_matched(scrubber: PIIScrubber, text: str) -> None:
    assert found(scrubber, f"see {text} here") == []


def test_no_phone_inside_a_longer_dashed_run(scrubber: PIIScrubber) -> None:
    assert found(scrubber, "see 4111-1111-1111-1234 ok") == []


def test_consecutive_phone_numbers(scrubber: PIIScrubber) -> None:
    text = "555-010-4477 555-010-4478 555-010-4479 555-010-4480"
    assert [v for _, v in found(scrubber, text)] == text.split()


def test_phone_after_a_date(scrubber: PIIScrubber) -> None:
    assert found(scrubber, "2024-01-01 555-010-4477") == [("PHONE_NUMBER", "555-010-4477")]
