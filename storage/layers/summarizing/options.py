"""The summarizing layer's options: each value checked where it is declared, the whole set
validated once, into one frozen :class:`SummarizingOptions`.

- A rule about one value is a ``Check`` in the annotation of the layer's constructor
  parameter (:mod:`storage.checked`): ``trigger_at: TriggerAt | None``, with
  ``TriggerAt = Annotated[int, Check(...)]`` declared here. Config runs these checks while it
  resolves a URL, dict or TOML file, so every bad value is listed with every other problem of
  the configuration in one ``ConfigError``.
- :meth:`SummarizingOptions.of` is the one place the constructor's arguments are validated:
  the same checks (every bad value reported, not only the first), then the rules joining
  several options (a pair budget or a token budget, ``keep_tokens < trigger_tokens``,
  ``retry_backoff <= retry_max``), then the defaults that depend on others (``trigger_at=20``
  without a token budget, the ``trigger_fraction`` budget, ``lease_ttl``).

Every bad value is a ``ConfigError`` (a ``ValueError`` too) naming the option, so a mistake
given in code, a URL or a TOML file reads alike.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal, Self, TypeAlias

import attrs

from storage.checked import Check, checks_of
from storage.errors import ConfigError
from storage.tokens import context_window as known_window

__all__ = [
    "CHECKED",
    "Coherence",
    "OnError",
    "Summaries",
    "SummarizingOptions",
    "SummaryRole",
    "token_trigger",
]

Summaries = Literal["store", "memory"]
Coherence = Literal["store", "process"]
OnError = Literal["raise", "fallback"]
SummaryRole = Literal["system", "user", "assistant", "developer"]

DEFAULT_MODEL: Final = "gpt-4o"
DEFAULT_TRIGGER_AT: Final = 20


def _number(name: str, value: object, whole: bool) -> float:
    wanted = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted):
        kind = "an integer" if whole else "a number"
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    assert isinstance(value, int | float)
    return value


def _at_least(name: str, bound: int, wording: str = "", *, whole: bool = True) -> Check:
    def check(value: object) -> None:
        if _number(name, value, whole) < bound:
            raise ConfigError(f"{name} must be {wording or f'>= {bound}'}, got {value}")

    return Check(check)


def _above_zero(name: str, wording: str = "> 0") -> Check:
    def check(value: object) -> None:
        if not _number(name, value, False) > 0:
            raise ConfigError(f"{name} must be {wording}, got {value}")

    return Check(check)


def _fraction(value: object) -> None:
    if not 0 < _number("trigger_fraction", value, False) <= 1:
        raise ConfigError(f"trigger_fraction must be in (0, 1], got {value}")


def _one_of(name: str, choices: tuple[object, ...]) -> Check:
    def check(value: object) -> None:
        if value not in choices:
            listed = ", ".join(repr(c) for c in choices)
            raise ConfigError(f"{name} must be one of {listed}, got {value!r}")

    return Check(check)


TriggerAt: TypeAlias = Annotated[int, _at_least("trigger_at", 1)]
KeepLast: TypeAlias = Annotated[int, _at_least("keep_last", 0)]
MaxBuffers: TypeAlias = Annotated[int, _at_least("max_buffers", 1)]
Timeout: TypeAlias = Annotated[float, _above_zero("timeout", "> 0 or None")]
LeaseTtl: TypeAlias = Annotated[float, _above_zero("lease_ttl")]
RetryBackoff: TypeAlias = Annotated[float, _at_least("retry_backoff", 0, whole=False)]
RetryMax: TypeAlias = Annotated[float, _at_least("retry_max", 0, whole=False)]
TriggerTokens: TypeAlias = Annotated[int, _at_least("trigger_tokens", 1)]
KeepTokens: TypeAlias = Annotated[int, _above_zero("keep_tokens")]
TriggerFraction: TypeAlias = Annotated[float, Check(_fraction)]
TrimToolResults: TypeAlias = Annotated[int, _at_least("trim_tool_results", 20, ">= 20 characters")]
TrimKeepTurns: TypeAlias = Annotated[int, _at_least("trim_keep_turns", 0)]
ProcessRecheck: TypeAlias = Annotated[float, _above_zero("process_recheck", "> 0 or None")]
ContextWindow: TypeAlias = Annotated[int, _at_least("context_window", 1, ">= 1 token")]
SummariesChoice: TypeAlias = Annotated[Summaries, _one_of("summaries", ("store", "memory"))]
CoherenceChoice: TypeAlias = Annotated[Coherence, _one_of("coherence", ("store", "process"))]
OnErrorChoice: TypeAlias = Annotated[OnError, _one_of("on_error", ("raise", "fallback"))]
SummaryRoleChoice: TypeAlias = Annotated[
    SummaryRole, _one_of("summary_role", ("system", "user", "assistant", "developer"))
]

CHECKED: Final[Mapping[str, Any]] = {
    "trigger_at": TriggerAt,
    "keep_last": KeepLast,
    "max_buffers": MaxBuffers,
    "timeout": Timeout,
    "summaries": SummariesChoice,
    "coherence": CoherenceChoice,
    "on_error": OnErrorChoice,
    "lease_ttl": LeaseTtl,
    "retry_backoff": RetryBackoff,
    "retry_max": RetryMax,
    "summary_role": SummaryRoleChoice,
    "trigger_tokens": TriggerTokens,
    "keep_tokens": KeepTokens,
    "trigger_fraction": TriggerFraction,
    "trim_tool_results": TrimToolResults,
    "trim_keep_turns": TrimKeepTurns,
    "context_window": ContextWindow,
    "process_recheck": ProcessRecheck,
}
"""Each checked option's annotation, as the layer's constructor declares it (a test keeps
the two the same); ``None`` is never checked."""


def token_trigger(trigger_fraction: float, model: str, context_window: int | None) -> int:
    """The token budget ``trigger_fraction`` of the model's context window: ``context_window``
    when given (a model litellm does not know: ``hosted_vllm/…``, ``ollama/…``), else the
    window litellm's bundled model data gives ``model``.

    Raises:
        ConfigError: no window known for ``model`` and no ``context_window`` given.
    """
    if context_window is None:
        try:
            context_window = known_window(model)
        except ConfigError as exc:
            # Without litellm no model is known: only installing it, or a token budget, helps.
            hint = (
                "or give trigger_tokens"
                if importlib.util.find_spec("litellm") is None
                else "for a model litellm does not know, give its context window in tokens "
                "with context_window=, or give trigger_tokens"
            )
            raise ConfigError(f"{exc}; {hint}") from exc
    return max(1, int(trigger_fraction * context_window))


@attrs.frozen(kw_only=True)
class SummarizingOptions:
    """The summarizing layer's options, validated and with their defaults resolved (see
    ``SummarizingChatStorage`` for what each means). Made by :meth:`of`.

    Attributes:
        trigger_at: the pair budget (``None`` with a token budget).
        trigger_tokens: the token budget (``trigger_fraction`` resolved; ``None``: pairs).
        keep_tokens: tokens kept verbatim after a summary (``None``: a quarter of the
            trigger).
        model: the model whose tokenizer counts tokens.
        lease_ttl: seconds a summarizing lease is held (default resolved from ``timeout``).
        summaries: as given (``None``: chosen from the stack's abilities).
        process_recheck: ``coherence="process"``: seconds between head reads (``None``:
            never; always ``None`` with ``coherence="store"``, which reads on every fetch).
    """

    trigger_at: int | None
    keep_last: int
    max_buffers: int
    timeout: float | None
    summaries: Summaries | None
    coherence: Coherence
    on_error: OnError
    lease_ttl: float
    retry_backoff: float
    retry_max: float
    summary_role: SummaryRole
    clock: Callable[[], float]
    trigger_tokens: int | None
    keep_tokens: int | None
    model: str
    trim_tool_results: int | None
    trim_keep_turns: int
    clear_tool_results: bool
    background: bool
    process_recheck: float | None

    @property
    def threshold(self) -> int | None:
        """The pair budget in messages (``trigger_at * 2``; ``None`` with a token budget)."""
        return self.trigger_at * 2 if self.trigger_at is not None else None

    @property
    def fallback(self) -> bool:
        return self.on_error == "fallback"

    @classmethod
    def of(
        cls,
        *,
        trigger_at: int | None,
        keep_last: int,
        max_buffers: int,
        timeout: float | None,
        summaries: Summaries | None,
        coherence: Coherence,
        on_error: OnError,
        lease_ttl: float | None,
        retry_backoff: float,
        retry_max: float,
        summary_role: SummaryRole,
        clock: Callable[[], float],
        trigger_tokens: int | None,
        keep_tokens: int | None,
        trigger_fraction: float | None,
        model: str | None,
        trim_tool_results: int | None,
        trim_keep_turns: int,
        clear_tool_results: bool,
        background: bool,
        context_window: int | None,
        process_recheck: float | None,
    ) -> Self:
        """Validate the constructor's arguments (the one place they are) and resolve their
        defaults.

        Raises:
            ConfigError: every value that fails its check, in one error (each named, one a
                line when there are several); then the first rule joining several options
                that is broken; a ``trigger_fraction`` whose model has no known window.
        """
        given: dict[str, Any] = {k: v for k, v in locals().items() if k in CHECKED}
        _check_each(given)
        if trigger_tokens is not None and trigger_fraction is not None:
            raise ConfigError("give trigger_tokens or trigger_fraction, not both")
        if trigger_fraction is None and context_window is not None:
            raise ConfigError("context_window is for trigger_fraction; give both or neither")
        model = model or DEFAULT_MODEL
        if trigger_fraction is not None:
            trigger_tokens = token_trigger(trigger_fraction, model, context_window)
        if trigger_tokens is not None:
            if trigger_at is not None:
                raise ConfigError("give trigger_at (pairs) or a token budget, not both")
        elif keep_tokens is not None:
            raise ConfigError(
                "keep_tokens needs a token budget (trigger_tokens or trigger_fraction)"
            )
        else:
            trigger_at = DEFAULT_TRIGGER_AT if trigger_at is None else trigger_at
        if keep_tokens is not None and not (
            trigger_tokens is not None and 0 < keep_tokens < trigger_tokens
        ):
            raise ConfigError(f"keep_tokens must be in (0, trigger_tokens), got {keep_tokens}")
        if retry_max < retry_backoff:
            raise ConfigError(
                f"need 0 <= retry_backoff <= retry_max, got {retry_backoff} and {retry_max}"
            )
        if lease_ttl is None:
            lease_ttl = timeout + 30.0 if timeout else 300.0
        elif timeout is not None and lease_ttl <= timeout:
            # A call the timeout lets run would outlive its lease: another worker takes the
            # key meanwhile and makes a second summarizer call for the same crossing.
            raise ConfigError(
                f"lease_ttl must be > timeout (a summarizer call may run that long while "
                f"holding the key's lease), got lease_ttl={lease_ttl} and timeout={timeout}"
            )
        return cls(
            trigger_at=trigger_at,
            keep_last=keep_last,
            max_buffers=max_buffers,
            timeout=timeout,
            summaries=summaries,
            coherence=coherence,
            on_error=on_error,
            lease_ttl=lease_ttl,
            retry_backoff=retry_backoff,
            retry_max=retry_max,
            summary_role=summary_role,
            clock=clock,
            trigger_tokens=trigger_tokens,
            keep_tokens=keep_tokens,
            model=model,
            trim_tool_results=trim_tool_results,
            trim_keep_turns=trim_keep_turns,
            clear_tool_results=bool(clear_tool_results),
            background=bool(background),
            process_recheck=None if coherence == "store" else process_recheck,
        )


def _check_each(given: Mapping[str, Any]) -> None:
    """Run every given value's checks (``None`` is never checked).

    Raises:
        ConfigError: one error for every value that failed (its own message when one did).
    """
    problems: list[ConfigError] = []
    for name, value in given.items():
        if value is None:
            continue
        for check in checks_of(CHECKED[name]):
            try:
                check(value)
            except ConfigError as exc:
                problems.append(exc)
                break
    if len(problems) == 1:
        raise problems[0]
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise ConfigError(f"{len(problems)} bad summarizing options:\n{lines}")
