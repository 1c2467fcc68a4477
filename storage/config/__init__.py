"""Stack configuration: ``open_storage`` builds a stack from a URL chain, a dict or a file.

The modules, in the order a configuration flows through them (three passes):

- :mod:`storage.config.loading`: ``open_storage`` and where the configuration comes from
  (argument, ``CHATLAYERS_URL``, ``CHATLAYERS_CONFIG``, default);
- :mod:`storage.config.parse`: **parse**, pure: a URL chain, a dict or a TOML/JSON file to
  the parsed form, :mod:`storage.config.spec` (``StackSpec``);
- :mod:`storage.config.resolve`: **resolve**: the environment, ``*_file`` paths, the
  :mod:`storage.config.registry` (names to factories, entry points) and
  :mod:`storage.config.options` (each factory's declared options, converted and checked),
  then the checks each built-in layer's constructor makes that need nothing built;
  every mistake is collected (:mod:`storage.config.problems`, one error) and every secret
  (:mod:`storage.redact` keeps them out of every message);
- :mod:`storage.config.construct`: **construct**: the store, then each layer around it;
- :mod:`storage.config.stack`: the result (``Stack``, ``describe``).

The names below are imported on first use, so a module that only needs one piece (the
server stores and the LLM summarizer import :mod:`storage.redact`) does not pay for
the whole builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.lazy import lazy_exports

if TYPE_CHECKING:
    from storage.config.loading import DEFAULT_URL, open_storage
    from storage.config.parse import load_config, parse_config
    from storage.config.resolve import ENV_CONFIG, ENV_URL
    from storage.config.stack import Stack, describe

__all__ = [
    "DEFAULT_URL",
    "ENV_CONFIG",
    "ENV_URL",
    "Stack",
    "describe",
    "load_config",
    "open_storage",
    "parse_config",
]

_LAZY = {
    "DEFAULT_URL": "storage.config.loading",
    "ENV_CONFIG": "storage.config.resolve",
    "ENV_URL": "storage.config.resolve",
    "load_config": "storage.config.parse",
    "open_storage": "storage.config.loading",
    "parse_config": "storage.config.parse",
    "Stack": "storage.config.stack",
    "describe": "storage.config.stack",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
