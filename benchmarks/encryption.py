"""What the encrypting layer costs on save and fetch, over SQLite.

    python -m benchmarks.encryption [--quick]

Two stacks over SQLite files of their own holding the same real messages (``examples/data``,
cycled): ``sqlite`` and ``encrypt::sqlite`` (keyring in a third file). Measured, interleaved:

- ``fetch N (warm)``: a whole history of N messages, read again (both stacks serve repeated
  reads from their caches: the store's decoded rows, the layer's decrypted messages);
- ``fetch N (cold)``: the same with every cache off (``cache_chars=0`` on the store and on the
  layer): every read decodes, and decrypts, every message;
- ``fetch limit=20 of N``: the newest 20;
- ``save 1``: one message appended (a new message each call).

Target: ``fetch 1000`` within 1.3x of the same stack without the layer. Prints markdown.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import anyio

from benchmarks.data import history
from benchmarks.timing import Contender, interleaved
from storage.layers.encrypting import EncryptingChatStorage, new_master_key
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

KEY = ChatKey("bench", "session", "agent")
TARGET = 1.3


def _stacks(root: Path, size: int, cache: bool) -> tuple[Any, Any]:
    chars = 32 * 1024 * 1024 if cache else 0
    plain = SQLiteChatStorage(root / f"plain-{size}-{cache}.db", cache_chars=chars)
    encrypted = EncryptingChatStorage(
        SQLiteChatStorage(root / f"enc-{size}-{cache}.db", cache_chars=chars),
        keys=new_master_key(),
        keyring=root / f"keys-{size}-{cache}.db",
        cache_chars=chars,
        create_keyring=True,
    )
    return plain, encrypted


async def _fill(store: Any, size: int) -> None:
    messages = [ChatMessage.from_openai(m) for m in history(size)]
    for start in range(0, size, 500):
        await store.save_messages(KEY, messages[start : start + 500])


def _fresh_messages() -> Iterator[ChatMessage]:
    source = history(200)
    for n in count():
        yield ChatMessage.from_openai(source[n % len(source)])


async def run(quick: bool) -> list[tuple[str, float, float]]:
    rounds, budget, max_calls = (3, 0.05, 200) if quick else (9, 0.2, 2000)
    sizes = (10, 1000)
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for size in sizes:
            for cache in (True, False):
                plain, encrypted = _stacks(root, size, cache)
                await _fill(plain, size)
                await _fill(encrypted, size)
                same = [m.to_openai() for m in await plain.fetch(KEY)]
                assert same == [m.to_openai() for m in await encrypted.fetch(KEY)]
                what = "warm" if cache else "cold"
                pairs: list[tuple[str, Callable[[Any], Any]]] = [
                    (f"fetch {size} ({what})", lambda s: lambda: s.fetch(KEY)),
                ]
                if cache:
                    pairs.append(
                        (f"fetch limit=20 of {size}", lambda s: lambda: s.fetch(KEY, limit=20))
                    )
                for label, make in pairs:
                    contenders = [
                        Contender("sqlite", make(plain), True),
                        Contender("encrypt::sqlite", make(encrypted), True),
                    ]
                    await interleaved(
                        contenders, rounds=rounds, round_budget_s=budget, max_calls=max_calls
                    )
                    rows.append(
                        (label, contenders[0].samples.median_us, contenders[1].samples.median_us)
                    )
                await plain.aclose()
                await encrypted.aclose()
        plain, encrypted = _stacks(root, 0, True)
        fresh = _fresh_messages()
        contenders = [
            Contender("sqlite", lambda: plain.save(KEY, next(fresh)), True),
            Contender("encrypt::sqlite", lambda: encrypted.save(KEY, next(fresh)), True),
        ]
        await interleaved(
            contenders, rounds=rounds, round_budget_s=budget, max_calls=min(max_calls, 300)
        )
        rows.append(("save 1", contenders[0].samples.median_us, contenders[1].samples.median_us))
        await plain.aclose()
        await encrypted.aclose()
    return rows


def report(rows: list[tuple[str, float, float]]) -> str:
    lines = [
        f"Encryption overhead over SQLite (median µs per call; Python {platform.python_version()},"
        f" {platform.machine()})",
        "",
        "| operation | sqlite | encrypt::sqlite | ratio |",
        "|---|---:|---:|---:|",
    ]
    for label, plain, enc in rows:
        lines.append(f"| {label} | {plain:,.1f} | {enc:,.1f} | {enc / plain:.2f}x |")
    warm = next(enc / plain for label, plain, enc in rows if label == "fetch 1000 (warm)")
    verdict = "met" if warm <= TARGET else "NOT met"
    lines += ["", f"Target: fetch 1000 within {TARGET}x: {warm:.2f}x ({verdict})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    args = parser.parse_args(argv)
    rows = anyio.run(run, args.quick)
    sys.stdout.write(report(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
