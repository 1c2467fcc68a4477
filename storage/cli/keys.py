"""``chatlayers keys new|init|rotate|status|accept``: master keys and the keyring.

``new`` prints one new master key (32 random bytes, urlsafe base64) and opens nothing. The
others work on the stack's encrypting layer (``--url``/``--config``, as every command): its
keyring and its master keys (``key_env``, newest first). ``init`` makes the keyring of a new
deployment (a keyring is never made implicitly, so a missing one is an error, not a new
empty one); ``status`` says how many data keys each master key wraps, by fingerprint;
``rotate`` re-wraps every data key under the newest master key without rewriting a message,
online and resumable, once every worker holds the new key (it prints that rollout), after
which the old master key can be removed from the variable;
``accept`` makes the keyring present the data store's when the right one is lost for good
(after restoring an older backup). No key is ever printed except by ``new``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.errors import ConfigError

if TYPE_CHECKING:
    from storage.layers.encrypting import EncryptingChatStorage

__all__: list[str] = []


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("new", "init", "rotate", "status", "accept"),
        help="new: print a new master key; init: make the keyring of a new deployment; "
        "rotate: re-wrap every data key under the newest master key; status: data keys per "
        "master key (fingerprints only); accept: take the keyring present as the data "
        "store's (after restoring an older backup, when no newer copy exists)",
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
    from storage.layers.encrypting import EncryptingChatStorage

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
        return await _ACTIONS[args.action](layer, out)


async def _init(layer: EncryptingChatStorage, out: Output) -> int:
    made, state = await layer.init_keyring()
    where = layer.keyring.location
    if out.json_mode:
        out.json({"keyring": where, "created": made, "generation": state.generation})
    else:
        out.text(
            f"created the keyring {where}"
            if made
            else f"the keyring {where} exists already (generation {state.generation})"
        )
    return 0


async def _accept(layer: EncryptingChatStorage, out: Output) -> int:
    before, after = await layer.accept_keyring()
    where = layer.keyring.location
    if out.json_mode:
        out.json({"keyring": where, "before": before.generation, "generation": after.generation})
    else:
        out.text(
            f"the keyring {where} is now the data store's (generation "
            f"{before.generation} -> {after.generation}); data keys it lacks stay "
            "lost (their users' messages raise DataKeyMissingError: delete those "
            "users to let them start again); users erased after its backup are "
            "back in it: erase them again"
        )
    return 0


async def _rotate(layer: EncryptingChatStorage, out: Output) -> int:
    from storage.layers.encrypting import rotate_keys

    await layer.keyring_state()  # not a missing, older or another keyring
    masters = layer.masters
    newest, old = masters.newest.fingerprint, masters.fingerprints()[1:]
    # The CLI cannot see the workers' keys: it says what each of them must hold.
    out.note(
        f"every worker must hold master key {newest} first ({masters.source} = NEW,OLD) "
        "before this rotation: one holding only an old key cannot read a re-wrapped user"
    )
    result = await rotate_keys(layer.keyring, masters)
    if out.json_mode:
        out.json(
            {
                "rewrapped": result.rewrapped,
                "already_current": result.current,
                "skipped": result.skipped,
                "newest": newest,
                "old": old,
            }
        )
        return 0
    out.text(
        f"re-wrapped {plural(result.rewrapped, 'data key')} under master key "
        f"{newest}; {result.current} already were"
        + (f"; {result.skipped} changed meanwhile (run again)" if result.skipped else "")
    )
    if old:
        out.text(
            f"next: drop {', '.join(old)} from {masters.source} on every worker and restart "
            "it; then `chatlayers keys status` shows every data key under "
            f"{newest} (a worker that held only an old key meanwhile wrapped its new users' "
            "keys under it: run rotate again before dropping that key)"
        )
    return 0


async def _status(layer: EncryptingChatStorage, out: Output) -> int:
    from storage.layers.encrypting import key_status

    state = await layer.keyring_state()
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
                "generation": state.generation,
                "data_keys": status.data_keys,
                "by_master": [
                    {"fingerprint": fp, "data_keys": count, "position": position}
                    for fp, count, position in status.by_master
                ],
            }
        )
    else:
        out.text(
            f"{plural(status.data_keys, 'data key')} in {layer.keyring.location} "
            f"(generation {state.generation})"
        )
        out.table(None, ("master key", "data keys", "configured"), rows)
        if status.unreadable:
            out.text(
                f"{plural(status.unreadable, 'data key')} wrapped by a master key that is "
                "not configured: their users' messages cannot be read"
            )
    return 0


_ACTIONS: dict[str, Callable[[EncryptingChatStorage, Output], Awaitable[int]]] = {
    "init": _init,
    "accept": _accept,
    "rotate": _rotate,
    "status": _status,
}


command(
    "keys",
    help="encryption keys: print a new master key, make the keyring, rotate, show which "
    "master key wraps how many data keys, accept a restored keyring",
    arguments=_arguments,
    needs_stack=False,
)(_cmd_keys)
