"""Tables on stdout that stay legible in a narrow terminal and in a file.

Rich sizes a table to the console: 80 columns when stdout is not a terminal, ``$COLUMNS`` or the terminal's width
otherwise, and a table wider than that gets its cells cut (``…``) or words folded mid-name. Here:

- in a file or a pipe (not a terminal), a table is as wide as its content (``$COLUMNS`` when set), drawn in
  Markdown's ``| a | b |`` rather than box-drawing characters, so nothing is cut and it pastes into an issue;
- a table wider than the width (a narrow terminal, ``COLUMNS=60``) wraps its cells between words, each column at
  least as wide as its longest word; when even those do not fit, it is printed as one record per row instead
  (``name``, then ``column  value`` lines), values wrapped, never cut.

Every cell and title is data, never Rich markup: a ``str`` becomes a plain :class:`Text` with its control
characters and escape sequences shown escaped (``node_text.printable``), so a host name ``[/x]`` or a
``/version`` holding ``\x1b[31m`` is printed as those characters. A cell our code styles is a ``Text`` (``styled``);
its characters are escaped the same way.
"""

from __future__ import annotations

import io
import os

from rich import box
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from vllm_fleet.trust.node_text import printable

UNBOUNDED = 100_000
"""The width a table is measured at for its natural size."""


def styled(text: str, style: str) -> Text:
    """A cell in ``style`` whose text is data (escaped, never markup)."""
    return Text(printable(text), style=style)


def data(cell: RenderableType | None) -> RenderableType | None:
    """``cell`` as data: a ``str`` as plain escaped Text, a Text with its characters escaped; other renderables
    (built by our code) as they are."""
    if isinstance(cell, str):
        return Text(printable(cell))
    if isinstance(cell, Text) and printable(cell.plain) != cell.plain:
        return Text(printable(cell.plain), style=cell.style, justify=cell.justify, overflow=cell.overflow)
    return cell


class DataTable(Table):
    """A Table whose every cell is data (see :func:`data`)."""

    def add_row(self, *renderables: RenderableType | None, **kwargs: object) -> None:
        super().add_row(*(data(cell) for cell in renderables), **kwargs)  # type: ignore[arg-type]


def table(*headers: str, title: str | None = None, right: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap (and fold a word longer than the column) instead of being cut, every cell and
    the title data, never markup; ``right``: the headers of right-justified (numeric) columns."""
    columns = [Column(h, overflow="fold", justify="right" if h in right else "left") for h in headers]
    return DataTable(*columns, title=None if title is None else Text(printable(title)))


def _as_data(tbl: Table) -> None:
    """Every cell and the title of ``tbl`` as data, whoever built it (a plain Table included)."""
    if isinstance(tbl.title, str):
        tbl.title = Text(printable(tbl.title))
    for column in tbl.columns:
        column._cells = [data(cell) or "" for cell in column._cells]


def _width(console: Console) -> int:
    """``$COLUMNS`` when set (read now: a console reads it once, when made), else the terminal's width, else
    (a file, a pipe) unbounded."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return console.width if console.is_terminal else UNBOUNDED


def print_table(console: Console, tbl: Table, width: int | None = None) -> None:
    """Print ``tbl`` whole: as a table when its words fit the width, else one record per row. ``width``: instead of
    the console's (a report file: ``UNBOUNDED``, always a Markdown table)."""
    _as_data(tbl)
    width = width or _width(console)
    natural = Measurement.get(console, console.options.update_width(UNBOUNDED), tbl)
    fits = _fit_columns(console, tbl, natural.maximum, width)
    if console.is_terminal:
        target = Console(file=console.file, width=width, highlight=False)
        if fits:
            target.print(tbl)
        else:
            _print_records(target, tbl)
        return
    # A file: plain text, no trailing blanks, Markdown's rules for a table.
    buffer = io.StringIO()
    target = Console(file=buffer, width=min(width, natural.maximum), highlight=False, color_system=None)
    if not fits:
        _print_records(target, tbl)
    else:
        if tbl.title:
            target.print(tbl.title, overflow="fold")
        tbl.title, tbl.box = None, box.MARKDOWN
        target.print(tbl)
    lines = (line.rstrip() for line in buffer.getvalue().splitlines())
    console.file.write("".join(f"{line}\n" for line in lines if line))
    console.file.flush()


def _fit_columns(console: Console, tbl: Table, natural: int, width: int) -> bool:
    """Whether ``tbl`` fits ``width`` with every word whole; when it must wrap, each column gets a fixed width of
    at least its longest word and a share of the rest by how much it would wrap (rich's own squeezing folds
    words: it narrows the widest columns first, whatever their words)."""
    if natural <= width:
        return True
    options = console.options.update_width(UNBOUNDED)
    ranges = []
    for column in tbl.columns:
        cells = [Measurement.get(console, options, c) for c in (column.header, *column.cells)]
        ranges.append((max(m.minimum for m in cells), max(m.maximum for m in cells)))
    overhead = natural - sum(high for _, high in ranges)
    spare = width - overhead - sum(low for low, _ in ranges)
    if spare < 0:
        return False
    need = sum(high - low for low, high in ranges) or 1
    for column, (low, high) in zip(tbl.columns, ranges, strict=True):
        column.width = low + (high - low) * spare // need
    return True


def _print_records(target: Console, tbl: Table) -> None:
    """One block per row: the first cell as a heading, then each other column's header and value."""
    if tbl.title:
        target.print(tbl.title, style="bold", overflow="fold")
    headers = [str(c.header) for c in tbl.columns]
    cells: list[list[RenderableType]] = [list(c.cells) for c in tbl.columns]
    for i in range(tbl.row_count):
        target.print(cells[0][i], style="bold", overflow="fold")
        grid = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
        for header, column in zip(headers[1:], cells[1:], strict=True):
            grid.add_row(Text(header), column[i])
        target.print(Padding(grid, (0, 0, 0, 2)))
