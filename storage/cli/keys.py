"""``chatlayers keys new|rotate|status``: make master keys, re-wrap data keys, count them.

``new`` prints one new master key (32 random bytes, urlsafe base64) and opens nothing.
``status`` and ``rotate`` work on the stack's encrypting layer (``--url``/``--config``, as
every command): its keyring and its master keys (``key_env``, newest first). ``status`` says
how many data keys each master key wraps, by fingerprint; ``rotate`` re-wraps every data key
under the newest master key without rewriting a message, after which the old master key can
be removed from the variable. No key is ever printed except by ``new``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.errors import ConfigError

__all__: list[str] = []


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("new", "rotate", "status"),
        help="new: print a new master key; rotate: re-wrap every data key under the newest "
        "master key; status: data keys per master key (fingerprints only)",
    )


async def _cmd_keys(args: argparse.Namespace, out: Output, stack: object) -> int:
    if args.action == "new":
        from storage.layers.encrypting import new_master_key

        key = new_master_key()
        if out.json_mode:
            out.json({"key": key})
        else:
            out.text(key)
        return 0
    from storage.config import open_storage
    from storage.config.loading import to_spec
    from storage.layers.encrypting import EncryptingChatStorage, key_status, rotate_keys

    url, config = getattr(args, "url", None), getattr(args, "config", None)
    if url and config:
        raise ConfigError("give --url or --config, not both")
    async with open_storage(to_spec(url or (Path(config) if config else None))) as opened:
        layer = opened.find(EncryptingChatStorage)
        if layer is None:
            raise ConfigError(
                f"keys {args.action} needs a stack with the encrypt layer; this one is "
                f"{' | '.join(opened.describe().splitlines())}"
            )
        if args.action == "rotate":
            result = await rotate_keys(layer.keyring, layer.masters)
            newest = layer.masters.newest.fingerprint
            if out.json_mode:
                out.json(
                    {
                        "rewrapped": result.rewrapped,
                        "already_current": result.current,
                        "skipped": result.skipped,
                        "newest": newest,
                    }
                )
            else:
                out.text(
                    f"re-wrapped {plural(result.rewrapped, 'data key')} under master key "
                    f"{newest}; {result.current} already were"
                    + (
                        f"; {result.skipped} changed meanwhile (run again)"
                        if result.skipped
                        else ""
                    )
                )
            return 0
        status = await key_status(layer.keyring, layer.masters)
        rows = [
            (
                fp,
                count,
                "not configured" if position is None else f"{position} of {layer.masters.source}",
            )
            for fp, count, position in status.by_master
        ]
        if out.json_mode:
            out.json(
                {
                    "keyring": layer.keyring.location,
                    "data_keys": status.data_keys,
                    "by_master": [
                        {"fingerprint": fp, "data_keys": count, "position": position}
                        for fp, count, position in status.by_master
                    ],
                }
            )
        else:
            out.text(f"{plural(status.data_keys, 'data key')} in {layer.keyring.location}")
            out.table(None, ("master key", "data keys", "configured"), rows)
            if status.unreadable:
                out.text(
                    f"{plural(status.unreadable, 'data key')} wrapped by a master key that is "
                    "not configured: their users' messages cannot be read"
                )
        return 0


command(
    "keys",
    help="encryption keys: print a new master key, rotate, or show which master key wraps "
    "how many data keys",
    arguments=_arguments,
    needs_stack=False,
)(_cmd_keys)
