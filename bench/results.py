"""How an experiment under bench/ reports: one table for people, one JSON document for scripts.

An experiment measures rows (one mapping per configuration, with an ``exact`` verdict where it checks counts)
and hands them to ``report`` with the columns to show: the table goes to the terminal (``--json``: the rows
go to standard output as JSON instead), and with ``--json-out FILE`` the same rows go to ``FILE`` as
``{"experiment", <parameters>..., "rows"}``. The exit status is 0 only when every row that says whether it
counted exactly did. A table is text cells (``Grid``), so the same one renders to the console and to markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tabulate import tabulate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

Row = dict[str, Any]
Column = tuple[str, "Callable[[Row], str]"]
"""A column: its header, and how a row shows in it (the first column is left-aligned, the others right)."""
Command = TypeVar("Command", bound="Callable[..., Any]")
Item = TypeVar("Item")


def load_options(description: str, *, events: int = 5_000, keys: int | None = 50) -> argparse.ArgumentParser:
    """The options of the experiments that run one load shape: its size (``keys=None``: one key, no option),
    and where to write the rows."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--events", type=int, default=events)
    if keys is not None:
        parser.add_argument("--keys", type=int, default=keys)
    parser.add_argument("--json-out", type=Path, help="also write the rows (and the run's size) as JSON here")
    return parser


def json_options(command: Command) -> Command:
    """``--json`` and ``--json-out FILE`` of an experiment that takes its options with click."""
    command = click.option(
        "--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the rows as JSON here."
    )(command)
    return click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON instead of a table.")(command)


def console(*, stderr: bool = False) -> Console:
    """The terminal; printed to a pipe or a file, wide enough that a table of many columns is not cut to 80."""
    return Console(stderr=stderr) if sys.stdout.isatty() else Console(stderr=stderr, width=200)


def field(name: str, spec: str = "", header: str = "") -> Column:
    """The column showing ``row[name]`` formatted with ``spec`` (``",.0f"``, ``".4f"``...), ``-`` if absent."""

    def show(row: Row) -> str:
        return "-" if name not in row else format(row[name], spec) if spec else str(row[name])

    return header or name.replace("_", " "), show


def beside(name: str, base: Callable[[Row], float], header: str = "") -> Column:
    """``row[name]`` to four places and its ratio to ``base(row)``: what a pattern costs beside plain sums."""
    return header or name.replace("_", " "), lambda row: f"{row[name]:.4f} ({row[name] / base(row):.2f}x)"


def pair(first: str, second: str, spec: str, header: str) -> Column:
    """``row[first] / row[second]``, each formatted with ``spec`` (``-`` for a row without them)."""
    return header, lambda row: f"{row[first]:{spec}} / {row[second]:{spec}}" if first in row else "-"


def per_operation(name: str, header: str) -> Column:
    """``row[name]``, a mapping of operation -> requests, as ``BatchGetItem 1.0, TransactWriteItems 2.0``."""
    return header, lambda row: ", ".join(f"{op} {count:.1f}" for op, count in sorted(row[name].items()))


EXACT: Column = ("exact", lambda row: "yes" if row["exact"] else "NO")


@dataclass(frozen=True, slots=True)
class Grid:
    """One table as text cells, defined once and rendered twice: markdown for the docs, rich for the console."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    numeric_from: int = 1
    """Columns from this one on are right-aligned."""

    @classmethod
    def of(
        cls, columns: Sequence[tuple[str, Callable[[Item], str]]], rows: Iterable[Item], numeric_from: int = 1
    ) -> Grid:
        """Each row shown in each column: a header and its cells defined together, so they cannot drift apart."""
        cells = [[show(row) for _, show in columns] for row in rows]
        return cls([header for header, _ in columns], cells, numeric_from)

    def _alignment(self) -> list[str]:
        return ["left" if index < self.numeric_from else "right" for index in range(len(self.header))]

    def markdown(self) -> list[str]:
        """A markdown (pipe) table; cells are written as they are, never re-read as numbers."""
        text = tabulate(
            self.rows, headers=self.header, tablefmt="pipe", colalign=self._alignment(), disable_numparse=True
        )
        return str(text).splitlines()

    def rich(self, title: str) -> Table:
        """The same table on the console; a markdown ``**bold**`` cell (a failed check) shows in red."""
        table = Table(title=title)
        for column, justify in zip(self.header, self._alignment(), strict=True):
            table.add_column(column, justify="left" if justify == "left" else "right")
        for row in self.rows:
            table.add_row(*(_console_cell(cell) for cell in row))
        return table


def _console_cell(cell: str) -> str:
    if cell.startswith("**") and cell.endswith("**") and len(cell) > 4:
        return f"[red]{escape(cell[2:-2])}[/]"
    return escape(cell)


def table(title: str, columns: Sequence[Column], rows: Sequence[Row]) -> Table:
    return Grid.of(columns, rows).rich(title)


def report(
    experiment: str,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Row],
    parameters: Mapping[str, Any],
    *,
    json_out: Path | None = None,
    as_json: bool = False,
    notes: Sequence[str] = (),
) -> int:
    """Print the rows (a table and its ``notes``, or with ``as_json`` the rows as JSON), write them to
    ``json_out`` if given, and return the exit status."""
    if as_json:
        sys.stdout.write(json.dumps(list(rows), indent=2) + "\n")
    else:
        out = console()
        out.print(table(title, columns, rows))
        for note in notes:
            out.print(note)
    if json_out is not None:
        write_rows(json_out, experiment, rows, parameters)
    return 0 if all(row.get("exact", True) for row in rows) else 1


def write_rows(path: Path, experiment: str, rows: Sequence[Row], parameters: Mapping[str, Any]) -> None:
    """The JSON document of a run: ``{"experiment", <parameters>..., "rows"}``."""
    path.write_text(json.dumps({"experiment": experiment, **parameters, "rows": list(rows)}, indent=2) + "\n")
