"""The ``scrub`` layer: a ``TransformingChatStorage`` running a ``PIIScrubber``.

``scrub::sqlite:///chats.db`` in a URL; :func:`scrub_layer` is what the registry builds.
"""

from __future__ import annotations

from typing import Any

from storage.errors import ConfigError

__all__ = ["load_known_values", "scrub_layer"]


def scrub_layer(
    inner: Any,
    *,
    secret: str | None = None,
    secret_source: str | None = None,
    known_values_file: str | None = None,
    **scrubber_options: Any,
) -> Any:
    """The ``scrub`` layer: ``TransformingChatStorage(inner, PIIScrubber(...))``.

    Args:
        inner: the wrapped store.
        secret: the key of the placeholder hash (prefer ``secret_env`` in config, which reads
            it from an environment variable). ``None``: the scrubber's own default
            (``CHATLAYERS_PII_SECRET``, else a random per-process secret with a warning).
        secret_source: where ``secret`` came from, shown by ``describe()``
            (``secret=env:VARIABLE``, ``secret=config``); the configuration sets it from
            ``secret_env`` / ``secret`` (an ``X_source`` option is never given by hand).
            Default ``"argument"`` when ``secret`` is given in code.
        known_values_file: a TOML or JSON file mapping an entity name to a list of values
            always scrubbed as that entity (``EMAIL_ADDRESS = ["a@b.c"]``); merged with
            ``known_values``.
        **scrubber_options: ``PIIScrubber`` keyword options (``entities``, ``mode``,
            ``known_values``, ``json_keys``, ...), converted by its declared types (from a
            URL, mappings are JSON: ``scrub?json_keys={"PERSON":["nick"]}``).

    Raises:
        ConfigError: the known-values file is missing, unparseable or not an entity → list
            of strings mapping.
    """
    from storage.layers.transforming import TransformingChatStorage
    from storage.pii import PIIScrubber

    if known_values_file is not None:
        loaded = load_known_values(known_values_file)
        inline = scrubber_options.get("known_values") or {}
        merged: dict[str, list[str]] = {k: list(v) for k, v in loaded.items()}
        for entity, values in inline.items():
            merged.setdefault(entity, []).extend(values)
        scrubber_options["known_values"] = merged
    scrubber = PIIScrubber(secret, secret_source=secret_source, **scrubber_options)
    return TransformingChatStorage(inner, scrubber)


# Options of scrub_layer's **scrubber_options come from PIIScrubber's own signature.
scrub_layer.chatlayers_forwards_to = "storage.pii:PIIScrubber"  # type: ignore[attr-defined]


def load_known_values(path: str) -> dict[str, list[str]]:
    """Read a known-values file: TOML (``.toml``) or JSON mapping entity → list of strings.

    Raises:
        ConfigError: unreadable file, bad syntax, or not a mapping of string lists.
    """
    import json
    import tomllib

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        data = tomllib.loads(raw.decode("utf-8")) if path.endswith(".toml") else json.loads(raw)
    except OSError as exc:
        raise ConfigError(f"scrub: cannot read known_values_file {path!r}: {exc.strerror}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"scrub: known_values_file {path!r} is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"scrub: known_values_file {path!r} must hold a mapping entity -> list")
    out: dict[str, list[str]] = {}
    for entity, values in data.items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ConfigError(
                f"scrub: known_values_file {path!r}: {entity!r} must be a list of strings"
            )
        out[entity] = list(values)
    return out
