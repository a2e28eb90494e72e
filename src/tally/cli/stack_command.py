"""``tally stack NAME``: what a deployed tally stack is made of, and the variables that point ``tally`` at it."""

from __future__ import annotations

import shlex

import click

from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import OUTPUT_VARIABLES, PARAMETER_VARIABLES, describe, export_lines


@click.command("stack")
@click.argument("name")
@click.option("--env", "as_env", is_flag=True, help='Print `export` lines: eval "$(tally stack NAME --env)".')
@json_option("Print the stack's Outputs as a JSON object.")
def stack(name: str, as_env: bool, as_json: bool) -> None:
    """Show stack NAME's resources (its Outputs) and the environment variables tally reads them from."""
    described = describe(name)
    if as_json:
        print_json(dict(sorted(described.outputs.items())))
        return
    if as_env:
        click.echo("\n".join(export_lines(described.name, described.variables())))
        return
    rows = table(f"stack {name}", ["output / parameter", "value", "variable"])
    for key, value in sorted(described.outputs.items()):
        rows.add_row(key, value, OUTPUT_VARIABLES.get(key, ""))
    for key, variable in PARAMETER_VARIABLES.items():
        if key in described.parameters:
            rows.add_row(f"parameter {key}", described.parameters[key], variable)
    out = console()
    out.print(rows)
    out.print(
        f'point tally at it: eval "$(tally stack {shlex.quote(name)} --env)"  (or --stack {name} on each command)'
    )
