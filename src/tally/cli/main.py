"""``tally``: read counters from the command line.

It reads the same environment variables as the Lambda function (``TALLY_COUNTERS_TABLE``,
``TALLY_MARKERS_TABLE``) and boto3's own (``AWS_ENDPOINT_URL`` for local endpoints, ``AWS_REGION``,
credentials), so pointing it at DynamoDB Local or a deployed stack is a matter of environment.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import boto3
import click
import msgspec
from rich.console import Console
from rich.table import Table

from tally.config import Settings
from tally.errors import TallyError
from tally.runtime import CLIENT_CONFIG
from tally.store.dynamodb import DynamoDBCounterStore

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

_JSON = msgspec.json.Encoder(decimal_format="number")


def counters_json(counters: Mapping[str, Decimal]) -> bytes:
    """Exactly a JSON object of counter name to value, numbers written exactly (never via float)."""
    return _JSON.encode(dict(sorted(counters.items())))


def _store() -> DynamoDBCounterStore:
    settings = Settings.from_env(os.environ, require_dlq=False)
    client = boto3.session.Session().client("dynamodb", config=CLIENT_CONFIG)
    return DynamoDBCounterStore(client, settings.counters_table, settings.markers_table, settings.marker_ttl_seconds)


@click.group()
@click.version_option(package_name="tally")
def cli() -> None:
    """tally: exactly-once counters from event streams on AWS."""


@cli.command()
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print exactly a JSON object of counter name to value.")
def get(key: str, as_json: bool) -> None:
    """Print the all-time counters of KEY (a strongly consistent read)."""
    try:
        counters = _store().read_counters(key)
    except TallyError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        sys.stdout.buffer.write(counters_json(counters) + b"\n")
        return
    table = Table(title=f"counters of {key!r}")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for name, value in sorted(counters.items()):
        table.add_row(name, str(value))
    console = Console()
    if counters:
        console.print(table)
    else:
        console.print(f"no counters for {key!r} yet")


if __name__ == "__main__":  # pragma: no cover
    cli()
