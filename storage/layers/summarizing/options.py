"""The summarizing layer's options checked: every bad value is a ``ConfigError`` naming it
(a ``ValueError`` too), so a mistake given in code, a URL or a TOML file reads alike."""

from __future__ import annotations

from storage.errors import ConfigError

__all__ = ["check_numbers", "token_trigger"]


def token_trigger(trigger_fraction: float, model: str | None, context_window: int | None) -> int:
    """The token budget ``trigger_fraction`` of the model's context window: ``context_window``
    when given (a model litellm does not know: ``hosted_vllm/…``, ``ollama/…``), else the
    window litellm's bundled model data gives ``model`` (default ``"gpt-4o"``).

    Raises:
        ConfigError: ``trigger_fraction`` not in (0, 1]; ``context_window`` < 1; no window
            known for ``model`` and no ``context_window`` given.
    """
    if not 0 < trigger_fraction <= 1:
        raise ConfigError(f"trigger_fraction must be in (0, 1], got {trigger_fraction}")
    if context_window is None:
        from summarizers.tokens import context_window as known_window

        try:
            context_window = known_window(model or "gpt-4o")
        except ConfigError as exc:
            raise ConfigError(
                f"{exc}; for a model litellm does not know, give its context window in "
                "tokens with context_window= (or give trigger_tokens)"
            ) from exc
    elif context_window < 1:
        raise ConfigError(f"context_window must be >= 1 token, got {context_window}")
    return max(1, int(trigger_fraction * context_window))


def check_numbers(**values: float | int | None) -> None:
    """Check the numeric options by their documented ranges (``None``: not given).

    Raises:
        ConfigError: the first value out of range, named.
    """
    rules: dict[str, tuple[float, bool, str]] = {  # (bound, inclusive, wording)
        "trigger_at": (1, True, ">= 1"),
        "trigger_tokens": (1, True, ">= 1"),
        "keep_last": (0, True, ">= 0"),
        "trim_tool_results": (20, True, ">= 20 characters"),
        "trim_keep_turns": (0, True, ">= 0"),
        "max_buffers": (1, True, ">= 1"),
        "timeout": (0, False, "> 0 or None"),
        "lease_ttl": (0, False, "> 0"),
        "process_recheck": (0, False, "> 0 or None"),
    }
    for name, value in values.items():
        if value is None or name not in rules:
            continue
        bound, inclusive, wanted = rules[name]
        if value < bound or (not inclusive and value == bound):
            raise ConfigError(f"{name} must be {wanted}, got {value}")
