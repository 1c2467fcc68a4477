"""One summarizer call: the timeout, the error translation and the result check (rules 6, 7)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from storage.errors import SummarizerError
from storage.layers.summarizing.projection import check_result
from storage.message import ChatMessage
from storage.summarizer import ChatSummarizer
from storage.telemetry import AttributeValue, recorder

__all__ = ["describe_summarizer", "run_summarizer"]


async def run_summarizer(
    summarizer: ChatSummarizer,
    source: Sequence[ChatMessage],
    keep_last: int,
    time_limit: float | None,
) -> list[ChatMessage]:
    """``summarizer(list(source), keep_last)``, checked; a ``summarize`` span of the
    telemetry hook when a recorder listens (:mod:`storage.telemetry`).

    Args:
        summarizer: the summarizer.
        source: the view to summarize (summary messages first, then raw messages).
        keep_last: turns the result must keep verbatim.
        time_limit: seconds the call may take (``None``: no limit).

    Raises:
        SummarizerError: the summarizer raised (the original is the ``__cause__``), timed out,
            or returned a result that breaks rule 7.
    """
    listener = recorder()
    if listener is None:
        result = await _call(summarizer, source, keep_last, time_limit)
        check_result(result, source, keep_last)
        return result
    attributes: dict[str, AttributeValue] = {
        "messages": len(source),
        "keep_last": keep_last,
        "summarizer": _kind(summarizer),
    }
    with listener.span("summarize", None, attributes) as handle:
        tokens = listener.tokens(source)
        if tokens is not None:
            handle.set("tokens.raw", tokens)
        try:
            result = await _call(summarizer, source, keep_last, time_limit)
        except SummarizerError as exc:
            handle.set("outcome", "timeout" if isinstance(exc.__cause__, TimeoutError) else "error")
            raise
        try:
            check_result(result, source, keep_last)
        except SummarizerError:
            handle.set("outcome", "refused")
            raise
        handle.set("messages.result", len(result))
        tokens = listener.tokens(result)
        if tokens is not None:
            handle.set("tokens.view", tokens)
        return result


async def _call(
    summarizer: ChatSummarizer,
    source: Sequence[ChatMessage],
    keep_last: int,
    time_limit: float | None,
) -> list[ChatMessage]:
    try:
        if time_limit is None:
            return await summarizer(list(source), keep_last)
        with anyio.fail_after(time_limit):
            return await summarizer(list(source), keep_last)
    except TimeoutError as exc:
        raise SummarizerError(
            f"summarizer timed out after {time_limit} s; no message was lost"
        ) from exc
    except SummarizerError:
        raise
    except Exception as exc:
        raise SummarizerError(
            f"summarizer failed ({type(exc).__name__}: {exc}); no message was lost"
        ) from exc


def _kind(summarizer: object) -> str:
    """The summarizer's class name (never its ``describe()``, which may name a model URL)."""
    return type(summarizer).__name__


def describe_summarizer(summarizer: object) -> str:
    """The summarizer's ``describe()``, or its type name."""
    own = getattr(summarizer, "describe", None)
    if callable(own):
        return str(own())
    return getattr(summarizer, "__qualname__", None) or type(summarizer).__name__
