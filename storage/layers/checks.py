"""What each built-in layer's constructor checks that needs nothing built, for the config's
resolve pass (:mod:`storage.config.resolve`), so a bad configuration reports every mistake
at once, before anything is opened.

Besides each value's declared check, a layer's constructor checks its options together
(the summarizing layer's budgets), reads what they name (the scrubbing layer's
``known_values_file``, the encrypting layer's master keys from ``key_env``) and opens the
configurations they name (the mirroring layer's ``secondary``). Each check here calls what
the constructor calls, without the store below and without opening anything, so its
message is the constructor's own; the resolve pass runs it for every component whose
options are otherwise good. They live beside the layers they check; stores have none (a
store reads its own URL when it is built: config knows no scheme).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from storage.errors import ConfigError

__all__ = ["CHECKS", "Check", "Checked", "check_of"]


@attrs.frozen
class Checked:
    """What a check is given: one component, resolved.

    Attributes:
        factory: the component's factory (a class or a function).
        options: its keyword options, converted (a nested component is its unbuilt plan).
        configuration: raises the ``ConfigError`` of every problem of the configuration a
            string names (a store URL, a chain or a config file), resolved, never built.
    """

    factory: Any
    options: Mapping[str, Any]
    configuration: Callable[[str], None]

    def given(self) -> dict[str, Any]:
        """The options with the factory's defaults for those not given."""
        defaults = {
            name: p.default
            for name, p in inspect.signature(self.factory).parameters.items()
            if p.default is not p.empty
        }
        return defaults | dict(self.options)


Check = Callable[[Checked], None]


def check_of(factory: Any) -> Check | None:
    """The check of a built-in ``factory`` (``None`` for any other: a third-party
    component's constructor checks run when it is built)."""
    name = f"{getattr(factory, '__module__', '')}:{getattr(factory, '__qualname__', '')}"
    return CHECKS.get(name)


def _summarize(checked: Checked) -> None:
    """The summarizing layer's options as a whole (``SummarizingOptions.of``, which its
    constructor calls before it looks at the store below)."""
    from storage.layers.summarizing.options import SummarizingOptions

    given = checked.given()
    wanted = [
        name for name in inspect.signature(SummarizingOptions.of).parameters if name != "clock"
    ]
    if any(name not in given for name in wanted):
        return  # a constructor this check does not know: it checks when it is built
    SummarizingOptions.of(
        clock=given.get("clock") or time.monotonic, **{name: given[name] for name in wanted}
    )


def _built_over_a_stand_in(checked: Checked) -> None:
    """A layer that only keeps the store below it (``scrub``, ``strict``, ``transform``):
    its constructor itself, over an empty in-memory store (the scrubbing layer reads its
    ``known_values_file`` and builds its scrubber)."""
    from storage.stores.memory import InMemoryChatStorage

    checked.factory(InMemoryChatStorage(), **checked.options)


def _encrypt(checked: Checked) -> None:
    """The encrypting layer's ``cache_chars`` and master keys (``keys``, or the variable
    ``key_env`` names), as its constructor reads them before it opens the keyring."""
    from storage.layers.encrypting.cache import check_cache_chars
    from storage.layers.encrypting.master import load_master_keys

    given = checked.given()
    check_cache_chars(given.get("cache_chars"))
    load_master_keys(given.get("keys"), given.get("key_env"))


def _mirror(checked: Checked) -> None:
    """The configurations the mirroring layer's ``secondary`` and ``journal`` name."""
    for name in ("secondary", "journal"):
        _configuration(checked, name)


def _configuration(checked: Checked, name: str) -> None:
    """The configuration option ``name`` names, when it is a string.

    Raises:
        ConfigError: its problems, under ``option 'NAME':`` (a list of them indented).
    """
    value = checked.options.get(name)
    if not isinstance(value, str):
        return
    try:
        checked.configuration(value)
    except ConfigError as exc:
        nested = str(exc).replace("\n", "\n    ")
        raise ConfigError(f"option {name!r}: {nested}") from exc


def _otel(checked: Checked) -> None:
    """The otel layer's ``secret`` (when given: none is a random one, warned about once,
    when the layer is built)."""
    from storage.telemetry.ids import KeyHasher

    secret = checked.options.get("secret")
    if secret is not None:
        KeyHasher(secret, source=checked.options.get("secret_source"))


CHECKS: Final[Mapping[str, Check]] = {
    "storage.layers.summarizing.layer:SummarizingChatStorage": _summarize,
    "storage.layers.scrubbing:scrub_layer": _built_over_a_stand_in,
    "storage.layers.strict:StrictViewChatStorage": _built_over_a_stand_in,
    "storage.layers.transforming:TransformingChatStorage": _built_over_a_stand_in,
    "storage.layers.encrypting.layer:EncryptingChatStorage": _encrypt,
    "storage.layers.mirroring.layer:MirrorChatStorage": _mirror,
    "storage.layers.otel:TelemetryChatStorage": _otel,
}
"""Each built-in component's check, by the ``module:qualname`` of its factory (a test keeps
these the registry's)."""
