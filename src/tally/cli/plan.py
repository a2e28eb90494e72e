"""``tally plan``: the template parameters and the bill for a traffic description, before deploying.

The model is ``tally.cost.model`` (pure); this command only reads the options, gives the model the
store's own page encoding (so a journal page is billed at the size the store would write), and prints a
table or, with ``--json``, the ``Bill.as_json`` document with two more sections: ``floor`` (the fewest
write units per event any allowed setting reaches for this traffic, and the chosen settings' ratio to
it: the defaults and recommendations are held within 1.2 of it when the latency budget allows) and ``producer`` (the
``max_keys_per_message`` the producer library needs to pack the given events per message). No AWS call
is made.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import click
from rich.table import Table

from tally.cli.output import console as output_console
from tally.cli.output import print_json
from tally.cost.model import (
    DEFAULT_TRANSACTION_MS,
    Bill,
    Latencies,
    Traffic,
    floor,
    keys_per_message,
    price,
    recommend,
)
from tally.producer.packing import DEFAULT_MAX_KEYS_PER_MESSAGE
from tally.store.pages import encode_page

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
@click.option(
    "--numbered-ids/--random-ids",
    default=False,
    show_default=True,
    help="Whether producers number their messages (the producer library's ids): markers then share items.",
)
@click.option("--source", type=click.Choice(["SQS", "Kinesis"], case_sensitive=False), default="SQS", show_default=True)
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
    numbered_ids: bool,
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
            numbered_ids=numbered_ids,
            source=source,
            latency_budget_s=latency_budget,
            memory_mb=memory_mb,
        )
        latencies = Latencies(transact_write_ms=transaction_ms)
        if batch_size is None:
            bill = recommend(traffic, latencies=latencies, page_bytes=_page_bytes)
        else:
            bill = price(traffic, batch_size, latencies=latencies, page_bytes=_page_bytes)
        lowest = floor(traffic, latencies=latencies, page_bytes=_page_bytes)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    extra = _extra(bill, lowest)
    if as_json:
        print_json({**bill.as_json(), **extra})  # floats rounded: a model's figures, not its binary noise
        return
    _print(bill, extra)


def _extra(bill: Bill, lowest: Bill) -> dict[str, dict[str, float | int]]:
    """The floor beside the chosen settings, and the producer's key cap the events per message need."""
    keys = keys_per_message(bill.traffic)
    return {
        "floor": {
            "write_units": lowest.units.write_units,
            "ratio": bill.units.write_units / lowest.units.write_units,
            "batch_size": lowest.parameters.batch_size,
            "batching_window_seconds": lowest.parameters.batching_window_s,
            "latency_seconds": lowest.latency_s,
        },
        "producer": {
            "keys_per_message": keys,
            # 20% above the mean, so that few messages reach the cap before their events do
            "max_keys_per_message": max(DEFAULT_MAX_KEYS_PER_MESSAGE, math.ceil(1.2 * keys)),
        },
    }


def _print(bill: Bill, extra: dict[str, dict[str, float | int]]) -> None:
    console = output_console()  # never cut when piped
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
    lowest, producer = extra["floor"], extra["producer"]
    rows += [
        (
            "floor: write units / event",
            f"{lowest['write_units']:.4f} (BatchSize {lowest['batch_size']:,}, window "
            f"{lowest['batching_window_seconds']} s, latency {lowest['latency_seconds']:,.1f} s)",
        ),
        ("write units / floor", f"{lowest['ratio']:.2f}"),
    ]
    for name, value in rows:
        figures.add_row(name, value)
    console.print(figures)
    if producer["max_keys_per_message"] > DEFAULT_MAX_KEYS_PER_MESSAGE:
        console.print(
            f"producer: {bill.traffic.events_per_message:,} events per message span about "
            f"{producer['keys_per_message']:,.0f} keys: SqsPublisher/KinesisPublisher(max_keys_per_message="
            f"{producer['max_keys_per_message']}) (the default {DEFAULT_MAX_KEYS_PER_MESSAGE} closes a message earlier)"
        )
    for assumption in bill.assumptions:
        console.print(f"assumed: {assumption}")
