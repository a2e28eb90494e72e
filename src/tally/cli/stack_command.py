"""``tally stack NAME``: what a deployed tally stack is made of, and the variables that point ``tally`` at it."""

from __future__ import annotations

import shlex
import sys

import click
import msgspec
from rich.console import Console
from rich.table import Table

from tally.cli.locate import OUTPUT_VARIABLES, PARAMETER_VARIABLES, StackDescription, describe


@click.command("stack")
@click.argument("name")
@click.option("--env", "as_env", is_flag=True, help='Print `export` lines: eval "$(tally stack NAME --env)".')
@click.option("--json", "as_json", is_flag=True, help="Print the stack's Outputs as a JSON object.")
def stack(name: str, as_env: bool, as_json: bool) -> None:
    """Show stack NAME's resources (its Outputs) and the environment variables tally reads them from."""
    stack = describe(name)
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(dict(sorted(stack.outputs.items()))) + b"\n")
        return
    if as_env:
        click.echo(export_lines(stack), nl=False)
        return
    table = Table(title=f"stack {name}")
    table.add_column("output / parameter")
    table.add_column("value")
    table.add_column("variable")
    for key, value in sorted(stack.outputs.items()):
        table.add_row(key, value, OUTPUT_VARIABLES.get(key, ""))
    for key, variable in PARAMETER_VARIABLES.items():
        if key in stack.parameters:
            table.add_row(f"parameter {key}", stack.parameters[key], variable)
    console = Console()
    console.print(table)
    console.print(
        f'point tally at it: eval "$(tally stack {shlex.quote(name)} --env)"  (or --stack {name} on each command)'
    )


def export_lines(stack: StackDescription) -> str:
    """Shell ``export`` lines, values quoted, for the variables the stack provides."""
    lines = [f"export {variable}={shlex.quote(value)}" for variable, value in sorted(stack.variables().items())]
    return "\n".join(lines) + "\n"
