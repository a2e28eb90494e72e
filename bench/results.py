"""How an experiment under bench/ reports: one table for people, one JSON document for scripts.

An experiment measures rows (one mapping per configuration, with an ``exact`` verdict where it checks counts)
and hands them to ``report`` with the columns to show: the table goes to the terminal, and with
``--json-out FILE`` the same rows go to ``FILE`` as ``{"experiment", <parameters>..., "rows"}``. The exit status
is 0 only when every row that says whether it counted exactly did.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

Row = dict[str, Any]
Column = tuple[str, "Callable[[Row], str]"]
"""A column: its header, and how a row shows in it (the first column is left-aligned, the others right)."""


def load_options(description: str, *, events: int = 5_000, keys: int = 50) -> argparse.ArgumentParser:
    """The options of the experiments that run one load shape: its size, and where to write the rows."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--events", type=int, default=events)
    parser.add_argument("--keys", type=int, default=keys)
    parser.add_argument("--json-out", type=Path, help="also write the rows (and the run's size) as JSON here")
    return parser


def field(name: str, spec: str = "") -> Column:
    """The column showing ``row[name]`` formatted with ``spec`` (``",.0f"``, ``".4f"``...)."""
    return name.replace("_", " "), lambda row: format(row[name], spec) if spec else str(row[name])


def beside(name: str, base: Callable[[Row], float], header: str = "") -> Column:
    """``row[name]`` to four places and its ratio to ``base(row)``: what a pattern costs beside plain sums."""
    return header or name.replace("_", " "), lambda row: f"{row[name]:.4f} ({row[name] / base(row):.2f}x)"


EXACT: Column = ("exact", lambda row: "yes" if row["exact"] else "NO")


def table(title: str, columns: Sequence[Column], rows: Sequence[Row]) -> Table:
    out = Table(title=title)
    for index, (header, _) in enumerate(columns):
        out.add_column(header, justify="left" if index == 0 else "right")
    for row in rows:
        out.add_row(*(show(row) for _, show in columns))
    return out


def report(
    experiment: str,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Row],
    parameters: Mapping[str, Any],
    *,
    json_out: Path | None = None,
) -> int:
    """Print the rows, write them to ``json_out`` if given, and return the exit status."""
    Console().print(table(title, columns, rows))
    if json_out is not None:
        write_rows(json_out, experiment, rows, parameters)
    return 0 if all(row.get("exact", True) for row in rows) else 1


def write_rows(path: Path, experiment: str, rows: Sequence[Row], parameters: Mapping[str, Any]) -> None:
    """The JSON document of a run: ``{"experiment", <parameters>..., "rows"}``."""
    path.write_text(json.dumps({"experiment": experiment, **parameters, "rows": list(rows)}, indent=2) + "\n")
