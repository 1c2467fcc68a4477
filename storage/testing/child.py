"""The writer process of the kit's multi-process scenarios (not an API).

``python -m storage.testing.child JSON`` with ``JSON`` holding ``url``, ``key`` (three
strings), ``prefix``, ``batches`` and ``batch_size``: opens ``url`` with ``open_storage``,
saves ``batches`` batches of ``batch_size`` messages one batch at a time, and prints
``ack N`` (flushed) after batch ``N`` was acknowledged. Message ids are
``{prefix}-{N}-{i}``, texts ``{prefix}:{N}:{i}``. With ``rewind`` (a message id) instead, it
rewinds the key to that message and prints ``rewound N`` (the messages hidden). With
``touch`` (``{"user", "sessions", "agent", "rounds"}``) instead, it saves one message to each
of those sessions in turn, ``rounds`` times, and prints ``round N`` after each full round.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio


def batch(prefix: str, n: int, size: int) -> list[Any]:
    """The messages of batch ``n`` (the parent rebuilds them to compare)."""
    from storage.message import ChatMessage

    return [
        ChatMessage(
            "user" if i % 2 == 0 else "assistant", f"{prefix}:{n}:{i}", id=f"{prefix}-{n}-{i}"
        )
        for i in range(size)
    ]


async def _write(spec: dict[str, Any]) -> None:
    from storage.config import open_storage
    from storage.message import ChatKey

    if "touch" in spec:
        await _touch(spec["url"], spec["touch"])
        return
    key = ChatKey(*spec["key"])
    async with open_storage(spec["url"]) as store:
        if "rewind" in spec:
            hidden = await store.rewind(key, spec["rewind"])
            sys.stdout.write(f"rewound {hidden}\n")
            sys.stdout.flush()
            return
        for n in range(int(spec["batches"])):
            stored = await store.save_messages(
                key, batch(spec["prefix"], n, int(spec["batch_size"]))
            )
            assert len(stored) == int(spec["batch_size"])
            sys.stdout.write(f"ack {n}\n")
            sys.stdout.flush()


async def _touch(url: str, touch: dict[str, Any]) -> None:
    """Keep the sessions busy: another process's activity under a listing walk."""
    from storage.config import open_storage
    from storage.message import ChatKey, ChatMessage

    async with open_storage(url) as store:
        for n in range(int(touch["rounds"])):
            for session in touch["sessions"]:
                key = ChatKey(touch["user"], session, touch["agent"])
                await store.save(key, ChatMessage("user", f"touch {n}"))
            sys.stdout.write(f"round {n}\n")
            sys.stdout.flush()


def main(argv: list[str]) -> None:
    anyio.run(_write, json.loads(argv[0]), backend="asyncio")


if __name__ == "__main__":
    main(sys.argv[1:])
