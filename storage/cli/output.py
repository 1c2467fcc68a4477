"""Where the ``chatlayers`` command writes: ``Output``.

Rich tables and progress bars in a terminal, plain aligned text when piped, indented JSON
with ``--json``. Data goes to stdout; remarks for a person and progress bars go to stderr, so
piping the data never mixes in anything else. rich is imported only when a terminal is there.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

__all__ = ["Output"]


class Output:
    """Rich tables and progress bars in a terminal, plain text when piped, JSON with --json.

    Args:
        json_mode: write JSON documents (``--json``): no tables, remarks or progress bars.
        out: where data goes (default stdout).
        err: where remarks and progress bars go (default stderr).

    Attributes:
        rich: whether tables are drawn with rich (``out`` is a terminal, not JSON mode).
    """

    def __init__(
        self, *, json_mode: bool, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.json_mode = json_mode
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rich = not json_mode and _isatty(self.out)

    def json(self, data: Any) -> None:
        """Write ``data`` as one indented JSON document (non-JSON values as ``str``)."""
        self.out.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")

    def table(
        self,
        title: str | None,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        show_header: bool = True,
    ) -> None:
        """Write a table: a rich table in a terminal, else aligned plain text (numbers with
        thousands separators, floats with 3 decimals, ``None`` as ``n/a``)."""
        if self.rich:
            from rich.console import Console
            from rich.table import Table
            from rich.text import Text

            # Cells hold stored text ("[result of call_1]"): plain Text, never rich markup.
            table = Table(
                title=Text(title) if title else None, show_header=show_header, title_justify="left"
            )
            for index, column in enumerate(columns):
                table.add_column(
                    column,
                    justify="right" if index and _numeric(rows, index) else "left",
                    overflow="fold",
                )
            for row in rows:
                table.add_row(*(Text(_cell(v)) for v in row))
            Console(file=self.out, soft_wrap=False).print(table)
            return
        if title:
            self.out.write(f"{title}\n")
        cells = [[_cell(v) for v in row] for row in rows]
        if show_header:
            cells.insert(0, list(columns))
        if not cells:
            return
        widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(columns))]
        for row in cells:
            line = "  ".join(
                cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)
            )
            self.out.write(line.rstrip() + "\n")

    def text(self, text: str) -> None:
        """Write one line of data."""
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """A remark for a person (stderr), never part of the data on stdout."""
        if not self.json_mode:
            self.err.write(text + "\n")

    @contextlib.contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        """A progress bar on stderr in a terminal; yields ``advance()``."""
        if self.json_mode or not _isatty(self.err):
            yield lambda: None
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=self.err),
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda: bar.advance(task)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _numeric(rows: Sequence[Sequence[Any]], index: int) -> bool:
    return bool(rows) and all(
        isinstance(row[index], int | float) or row[index] is None
        for row in rows
        if index < len(row)
    )
