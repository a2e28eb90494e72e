"""``tally plan``: the template parameters and the bill for a traffic description, before deploying.

The model is ``tally.cost.model`` (pure); this command only reads the options, gives the model the
store's own page encoding (so a journal page is billed at the size the store would write), and prints a
table or, with ``--json``, the ``Bill.as_json`` document. No AWS call is made.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from tally.cost.model import DEFAULT_TRANSACTION_MS, Bill, Latencies, Traffic, price, recommend
from tally.store.schema import encode_page

if TYPE_CHECKING:
    from tally.core.aggregate import Totals


def _page_bytes(increments: Totals) -> int:
    """A journal page's data as the store encodes it."""
    return len(encode_page(increments))


@click.command()
@click.option("--events-per-second", "rate", type=click.FloatRange(min=0, min_open=True), required=True)
@click.option("--keys", type=click.IntRange(min=1), required=True, help="Distinct counter keys.")
@click.option(
    "--skew", type=click.FloatRange(min=0), default=1.1, show_default=True, help="Zipf exponent (0: uniform)."
)
@click.option(
    "--events-per-message",
    type=click.IntRange(1, 10_000),
    default=1,
    show_default=True,
    help="1 for single events; the producer library packs many.",
)
@click.option("--counters", type=click.IntRange(1, 100), default=2, show_default=True, help="Counter names per event.")
@click.option("--key-bytes", type=click.IntRange(1, 2000), default=17, show_default=True)
@click.option("--windows", default="hour,day", show_default=True, help="Time windows counted ('' for none).")
@click.option("--resend-rate", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True)
@click.option("--source", type=click.Choice(["SQS", "Kinesis"]), default="SQS", show_default=True)
@click.option(
    "--latency-budget", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True, help="Seconds."
)
@click.option("--memory", "memory_mb", type=click.IntRange(128, 10_240), default=512, show_default=True)
@click.option("--batch-size", type=click.IntRange(1, 10_000), help="Price this batch size instead of choosing one.")
@click.option("--transaction-ms", type=click.FloatRange(min=0), default=DEFAULT_TRANSACTION_MS, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the prediction as JSON.")
def plan(
    *,
    rate: float,
    keys: int,
    skew: float,
    events_per_message: int,
    counters: int,
    key_bytes: int,
    windows: str,
    resend_rate: float,
    source: str,
    latency_budget: float,
    memory_mb: int,
    batch_size: int | None,
    transaction_ms: float,
    as_json: bool,
) -> None:
    """Recommend template parameters for a traffic description and predict the bill."""
    try:
        traffic = Traffic(
            events_per_second=rate,
            keys=keys,
            zipf_s=skew,
            events_per_message=events_per_message,
            counters=counters,
            key_bytes=key_bytes,
            windows=tuple(name.strip() for name in windows.split(",") if name.strip()),
            resend_rate=resend_rate,
            source=source,
            latency_budget_s=latency_budget,
            memory_mb=memory_mb,
        )
        latencies = Latencies(transact_write_ms=transaction_ms)
        if batch_size is None:
            bill = recommend(traffic, latencies=latencies, page_bytes=_page_bytes)
        else:
            bill = price(traffic, batch_size, latencies=latencies, page_bytes=_page_bytes)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        sys.stdout.write(json.dumps(bill.as_json(), indent=2) + "\n")
        return
    _print(bill)


def _print(bill: Bill) -> None:
    console = Console()
    parameters = Table(title="template parameters (sam deploy --parameter-overrides)")
    parameters.add_column("parameter")
    parameters.add_column("value", justify="right")
    for name, value in bill.parameters.as_template().items():
        parameters.add_row(name, value or "''")
    if bill.parameters.hot_keys:
        parameters.add_row("HotKeys", f"your {bill.parameters.hot_keys} busiest keys ={bill.parameters.hot_key_shards}")
    console.print(parameters)
    figures = Table(title="predicted")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    rows = [
        ("write units / event", f"{bill.units.write_units:.4f}"),
        ("read units / event", f"{bill.units.read_units:.4f}"),
        ("records / batch", f"{bill.records_per_batch:,.0f}"),
        ("transactions / batch", f"{bill.units.transactions_per_batch:.1f}"),
        ("handler duration / batch", f"{bill.handler_s * 1000:,.0f} ms"),
        ("end-to-end latency", f"{bill.latency_s:,.1f} s"),
        ("events / month", f"{bill.events_per_month:,.0f}"),
        ("DynamoDB $ / month", f"{bill.dynamodb_usd_month:,.2f}"),
        ("Lambda GB-s / month", f"{bill.lambda_gb_s_month:,.0f}"),
        ("Lambda $ / month", f"{bill.lambda_usd_month:,.2f}"),
        ("total $ / month", f"{bill.usd_month:,.2f}"),
        ("$ / million events", f"{bill.usd_per_million_events:.4f}"),
    ]
    for name, value in rows:
        figures.add_row(name, value)
    console.print(figures)
    for assumption in bill.assumptions:
        console.print(f"assumed: {assumption}")
