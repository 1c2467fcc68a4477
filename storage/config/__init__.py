"""Stack configuration: ``open_storage`` builds a stack from a URL chain, a dict or a file.

The modules, in the order a configuration flows through them:

- :mod:`storage.config.loading`: ``open_storage``, the dict / TOML form, and where the
  configuration comes from (argument, ``CHATLAYERS_URL``, ``CHATLAYERS_CONFIG``, default);
- :mod:`storage.config.chain`: the URL-chain grammar (``summarize::scrub::sqlite:///chats.db``);
- :mod:`storage.config.spec`: the parsed form both give (``StackSpec``);
- :mod:`storage.config.registry`: names of stores, layers and summarizers, and their factories;
- :mod:`storage.config.build`: building it (:mod:`storage.config.options` converts the option
  values, :mod:`storage.config.problems` collects every mistake into one error,
  :mod:`storage.redact` keeps secrets out of every message);
- :mod:`storage.config.stack`: the result (``Stack``, ``describe``).

The names below are imported on first use, so a module that only needs one piece (the
server stores and the LLM summarizer import :mod:`storage.redact`) does not pay for
the whole builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.lazy import lazy_exports

if TYPE_CHECKING:
    from storage.config.loading import (
        DEFAULT_URL,
        ENV_CONFIG,
        ENV_URL,
        load_config,
        open_storage,
        parse_config,
    )
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
    "ENV_CONFIG": "storage.config.loading",
    "ENV_URL": "storage.config.loading",
    "load_config": "storage.config.loading",
    "open_storage": "storage.config.loading",
    "parse_config": "storage.config.loading",
    "Stack": "storage.config.stack",
    "describe": "storage.config.stack",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
