"""The URL-chain grammar: ``layer[?opts]::...::store://location[?opts]`` to a ``StackSpec``.

Chains are fsspec style, outermost layer first, the base store last::

    summarize::scrub::sqlite:///chats.db
    summarize?trigger_at=10&keep_last=2::scrub?mode=mask::sqlite:///chats.db
    summarize?summarizer=litellm&summarizer.model=gpt-4o-mini::redis://:PASSWORD@host:6379/0

Each layer segment is ``name[?option=value&...]``; the last segment is the store URL, whose
query options that the store's constructor declares are converted by their declared types and
given to the store's ``from_url`` (the URL keeps its whole query: a Redis or PostgreSQL store
hands the parameters it does not declare to its driver, a file store refuses them).
A nested summarizer is named by ``summarizer=NAME`` and configured by
``summarizer.OPTION=value``. Values stay strings here;
:mod:`storage.config.options` converts them by declared type when the stack is built.

Each store reads its own location (``BaseStore.from_url``; file paths with
:func:`storage.stores.urls.path_from_url`): ``memory://``; ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``sqlite://:memory:``; ``jsonl://relative/dir``,
``jsonl:///absolute/dir``; ``redis://[:password@]host:port/db``; ``postgresql://...``.
Percent-encode ``?``, ``#`` and ``::`` in a path.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from storage.config.problems import Problems
from storage.config.spec import NESTED, ComponentSpec, StackSpec
from storage.errors import ConfigError
from storage.redact import redact_text, redact_url, secrets_of_url

__all__ = ["parse_store_url", "parse_url"]


def parse_url(url: str, *, defer: bool = False) -> StackSpec:
    """Parse a URL chain ``layer[?opts]::...::store://location[?opts]`` (nothing is built).

    Every bad segment is reported, not only the first (one ``ConfigError`` lists them).

    Args:
        url: the chain.
        defer: keep the problems found in ``StackSpec.problems`` instead of raising them
            (building then reports them together with its own).

    Raises:
        ConfigError: an empty segment, a layer segment that is not a name, a last segment that
            is not a store URL, or an option given twice.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("a stack URL must be a non-empty string such as 'sqlite:///chats.db'")
    secrets = secrets_of_url(url)
    source = f"URL {redact_text(url, secrets)}"
    problems = Problems()
    *layer_parts, store_part = url.strip().split("::")
    layers: list[ComponentSpec] = []
    for index, part in enumerate(layer_parts):
        name, _, query = part.partition("?")
        place = f"segment {index + 1} ({name})" if name else f"segment {index + 1}"
        if not name or "/" in name or " " in name:
            problems.add(
                place,
                f"segment {index + 1} ({part!r}) is not a layer name; "
                "layers come first, each as name[?option=value&...], the store URL last",
            )
            continue
        options = _parse_query(query, f"layer {name!r}", problems, place)
        layers.append(ComponentSpec("layers", name, options, where=place))
    store_place = f"segment {len(layer_parts) + 1} (store URL)"
    try:
        store = parse_store_url(store_part, "", problems=problems, place=store_place)
    except ConfigError as exc:
        problems.add(store_place, exc)
        store = ComponentSpec("stores", "", where=store_place, parsed=False)
    spec = StackSpec(store, layers, source, problems.items)
    if not defer:
        problems.raise_if_any(source, secrets)
    return spec


def parse_store_url(
    url: str, source: str, *, problems: Problems | None = None, place: str = ""
) -> ComponentSpec:
    """The store of a store URL ``scheme://location[?options]`` (``source`` names it in errors).

    Args:
        url: the store URL.
        source: how errors name where it is written (``""``: the error is the bare message).
        problems: where an option given twice is recorded (``None``: raised).
        place: the :attr:`ComponentSpec.where` of the store.

    Raises:
        ConfigError: ``url`` has no ``scheme://``, or an option is given twice (without
            ``problems``).
    """
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        hint = ""
        if scheme and ":" not in scheme:
            hint = f" ({scheme!r} looks like a layer name; the last segment must be a store URL)"
        prefix = f"{source}: " if source else ""
        raise ConfigError(
            f"{prefix}the last segment {redact_url(url)!r} is not a store URL such as "
            f"'sqlite:///chats.db' or 'memory://'{hint}"
        )
    scheme = scheme.lower()
    _, _, query = url.partition("?")
    own = problems if problems is not None else Problems()
    options = _parse_query(query, f"store {scheme!r}", own, place) if query else {}
    if problems is None and own:
        raise ConfigError(own.items[0].message)
    # The query is parsed here only; the store reads its location from the URL itself.
    return ComponentSpec(
        "stores",
        scheme,
        options,
        url=url,
        url_options=frozenset(options),
        where=place.replace("(store URL)", f"({scheme})") if place else "",
    )


def _parse_query(query: str, where: str, problems: Problems, place: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in options:
            problems.add(place or where, f"{where}: option {key!r} is given twice")
            continue
        options[key] = value
    return _nest_dotted(options, where, problems, place)


def _nest_dotted(
    options: dict[str, Any], where: str, problems: Problems, place: str
) -> dict[str, Any]:
    """Nest dotted options: ``summarizer=litellm&summarizer.model=x`` becomes
    ``{"summarizer": {"type": "litellm", "model": "x"}}``."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in options.items():
        head, dot, rest = key.partition(".")
        if not dot:
            out[key] = value
            continue
        if head not in NESTED or not rest or "." in rest:
            problems.add(
                place or where,
                f"{where}: option {key!r}: only nested components "
                f"({', '.join(NESTED)}) take dotted options; give mappings as JSON",
            )
            continue
        nested.setdefault(head, {})[rest] = value
    for head, sub in nested.items():
        name = out.get(head)
        if not isinstance(name, str):
            problems.add(place or where, f"{where}: '{head}.*' options need {head}=NAME too")
            continue
        out[head] = {"type": name, **sub}
    return out
