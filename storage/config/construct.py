"""The construct pass: a ``StackPlan`` to a ``Stack``, the store first, each layer around it.

Everything a configuration can get wrong without building was found while resolving
(:mod:`storage.config.resolve`, the built-in constructors' own checks that need nothing
built included), so construction only calls the factories: a nested
component first (a layer's summarizer), then the store (``factory.from_url(url, **options)``
when it came from a URL: the store reads its own URL), then each layer around the one
below it (``factory(inner, **options)``), innermost first. What can still fail here, one
error at a time, is what only the built stack can tell: a store's own reading of its URL
(``sqlite://x.db`` names a host; a Redis or PostgreSQL URL as its driver reads it: a bad
port, an unknown driver parameter, ``min_size`` above ``max_size``); ``summaries="store"``
over a stack without summary checkpoints; an encrypting layer's keyring against the store
below it (a ``memory://`` keyring over a persistent store, a keyring kept in the data
store); a mirroring layer's secondary lacking an ability of the primary; the otel layer's
``exporter="console"`` without opentelemetry-sdk; a check a third-party constructor makes
and does not declare (see :mod:`storage.checked`); a factory that does not build a
``ChatStorage``. Each is a ``ConfigError`` naming the
component after the configuration's source, as every problem found while resolving is
(``URL summarize::memory://: layer 'summarize': ...``). Every error's text is redacted
(:mod:`storage.redact`).
"""

from __future__ import annotations

import logging
from typing import Any

from storage.config.problems import labelled
from storage.config.resolve import Plan, StackPlan
from storage.config.stack import Stack, describe_lines
from storage.errors import ChatStorageError, ConfigError, InvalidArgumentError
from storage.protocol import PROTOCOL_METHODS, ChatStorage
from storage.redact import scrubbed_error

__all__ = ["construct"]

log = logging.getLogger(__name__)


def construct(plan: StackPlan) -> Stack:
    """Build the stack ``plan`` describes (it must have no problems).

    Raises:
        ConfigError: a constructor refused a value it does not declare a check for, or a
            factory built something that is not a ``ChatStorage``.
        StorageUnavailableError: the store cannot open its file or directory (network
            stores connect lazily, on first use).
    """
    assert plan.store is not None, "a plan with problems is not constructed"
    assert not plan.problems, "a plan with problems is not constructed"
    secrets = set(plan.secrets)
    top: Any = _storage(_build(plan.store, secrets, plan.source), plan.store, plan.source)
    for layer in reversed(plan.layers):
        top = _storage(_build(layer, secrets, plan.source, top), layer, plan.source)
    stack = Stack(top, source=plan.source, secrets=secrets)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("built stack from %s: %s", plan.source, " | ".join(describe_lines(stack)))
    return stack


def _build(plan: Plan, secrets: set[str], source: str, *inner: Any) -> Any:
    kwargs = {
        k: _build(v, secrets, source) if isinstance(v, Plan) else v for k, v in plan.kwargs.items()
    }
    try:
        return plan.factory(*inner, *plan.args, **kwargs)
    except (ConfigError, InvalidArgumentError) as exc:
        # A value the constructor refused (a check not declared in its annotation, see
        # storage.checked) is a mistake of the configuration too.
        text = labelled(plan.label, exc)
        error = scrubbed_error(ConfigError, _sourced(source, text), exc, secrets)
    except ChatStorageError as exc:
        error = scrubbed_error(type(exc), str(exc), exc, secrets)
    except ImportError as exc:
        text = f"{plan.label}: a module it needs is missing: {exc}"
        error = scrubbed_error(ConfigError, _sourced(source, text), exc, secrets)
    except (ValueError, TypeError) as exc:
        text = f"{plan.label}: {exc}"
        error = scrubbed_error(ConfigError, _sourced(source, text), exc, secrets)
    raise error from error.__cause__


def _sourced(source: str, text: str) -> str:
    """``SOURCE: TEXT``, as the problems found while resolving are reported (a nested
    component's error already names the source)."""
    return text if not source or text.startswith(f"{source}: ") else f"{source}: {text}"


def _storage(component: object, plan: Plan, source: str) -> Any:
    """``component``, which a store or layer factory built: it must be a ``ChatStorage``."""
    if not isinstance(component, ChatStorage):
        missing = [
            name
            for name in (*PROTOCOL_METHODS, "__aenter__", "__aexit__")
            if not callable(getattr(component, name, None))
        ]
        raise ConfigError(
            _sourced(
                source,
                f"{plan.label} built a {type(component).__name__}, which is not a ChatStorage"
                + (f" (missing: {', '.join(missing)})" if missing else ""),
            )
        )
    return component
