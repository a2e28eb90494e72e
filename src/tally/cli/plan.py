"""``tally plan``: the template parameters and the bill for a traffic description, before deploying.

The model is ``tally.cost.model`` (pure); this command only reads the options, gives the model the
store's own page encoding (so a journal page is billed at the size the store would write), and prints a
table or, with ``--json``, the ``Bill.as_json`` document with three more sections: ``levers`` (what
numbered ids, packed messages and the floor's batch size and window would save on the same traffic),
``floor`` (the fewest
write units per event any allowed setting reaches for this traffic, and the chosen settings' ratio to
it: the defaults and recommendations are held within 1.2 of it when the latency budget allows) and ``producer`` (the
``max_keys_per_message`` the producer library needs to pack the given events per message). No AWS call
is made.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from tally.cli.output import console as output_console
from tally.cli.output import print_json
from tally.cost.model import (
    PROXY_TO_MODEL_DURATION,
    Bill,
    Latencies,
    Prices,
    Traffic,
    floor,
    keys_per_message,
    price,
    published_latencies,
    recommend,
    view_read_units,
)
from tally.producer.packing import DEFAULT_MAX_KEYS_PER_MESSAGE
from tally.store.pages import page_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


PACKED_EVENTS = 100
"""Events per message the packing lever prices (the producer library packs up to 10,000)."""


@click.command()
@click.option(
    "--events-per-second", "rate", type=click.FloatRange(min=0, min_open=True), required=True, help="Average rate."
)
@click.option("--keys", type=click.IntRange(min=1), required=True, help="Distinct counter keys.")
@click.option(
    "--skew", type=click.FloatRange(min=0), default=1.1, show_default=True, help="Zipf exponent (0: uniform)."
)
@click.option(
    "--events-per-message",
    type=click.IntRange(1, 10_000),
    default=1,
    show_default=True,
    help="1 for single events (tally publish KEY, SqsPublisher.publish); the producer library packs many.",
)
@click.option("--counters", type=click.IntRange(1, 100), default=2, show_default=True, help="Counter names per event.")
@click.option(
    "--key-bytes", type=click.IntRange(1, 2000), default=17, show_default=True, help="Bytes of a counter key (UTF-8)."
)
@click.option("--windows", default="hour,day", show_default=True, help="Time windows counted ('' for none).")
@click.option(
    "--resend-rate",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    show_default=True,
    help="Share of messages producers send again with the same id (retries).",
)
@click.option(
    "--numbered-ids/--random-ids",
    default=True,
    show_default=True,
    help="Numbered: the producer library's ids (<session>.<seq>), whose markers share items. Random: ids "
    "you make yourself (a UUID per message), one marker item each.",
)
@click.option(
    "--source",
    type=click.Choice(["SQS", "Kinesis"], case_sensitive=False),
    default="SQS",
    show_default=True,
    help="The event source.",
)
@click.option(
    "--latency-budget",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds an event may take from publish to counted: the cheapest batch within it is chosen.",
)
@click.option(
    "--memory",
    "memory_mb",
    type=click.IntRange(128, 10_240),
    default=512,
    show_default=True,
    help="The function's MemorySize in MB (its CPU share).",
)
@click.option(
    "--archive/--no-archive",
    default=True,
    show_default=True,
    help="Whether every counted message is archived to S3 (ArchiveEnabled): one PutObject per batch, and storage.",
)
@click.option(
    "--fenced-apply/--no-fenced-apply",
    default=True,
    show_default=True,
    help="Whether journal batches are applied by one plain write per key, 1 write unit per KB (FencedApply), or "
    "by chunk transactions, 2 per KB.",
)
@click.option("--batch-size", type=click.IntRange(1, 10_000), help="Price this batch size instead of choosing one.")
@click.option(
    "--transaction-ms",
    type=click.FloatRange(min=0),
    default=published_latencies().transact_write_ms,
    show_default=True,
    help="Latency of a 100-action TransactWriteItems (default: the published figure the latency proxy uses).",
)
@click.option(
    "--view",
    "views",
    type=click.IntRange(min=1),
    multiple=True,
    help="A declared view (CounterViews) with this many values per key: repeat for each view (customers, routes "
    "and their pairs: --view 50 --view 8 --view 400). Prices the fan-out and a group-by read of each.",
)
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
    archive: bool,
    fenced_apply: bool,
    batch_size: int | None,
    transaction_ms: float,
    views: tuple[int, ...],
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
            archive=archive,
            fenced_apply=fenced_apply,
            views=views,
        )
        latencies = dataclasses.replace(published_latencies(), transact_write_ms=transaction_ms)

        def bill_of(traffic: Traffic) -> Bill:
            if batch_size is None:
                return recommend(traffic, latencies=latencies, page_bytes=page_bytes)
            return price(traffic, batch_size, latencies=latencies, page_bytes=page_bytes)

        bill = bill_of(traffic)
        lowest = floor(traffic, latencies=latencies, page_bytes=page_bytes)
        levers = _levers(traffic, bill, lowest, bill_of)
        fan_out = _views(bill, latencies) if views else None
    except (ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    extra: dict[str, object] = {**_extra(bill, lowest), "levers": levers, "duration": _duration(bill)}
    if fan_out is not None:
        extra["views"] = fan_out
    if as_json:
        print_json({**bill.as_json(), **extra})  # floats rounded: a model's figures, not its binary noise
        return
    _print(bill, extra)


def _levers(traffic: Traffic, bill: Bill, lowest: Bill, bill_of: Callable[[Traffic], Bill]) -> list[dict[str, object]]:
    """What each lever would save on the same traffic, priced the same way (dollars a month, all in)."""
    levers: list[dict[str, object]] = []

    def lever(name: str, how: str, other: Bill) -> None:
        saved = bill.usd_month - other.usd_month
        levers.append(
            {
                "lever": name,
                "how": how,
                "usd_month": other.usd_month,
                "saves_usd_month": saved,
                "saves_share": saved / bill.usd_month if bill.usd_month else 0.0,
                "latency_seconds": other.latency_s,
            }
        )

    if not traffic.numbered_ids:
        lever(
            "numbered ids",
            "publish with the producer library (SqsPublisher/KinesisPublisher number their ids)",
            bill_of(dataclasses.replace(traffic, numbered_ids=True)),
        )
    if traffic.events_per_message < PACKED_EVENTS:
        lever(
            f"{PACKED_EVENTS} events per message",
            "publish_many/tally publish --pack: many events in one message, one marker for all",
            bill_of(dataclasses.replace(traffic, events_per_message=PACKED_EVENTS)),
        )
    lever(
        "batch size and window",
        f"BatchSize {lowest.parameters.batch_size:,}, BatchingWindowSeconds {lowest.parameters.batching_window_s} "
        "(the floor: the fewest writes any setting reaches, at its latency)",
        lowest,
    )
    return levers


def _views(bill: Bill, latencies: Latencies) -> dict[str, object]:
    """What the views cost: the same traffic without them at the same settings, and a group-by read of each."""
    traffic = bill.traffic
    alone = price(
        dataclasses.replace(traffic, views=()),
        bill.parameters.batch_size,
        latencies=latencies,
        page_bytes=page_bytes,
        window_s=bill.parameters.batching_window_s,
    )
    prices = Prices()
    added = bill.units.write_units - alone.units.write_units
    return {
        "write_units_without_views": alone.units.write_units,
        "write_units_added": added,
        "usd_month_without_views": alone.usd_month,
        "usd_month_added": bill.usd_month - alone.usd_month,
        "each": [
            {
                "values": values,
                "group_read_units": view_read_units(traffic, values),
                "usd_per_million_group_reads": view_read_units(traffic, values) * prices.read_unit * 1e6,
            }
            for values in traffic.views
        ],
    }


def _duration(bill: Bill) -> dict[str, float]:
    """The handler duration as modeled, and the range the latency proxy measured around it."""
    low, high = PROXY_TO_MODEL_DURATION
    return {
        "handler_seconds": bill.handler_s,
        "proxy_low_seconds": bill.handler_s * low,
        "proxy_high_seconds": bill.handler_s * high,
    }


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


_EMPTY_VALUE = '""'
"""How ``--parameter-overrides`` writes an empty value (``Windows=""``: no windows)."""


def overrides_line(parameters: Mapping[str, str]) -> str:
    """``sam deploy --parameter-overrides '...'``, as the SAM CLI reads it, to paste."""
    pairs = " ".join(f"{name}={value or _EMPTY_VALUE}" for name, value in parameters.items())
    return f"sam deploy --parameter-overrides {shlex.quote(pairs)}"


def _print(bill: Bill, extra: dict[str, Any]) -> None:
    console = output_console()  # never cut when piped
    parameters = Table(title="template parameters (sam deploy --parameter-overrides)")
    parameters.add_column("parameter")
    parameters.add_column("value", justify="right")
    for name, value in bill.parameters.as_template().items():
        parameters.add_row(name, value or "''")
    if bill.parameters.hot_keys:
        parameters.add_row("HotKeys", f"your {bill.parameters.hot_keys} busiest keys ={bill.parameters.hot_key_shards}")
    console.print(parameters)
    console.print(overrides_line(bill.parameters.as_template()), soft_wrap=True)  # copied whole: never folded
    if bill.parameters.hot_keys:
        console.print(
            f"and HotKeys=KEY={bill.parameters.hot_key_shards},... for your {bill.parameters.hot_keys} busiest keys"
            " (the line replaces samconfig.toml's parameter_overrides: add what you set there, AlarmEmail say)"
        )
    else:
        console.print("(it replaces samconfig.toml's parameter_overrides: add what you set there, AlarmEmail say)")
    figures = Table(title="predicted")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    rows = [
        ("write units / event", f"{bill.units.write_units:.4f}"),
        ("read units / event", f"{bill.units.read_units:.4f}"),
        ("records / batch", f"{bill.records_per_batch:,.0f}"),
        ("transactions / batch", f"{bill.units.transactions_per_batch:.1f}"),
        (
            "journal key writes",
            f"fenced: {bill.units.single_writes_per_batch:,.1f} plain writes / batch, 1 write unit per KB"
            if bill.traffic.fenced_apply
            else "chunked (FencedApply=false): in transactions, 2 write units per KB",
        ),
        ("handler duration / batch", f"{bill.handler_s * 1000:,.0f} ms (modeled; see below)"),
        ("end-to-end latency", f"{bill.latency_s:,.1f} s (window or fill, plus the modeled handler)"),
        ("events / month", f"{bill.events_per_month:,.0f}"),
        ("DynamoDB $ / month", f"{bill.dynamodb_usd_month:,.2f}"),
        ("Lambda GB-s / month", f"{bill.lambda_gb_s_month:,.0f}"),
        ("Lambda $ / month", f"{bill.lambda_usd_month:,.2f}"),
        (
            "archive $ / month",
            f"{bill.archive_usd_month:,.2f} ({bill.archive_puts_month:,.0f} PUTs, {bill.archive_gb_month:,.2f} GB)"
            if bill.traffic.archive
            else "off",
        ),
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
    fan_out = extra.get("views")
    if fan_out is not None:
        rows += [
            (
                "views: write units / event",
                f"+{fan_out['write_units_added']:.4f} ({fan_out['write_units_without_views']:.4f} without them)",
            ),
            ("views: $ / month", f"+{fan_out['usd_month_added']:,.2f}"),
        ]
        rows += [
            (
                f"group-by read, {each['values']:,} values",
                f"{each['group_read_units']:,.1f} read units (${each['usd_per_million_group_reads']:,.2f} per million)",
            )
            for each in fan_out["each"]
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
    ids = "numbered (the producer library's)" if bill.traffic.numbered_ids else "random (one marker item each)"
    console.print(f"ids: {ids}; {bill.traffic.events_per_message:,} event(s) per message")
    levers = Table(title="levers: the same traffic, one thing changed")
    for column in ("lever", "$ / month", "saves", "latency"):
        levers.add_column(column, justify="left" if column == "lever" else "right")
    saving = [lever for lever in extra["levers"] if round(lever["saves_usd_month"], 2) > 0]  # a cent a month
    for lever in saving:
        levers.add_row(
            lever["lever"],
            f"{lever['usd_month']:,.2f}",
            f"{lever['saves_usd_month']:,.2f} ({lever['saves_share']:.0%})",
            f"{lever['latency_seconds']:,.1f} s",
        )
    if saving:
        console.print(levers)
    else:
        console.print("levers: no lever saves anything on this traffic (tally plan --json lists what each would cost)")
    for lever in saving:
        console.print(f"{lever['lever']}: {lever['how']}")
    duration = extra["duration"]
    low, high = PROXY_TO_MODEL_DURATION
    console.print(
        f"duration: through the latency proxy (published AWS latencies; docs/explanation/costs.md) the handler took "
        f"{low}x to {high}x the model's time per event: expect {duration['proxy_low_seconds']:,.1f} to "
        f"{duration['proxy_high_seconds']:,.1f} s per batch. The model's CPU was measured on an x86 VM, not on "
        "Lambda's Graviton, and it leaves out a container's first 10 batches' marker pre-read."
    )
    for assumption in bill.assumptions:
        console.print(f"assumed: {assumption}")
