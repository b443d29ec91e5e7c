"""Every listing's table, laid out for the terminal it is printed on, and its `--wide` and `--output` options.

The rule, so that a reader can predict what they see: columns that hold what identifies a row (id, name,
status, progress) are essential and are never dropped nor cut. A free-text column (a message, a name)
gives up width first, down to FREE_TEXT_MIN characters, its text ending in "…"; a reason gives up width the
same way but wraps onto further lines instead, since its end often names the cause. If the table is still
wider than the terminal, the least important columns are dropped, one at a time, until it fits. `--wide`
shows every column whole, however wide the lines get; `--output json` prints the API's answer instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Literal, TypeVar

import click
from rich.cells import cell_len
from rich.segment import Segments
from rich.table import Table

from app.cli.render import console

if TYPE_CHECKING:
    from pydantic import BaseModel

ESSENTIAL = 0
FREE_TEXT_MIN = 12
# A table's edges, and each column's two spaces of padding and the line to its right.
EDGE_WIDTH, COLUMN_CHROME = 1, 3


@dataclass(frozen=True)
class Column:
    header: str
    rank: int = ESSENTIAL  # ESSENTIAL: never dropped; the highest rank is dropped first
    free_text: bool = False  # shortened with "…" before any column is dropped; any other is never cut
    justify: Literal["left", "right"] = "left"
    wraps: bool = False  # free text that wraps onto more lines rather than being shortened
    least: int = FREE_TEXT_MIN  # free text or wrapping: given up width down to this many columns at most


def natural_widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [
        max([cell_len(column.header), *(cell_len(row[i]) for row in rows)])
        for i, column in enumerate(columns)
    ]


def _needed(widths: dict[int, int]) -> int:
    return sum(widths.values()) + COLUMN_CHROME * len(widths) + EDGE_WIDTH


def layout(columns: Sequence[Column], natural: Sequence[int], width: int) -> dict[int, int]:
    """Column index -> the width its cells get, for the columns shown in a terminal `width` wide."""
    least = {
        i: min(natural[i], column.least) if column.free_text or column.wraps else natural[i]
        for i, column in enumerate(columns)
    }
    droppable = sorted(
        (i for i, c in enumerate(columns) if c.rank != ESSENTIAL), key=lambda i: columns[i].rank
    )
    while _needed(least) > width and droppable:
        del least[droppable.pop()]
    spare = width - _needed(least)
    free = sorted((i for i in least if columns[i].free_text or columns[i].wraps), key=lambda i: natural[i])
    shown = dict(least)
    # Shares of the spare width, the narrowest free-text column first, so that one needing less than its
    # share leaves the rest to the others.
    for count, i in zip(range(len(free), 0, -1), free, strict=True):
        grown = min(natural[i], least[i] + max(spare, 0) // count)
        spare -= grown - least[i]
        shown[i] = grown
    return shown


def _table(columns: Sequence[Column], rows: Sequence[Sequence[str]], widths: dict[int, int]) -> Table:
    table = Table()
    for i in sorted(widths):
        # Only a free-text column is ever narrower than its cells (layout's rule): they end in "…", or wrap.
        column = columns[i]
        table.add_column(
            column.header,
            width=widths[i],
            no_wrap=not column.wraps,
            overflow="fold" if column.wraps else "ellipsis",
            justify=column.justify,
        )
    for row in rows:
        table.add_row(*(row[i] for i in sorted(widths)))
    return table


def _one_line(columns: Sequence[Column], row: Sequence[str]) -> list[str]:
    """Free text (a worker's message) may hold line breaks; a row keeps to one line all the same."""
    return [
        " ".join(cell.split()) if column.free_text or column.wraps else cell
        for column, cell in zip(columns, row, strict=True)
    ]


def _between_words(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[Column]:
    """A wrapping column is never narrower than its longest word, so that it wraps between words only."""
    return [
        replace(column, least=max([column.least, *(cell_len(w) for row in rows for w in row[i].split())]))
        if column.wraps
        else column
        for i, column in enumerate(columns)
    ]


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], wide: bool = False) -> None:
    rows = [_one_line(columns, row) for row in rows]
    columns = _between_words(columns, rows)
    natural = natural_widths(columns, rows)
    widths = dict(enumerate(natural)) if wide else layout(columns, natural, console.width)
    table = _table(columns, rows, widths)
    # Rendered at its own width and printed uncropped: lines wider than the terminal (--wide, or essential
    # columns that need more) wrap in the terminal rather than lose their ends.
    options = console.options.update_width(_needed(widths))
    console.print(Segments(console.render(table, options)), crop=False)


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


def print_json(answer: BaseModel) -> None:
    """The API's answer as it sent it, alone on stdout, for scripts (jq)."""
    click.echo(answer.model_dump_json(indent=2))


def table_wanted(answer: BaseModel, output: Output, empty: str | None = None) -> bool:
    """Whether the caller goes on to print its text (a table, a job's summary): `--output json` prints the
    API's answer instead, and a listing with no rows prints `empty`, when given, instead."""
    if output is Output.JSON:
        print_json(answer)
        return False
    if empty is not None and not getattr(answer, "data", True):
        console.print(empty)
        return False
    return True


def no_json_when_following(follow: bool, output: Output) -> None:
    if follow and output is Output.JSON:
        raise click.UsageError("--follow prints progress as it comes, not JSON; leave out one of them")


Command = TypeVar("Command", bound=Callable[..., object])


def output_option(command: Command) -> Command:
    """`--output`, passed as `output`: every command that shows one of the API's answers has it."""
    return click.option(
        "--output",
        type=click.Choice([o.value for o in Output]),
        default=Output.TABLE.value,
        show_default=True,
        callback=lambda _ctx, _param, value: Output(value),
        help="json: the API's answer as JSON, alone on stdout, for scripts",
    )(command)


def listing(command: Command) -> Command:
    """A listing's `--wide` and `--output` options, passed as `wide` and `output`."""
    wide = click.option("--wide", is_flag=True, help="every column whole, however wide the terminal")
    return wide(output_option(command))
