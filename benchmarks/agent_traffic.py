"""Generated agent traffic: what a coding or operations agent stores, turn after turn.

Deterministic (seeded) conversations in the OpenAI chat format: a user request, assistant
tool calls with JSON arguments (file paths, shell commands, URLs, SQL, customer ids), tool
results (JSON API records with ids, ISO timestamps, amounts and the odd e-mail address or
phone number, test and build output, access logs with IP addresses, source code), and
assistant replies in prose with versions, paths and numbers. About one message in ten holds
PII; the rest is the identifiers, dates and numbers that look like it and must stay.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["agent_history", "agent_messages"]

Wire = dict[str, Any]

_FIRST = ("Mia", "Noah", "Ava", "Liam", "Zoe", "Omar", "Ines", "Kai", "Lena", "Ravi", "Sofia")
_LAST = ("Li", "Garcia", "Okafor", "Novak", "Silva", "Haddad", "Kowalski", "Tanaka", "Berg")
_DOMAINS = ("example.com", "mail.example.org", "corp.example.net", "example.io")
_PATHS = (
    "src/app/models.py",
    "src/app/api/orders.py",
    "src/app/billing/invoice.py",
    "tests/test_orders.py",
    "tests/api/test_customers.py",
    "docs/deploy.md",
    "config/settings.toml",
    "scripts/migrate_2024_05.sql",
    "web/src/components/OrderTable.tsx",
)
_STATUSES = ("pending", "paid", "shipped", "refunded", "cancelled")
_PROSE = (
    "the order service returns a 500 when the cart is empty and the retry loop then times out"
    " after three attempts so the customer sees a blank page instead of the error message we"
    " render for other failures while the billing worker keeps the invoice in a draft state"
)
_WORDS = tuple(_PROSE.split(" "))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _uuid(rng: random.Random) -> str:
    h = _hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _stamp(rng: random.Random) -> str:
    return (
        f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)}T"
        f"{rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z"
    )


def _email(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST).lower()}.{rng.choice(_LAST).lower()}@{rng.choice(_DOMAINS)}"


def _phone(rng: random.Random) -> str:
    return rng.choice(
        (
            f"+1 415 555 {rng.randint(1000, 9999)}",
            f"(212) 555-{rng.randint(1000, 9999)}",
            f"+44 20 7946 {rng.randint(1000, 9999)}",
        )
    )


def _prose(rng: random.Random, words: int) -> str:
    start = rng.randrange(len(_WORDS))
    return " ".join(_WORDS[(start + i) % len(_WORDS)] for i in range(words)).capitalize() + "."


def _call_id(rng: random.Random) -> str:
    return "call_" + "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkl0123456789") for _ in range(24)
    )


# --- tools: (name, arguments, result) -------------------------------------------------------


def _read_file(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    path = rng.choice(_PATHS)
    lines = []
    for n in range(rng.randint(8, 30)):
        lines.append(
            rng.choice(
                (
                    f"    total = sum(item.price * item.quantity for item in order.items)  # {n}",
                    f"def apply_discount(order_id: int, percent: float = {rng.randint(5, 30)}.0):",
                    f'    log.info("order %s updated in %.2f ms", order.id, {rng.random():.3f})',
                    f"    if retries > {rng.randint(2, 5)}:",
                    "        raise TimeoutError(f'gave up after {retries} tries')",
                    f"VERSION = '{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}'",
                    "    return Response(status=200, body=json.dumps(payload))",
                )
            )
        )
    return "read_file", {"path": path, "start_line": rng.randint(1, 400)}, "\n".join(lines)


def _run_tests(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    path = rng.choice(_PATHS[3:5])
    passed, failed = rng.randint(10, 200), rng.randint(0, 3)
    out = [
        "============================= test session starts ==============================",
        f"platform linux -- Python 3.11.{rng.randint(1, 9)}, pytest-8.{rng.randint(0, 3)}.1",
        f"collected {passed + failed} items",
        "",
        f"{path} {'.' * min(passed, 60)}{'F' * failed}",
    ]
    for _ in range(failed):
        out.append(f"FAILED {path}::test_case_{rng.randint(1, 99)} - AssertionError: 402 != 200")
    out.append(
        f"========== {failed} failed, {passed} passed in {rng.uniform(0.5, 40):.2f}s =========="
    )
    return "run_shell", {"command": f"pytest -x -q {path}", "timeout": 600}, "\n".join(out)


def _access_log(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    lines = []
    for _ in range(rng.randint(5, 20)):
        ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        lines.append(
            f'{_stamp(rng)} INFO {ip} "GET /api/v2/orders/{rng.randint(1000, 99999)}'
            f' HTTP/1.1" {rng.choice((200, 200, 200, 404, 500))} {rng.randint(120, 9000)}'
            f" {rng.randint(1, 900)}ms req={_uuid(rng)}"
        )
    return "run_shell", {"command": "tail -n 20 /var/log/app/access.log"}, "\n".join(lines)


def _get_customer(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    cid = "cus_" + _hex(rng, 14)
    record: dict[str, Any] = {
        "id": cid,
        "created_at": _stamp(rng),
        "plan": rng.choice(("free", "team", "enterprise")),
        "seats": rng.randint(1, 400),
        "balance_cents": rng.randint(0, 900_000),
        "currency": "usd",
        "orders": [
            {
                "id": rng.randint(100_000, 999_999),
                "status": rng.choice(_STATUSES),
                "total": round(rng.uniform(5, 2000), 2),
                "placed_at": _stamp(rng),
                "sku": f"SKU-{rng.randint(1000, 9999)}-{rng.choice('ABCDEF')}",
            }
            for _ in range(rng.randint(1, 5))
        ],
    }
    if rng.random() < 0.5:
        record["email"] = _email(rng)
    if rng.random() < 0.3:
        record["phone"] = _phone(rng)
    return "get_customer", {"customer_id": cid, "expand": ["orders"]}, json.dumps(record)


def _http_get(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    url = f"https://api.example.com/v2/invoices?page={rng.randint(1, 40)}&per_page=25"
    body = {
        "data": [
            {
                "invoice": f"INV-2024-{rng.randint(1000, 9999)}",
                "amount": rng.randint(100, 99_999),
                "due": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "paid": rng.random() < 0.6,
                "trace": _uuid(rng),
            }
            for _ in range(rng.randint(2, 6))
        ],
        "next": f"/v2/invoices?cursor={_hex(rng, 16)}",
    }
    return "http_get", {"url": url, "headers": {"Accept": "application/json"}}, json.dumps(body)


def _query_db(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    sql = (
        "SELECT id, status, total FROM orders WHERE created_at > '2024-05-01' "
        f"AND total > {rng.randint(10, 500)} ORDER BY id DESC LIMIT {rng.randint(5, 50)}"
    )
    rows = [
        [rng.randint(100_000, 999_999), rng.choice(_STATUSES), round(rng.uniform(5, 900), 2)]
        for _ in range(rng.randint(3, 12))
    ]
    return (
        "query_db",
        {"sql": sql},
        json.dumps({"columns": ["id", "status", "total"], "rows": rows}),
    )


_TOOLS: tuple[Callable[[random.Random], tuple[str, dict[str, Any], str]], ...] = (
    _read_file,
    _run_tests,
    _access_log,
    _get_customer,
    _http_get,
    _query_db,
)


def _user(rng: random.Random) -> str:
    ask = rng.choice(
        (
            f"The checkout tests in {rng.choice(_PATHS[3:5])} fail since yesterday, can you look?",
            f"Why does order {rng.randint(100_000, 999_999)} show as pending? It was paid.",
            "Please check the access log for 500s in the last hour and tell me what broke.",
            f"Refund invoice INV-2024-{rng.randint(1000, 9999)} and tell me the new balance.",
            f"Bump the version to {rng.randint(1, 4)}.{rng.randint(0, 20)}.0 and update the docs.",
        )
    )
    if rng.random() < 0.15:
        ask += f" You can reach me at {_email(rng)} or {_phone(rng)}."
    return ask


def _conversation(rng: random.Random) -> list[Wire]:
    out: list[Wire] = [{"role": "user", "content": _user(rng)}]
    for _ in range(rng.randint(1, 4)):
        calls, results = [], []
        for _ in range(rng.choice((1, 1, 1, 2))):
            name, arguments, result = rng.choice(_TOOLS)(rng)
            call_id = _call_id(rng)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
            results.append({"role": "tool", "tool_call_id": call_id, "content": result})
        content = _prose(rng, rng.randint(6, 20)) if rng.random() < 0.4 else None
        out.append({"role": "assistant", "content": content, "tool_calls": calls})
        out.extend(results)
    reply = _prose(rng, rng.randint(20, 80))
    reply += f" See {rng.choice(_PATHS)} line {rng.randint(1, 400)} (v{rng.randint(1, 4)}.2.1)."
    out.append({"role": "assistant", "content": reply})
    return out


@cache
def agent_messages(seed: int = 7, conversations: int = 300) -> tuple[Wire, ...]:
    """The messages of ``conversations`` generated conversations, one after the other."""
    rng = random.Random(seed)
    out: list[Wire] = []
    for _ in range(conversations):
        out.extend(_conversation(rng))
    return tuple(out)


@cache
def _user_turns() -> tuple[int, ...]:
    return tuple(i for i, m in enumerate(agent_messages()) if m["role"] == "user")


def agent_history(n: int, offset: int = 0) -> list[Wire]:
    """``n`` generated messages from the ``offset``-th user turn on, cycled (like
    :func:`benchmarks.data.history`); the dicts are shared: treat them as read-only."""
    source, turns = agent_messages(), _user_turns()
    start = turns[offset % len(turns)]
    return [source[(start + i) % len(source)] for i in range(n)]
