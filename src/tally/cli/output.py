"""How every command prints: rich tables for people, JSON for scripts, the same way everywhere.

A table printed to a terminal fits its width; printed to a pipe or a file it is never cut or folded (rich
otherwise assumes 80 columns there, and the ARNs and queue URLs a user wants to copy were cut). ``$COLUMNS``
still sets a width when given. JSON numbers are exact: a ``Decimal`` as its digits, a float rounded to
``FLOAT_DIGITS`` significant digits (a figure computed in floats carries binary noise in its last digits).

rich is imported when something is printed, not when a command module is imported (``tally --help``).
"""

from __future__ import annotations

import os
import sys
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any, Final

import click
import msgspec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console
    from rich.table import Table

FLOAT_DIGITS: Final = 10
"""Significant digits a float keeps in JSON: more than any figure of a model here means, fewer than its noise."""
_UNCUT_WIDTH: Final = 100_000
_FLOAT_CONTEXT: Final = Context(prec=FLOAT_DIGITS)
_WIDE_CONTEXT: Final = Context(prec=38)
_TENTH: Final = Decimal("0.1")
_JSON: Final = msgspec.json.Encoder(decimal_format="number")


def console(*, stderr: bool = False) -> Console:
    """A rich console: the terminal's width, or lines never cut when the output is not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if os.environ.get("COLUMNS") or stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=_UNCUT_WIDTH)


def table(title: str, columns: Sequence[str], *, right: Sequence[str] = (), **options: Any) -> Table:
    """A table with ``columns`` (those in ``right`` right-aligned, for numbers)."""
    from rich.table import Table

    rows = Table(title=title, **options)
    for column in columns:
        rows.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return rows


def json_option(help_text: str = "Print JSON instead of a table.") -> Callable[[Callable[..., Any]], Any]:
    """``--json``, the same flag on every command."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def exact(value: Any) -> Any:
    """``value`` with every float as a ``Decimal`` of ``FLOAT_DIGITS`` significant digits, written with a
    decimal point when whole (ints, Decimals, strings and the rest unchanged), through dicts, lists, tuples."""
    if isinstance(value, float):
        rounded = _FLOAT_CONTEXT.create_decimal_from_float(value).normalize(_FLOAT_CONTEXT)
        if rounded.is_finite() and rounded == rounded.to_integral_value():  # 60.0, not 6E+1: still a float
            return rounded.quantize(_TENTH, context=_WIDE_CONTEXT)
        return rounded
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [exact(item) for item in value]
    return value


def json_bytes(document: Any) -> bytes:
    """Compact JSON of ``document`` (floats through ``exact``, Decimals as numbers), with a newline."""
    return _JSON.encode(exact(document)) + b"\n"


def print_json(document: Any) -> None:
    sys.stdout.buffer.write(json_bytes(document))
    sys.stdout.buffer.flush()
