"""A built stack (``Stack``) and how to walk and describe any stack of wrappers.

Components are linked by their ``.inner`` attribute, outermost first; each describes itself
in one line through its ``describe()`` method (else its class name is shown). Every line is
redacted (:mod:`storage.redact`).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Self, TypeVar

from storage.abilities import ABILITIES, Abilities, DescribableStorage
from storage.protocol import AsyncContextMixin, ChatStorage, ChatStorageWrapper
from storage.redact import redact_text

__all__ = ["Stack", "components", "describe", "describe_lines"]

T = TypeVar("T")


def components(stack: object) -> list[object]:
    """Every component of a stack, outermost first, following ``.inner`` (a ``Stack`` itself
    is skipped)."""
    out: list[object] = []
    current: object | None = stack.inner if isinstance(stack, Stack) else stack
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append(current)
        current = getattr(current, "inner", None)
    return out


def describe_lines(stack: object, secrets: Iterable[str] = ()) -> list[str]:
    """One line per component, outermost first, each from its ``describe()`` (redacted)."""
    if isinstance(stack, Stack):
        secrets = {*secrets, *stack._secrets}
    secret_set = set(secrets)
    lines = []
    for component in components(stack):
        own = getattr(component, "describe", None)
        text = own() if callable(own) else type(component).__name__
        lines.append(redact_text(str(text), secret_set))
    return lines


def describe(stack: object) -> str:
    """The composed stack, outermost first, one line per component, secrets redacted."""
    return "\n".join(describe_lines(stack))


class Stack(ChatStorageWrapper):
    """A built stack: a ``ChatStorage`` that forwards to its outermost layer.

    ``async with`` closes every component (``aclose`` runs down the chain). It passes every
    optional ability to the outermost layer, which decides; :func:`storage.abilities.find_ability`
    on a stack still finds an ability only when every component below has it.

    Attributes:
        inner: the outermost layer (or the store when there is no layer).
        source: where the stack came from (redacted).
    """

    abilities = Abilities(
        passes=tuple(a for a in ABILITIES if a is not DescribableStorage),
        transforms=(DescribableStorage,),
    )

    def __init__(self, top: ChatStorage, *, source: str = "", secrets: Iterable[str] = ()) -> None:
        super().__init__(top)
        self.source = source
        self._secrets = frozenset(secrets)

    async def __aenter__(self) -> Self:
        """Enter every component that does something on entry (a summarizing layer with
        ``background=True`` opens its task group), innermost first; ``async with`` then closes
        the whole chain once on exit."""
        try:
            for component in reversed(components(self)):
                enter = getattr(type(component), "__aenter__", AsyncContextMixin.__aenter__)
                if component is not self and enter is not AsyncContextMixin.__aenter__:
                    await typing.cast(ChatStorage, component).__aenter__()
        except BaseException:
            await self.aclose()
            raise
        return self

    @property
    def base(self) -> ChatStorage:
        """The innermost store, holding the raw (scrubbed) record."""
        return typing.cast(ChatStorage, components(self)[-1])

    def components(self) -> list[object]:
        """Every component, outermost first."""
        return components(self)

    def find(self, cls: type[T]) -> T | None:
        """The outermost component that is an instance of ``cls``, or ``None``."""
        for component in components(self):
            if isinstance(component, cls):
                return component
        return None

    def find_all(self, predicate: Callable[[object], bool]) -> Iterator[object]:
        """Components for which ``predicate`` is true, outermost first."""
        return (c for c in components(self) if predicate(c))

    def describe(self) -> str:
        """The whole stack, outermost first, one line per component, secrets redacted."""
        return describe(self)

    def __repr__(self) -> str:
        return f"<Stack {' | '.join(describe_lines(self))}>"
