"""The cost per event of views (``CounterViews``) beside the same stream published as separate keys, on DynamoDB Local.

One stream: ``--events`` events of key ``api``, each from one of ``--keys`` customers and one of ``ROUTES`` routes
(drawn with a fixed seed), published by the producer library (``tally.producer.packing.build_messages``, numbered
ids as its publishers draw them) either one message per event (``single``) or packed under SQS's size limit with
the consumer's views (``packed``), in batches of 100 records through the handlers' own wiring
(``bench.metered_load``; ``tally_local.kit.meter`` bills write and read units from item sizes and the pricing
rules). Windows are the template's default. Per publishing mode, four loads:

- ``0 views``: ``{"key": "api"}``, the baseline;
- ``1 view``: ``dims`` ``{"customer": ...}`` under ``api=customer``;
- ``3 views``: ``dims`` ``{"customer": ..., "route": ...}`` under ``api=customer,route,customer+route``;
- ``3 keys by hand``: what a producer publishes without views to get the same four numbers: each event as four
  events, on ``api``, ``api/customer=C``, ``api/route=R`` and ``api/customer=C/route=R`` (packed, the four travel
  in one message; single, each is a message of its own).

The target (issue: "3 views cost less than publishing the 3 keys yourself"): ``3 views`` / ``3 keys by hand`` in the
whole cost per million events (below) under ``TARGET_RATIO``, and in write units per event not over it, in each
mode. Until 2026-12-04 it judged write units alone, below 1: views write the same counter items as the hand keys
(one per view value), so that ratio stood under 1 by the journal pages' bytes alone (a view's rows grouped under
its view and key); since pages are compressed, a packed batch's pages are billed 1 unit each either way, and the
ratio is 1.000. The whole cost is what the issue asks, and views keep it lower (fewer, smaller SQS messages).
Every load's counts are read back and compared with the exact sums (the views through ``CounterReader.group``, a
``Query`` per view; the hand keys with ``get_many``).

Beside the headline, from the same runs:

- **where the write units go**: the meter adds every write up per class of item (``item_class``: the key's item,
  each view's items or each family of hand keys, markers, marker blocks, the journal's headers, pages and
  applied-records), with the items' sizes and how many were billed past 1 KB;
- **the whole cost per million events**, priced as ``tally.cost.model`` prices a deployment: DynamoDB (the metered
  write and read units), Lambda (GB-s from ``tally.cost.model.handler_seconds`` on the requests and items the run
  measured, at the template's ``MemorySize`` and ``tally plan``'s published latencies; one invocation per batch)
  and SQS (``tally.cost.sqs``: the billed send, receive and delete requests of the run's message bodies).

Run: ``python -m bench views [--events 5000] [--keys 50] [--json-out FILE]``.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from bench.deployment import TEMPLATE, template_environment
from bench.metered_load import BATCH, measure_each_fresh, report_beside_sums, run_metered
from bench.results import Grid, console, field, load_options, table
from tally.config import COUNTER_VIEWS, WINDOWS
from tally.core.items import ALL_TIME, view_parts
from tally.core.views import NO_VIEWS, parse_counter_views
from tally.cost.model import BatchWork, Prices, handler_seconds, published_latencies
from tally.cost.sqs import carried
from tally.producer.event import Event
from tally.producer.packing import NumberedIds, PackLimits, build_messages
from tally.store.schema import LEDGER_ID, counter_item_of
from tally_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.results import Column, Row
    from tally.core.views import CounterViews
    from tally.cost.capacity import Item
    from tally.reader.dynamodb import CounterReader
    from tally_local.kit.meter import Usage

ROUTES: Final = 8
KEY: Final = "api"
SQS_MAX_BYTES: Final = 256 * 1024
TARGET_RATIO: Final = 1.0
"""``3 views`` must cost less than this times ``3 keys by hand`` (write units per event, the same mode)."""

VIEWS_OF: Final = {"0 views": "", "1 view": "api=customer", "3 views": "api=customer,route,customer+route"}
"""Each load's ``CounterViews`` (``3 keys by hand`` declares none)."""
LOADS: Final = tuple(f"{load}, {mode}" for mode in ("single", "packed") for load in (*VIEWS_OF, "3 keys by hand"))
COMPARED: Final = tuple(f"{load}, {mode}" for mode in ("single", "packed") for load in ("3 views", "3 keys by hand"))
"""The loads the target compares, whose writes are shown per class of item."""
PER_MILLION: Final = 1_000_000


def _stream(events: int, customers: int) -> list[tuple[str, str]]:
    """The (customer, route) of each event of the stream: the same in every load."""
    rng = random.Random(38)
    return [(f"c{rng.randrange(customers)}", f"/r{rng.randrange(ROUTES)}") for _ in range(events)]


def _events(load: str, stream: list[tuple[str, str]]) -> list[Event]:
    if load == "3 keys by hand":
        return [
            Event(key, {"count": 1})
            for customer, route in stream
            for key in (KEY, f"{KEY}/customer={customer}", f"{KEY}/route={route}", f"{KEY}/{customer}{route}")
        ]
    if load == "1 view":
        return [Event(KEY, {"count": 1}, dims={"customer": customer}) for customer, _ in stream]
    if load == "3 views":
        return [Event(KEY, {"count": 1}, dims={"customer": customer, "route": route}) for customer, route in stream]
    return [Event(KEY, {"count": 1}) for _ in stream]


def _expected(load: str, stream: list[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """What each view (or, by hand, each key family) must read: view -> value -> count."""
    views = {"1 view": ("customer",), "3 views": ("customer", "route", "customer+route")}.get(load, ())
    if load == "3 keys by hand":
        views = ("customer", "route", "customer+route")
    found: dict[str, dict[str, int]] = {view: {} for view in views}
    for customer, route in stream:
        for view in views:
            value = {"customer": customer, "route": route, "customer+route": f"{customer}{route}"}[view]
            found[view][value] = found[view].get(value, 0) + 1
    return found


def _hand_key(view: str, value: str) -> str:
    return f"{KEY}/{value}" if view == "customer+route" else f"{KEY}/{view}={value}"


def measure(name: str, events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> dict[str, Any]:
    load, _, mode = name.rpartition(", ")
    stream = _stream(events, keys)
    declared = VIEWS_OF.get(load, "")
    views = parse_counter_views(declared) if declared else NO_VIEWS
    limits = PackLimits(SQS_MAX_BYTES, views=views) if mode == "packed" else None
    published = _events(load, stream)
    messages = build_messages(published, limits, NumberedIds(), views)
    run = run_metered(
        [message.body.decode() for message in messages],
        {COUNTER_VIEWS: declared},
        client,
        admin,
        tag="vw",
        classify=item_class,
    )
    reader = run.reader
    expected = _expected(load, stream)
    exact = run.clean and reader.get(KEY).value() == Decimal(events)
    if load == "3 keys by hand":
        wanted = {_hand_key(view, value): count for view, values in expected.items() for value, count in values.items()}
        counted = reader.get_many(wanted)
        exact = exact and all(counted[key].value() == count for key, count in wanted.items())
    else:
        for view, values in expected.items():
            exact = exact and _listed(reader, view) == {value: Decimal(count) for value, count in values.items()}
    return {
        "load": name,
        "events": events,
        "messages": len(messages),
        **run.per_event(events),
        "read_units_per_event": run.usage.read_units / events,
        "message_bytes_per_event": sum(len(message.body) for message in messages) / events,
        **whole_cost(events, [len(message.body) for message in messages], run.usage, _event_items(published, views)),
        "by_class": {name: asdict(usage) for name, usage in sorted(run.usage.by_class.items())},
        "exact": exact,
    }


_PAGE = re.compile(r"b#[^#]+#p\d+")
_APPLIED = re.compile(r"b#[^#]+#a\d+")


def item_class(table: str, key: Item) -> str:
    """Which kind of item a write went to (``table``: ``counters`` or ``markers``), for the per-class bill."""
    if table == "markers":
        name = key[LEDGER_ID]["S"]
        if name.startswith("m#"):
            return "marker"
        if name.startswith("s#"):
            return "marker block (numbered ids)"
        if _PAGE.fullmatch(name):
            return "journal page"
        return "journal applied-record" if _APPLIED.fullmatch(name) else "journal header"
    try:
        item = counter_item_of(key)
    except ValueError:
        return "distinct member"
    view = view_parts(item.key)
    if view is not None:
        kind = f"view item, {view.view}"
    elif item.key.startswith(f"{KEY}/"):
        family = item.key[len(KEY) + 1 :].partition("=")
        kind = f"hand key, {family[0] if family[1] else 'customer+route'}"
    else:
        kind = "key item"
    return kind if item.window == ALL_TIME else f"{kind} (window item)"


def _event_items(published: Sequence[Event], views: CounterViews) -> int:
    """Each published event once per counter item it lands in: its key's and each view's, all-time and each of
    the template's windows (the duration model's CPU per event)."""
    windows = [name for name in template_environment(load_template(TEMPLATE)).get(WINDOWS, "").split(",") if name]
    return sum(1 + len(views.view_keys(event.key, event.dims)) for event in published) * (1 + len(windows))


def whole_cost(events: int, body_bytes: Sequence[int], usage: Usage, event_items: int) -> dict[str, float]:
    """A load's whole bill per million events, priced as ``tally.cost.model`` prices a deployment: DynamoDB's units
    as metered, Lambda's GB-s from the requests and items the run made (the template's ``MemorySize``, ``tally
    plan``'s published latencies, an invocation per batch), SQS's billed requests for its messages."""
    prices = Prices()
    memory_mb = int(load_template(TEMPLATE)["Parameters"]["MemorySize"]["Default"])
    work = BatchWork(
        transactions=usage.calls.get("TransactWriteItems", 0),
        batch_gets=usage.calls.get("BatchGetItem", 0),
        batch_writes=usage.calls.get("BatchWriteItem", 0),
        items=usage.written_items,
        event_items=event_items,
    )
    gb_s = handler_seconds(work, memory_mb, published_latencies()) * memory_mb / 1024
    invocations = math.ceil(len(body_bytes) / BATCH)
    sqs = carried(body_bytes)
    scale = PER_MILLION / events
    dynamodb_usd = usage.write_units * prices.write_unit + usage.read_units * prices.read_unit
    lambda_usd = gb_s * prices.lambda_gb_second + invocations * prices.lambda_request
    sqs_usd = sqs.total * prices.sqs_request
    return {
        "dynamodb_usd_per_million": dynamodb_usd * scale,
        "lambda_gb_s_per_million": gb_s * scale,
        "lambda_usd_per_million": lambda_usd * scale,
        "sqs_requests_per_million": sqs.total * scale,
        "sqs_usd_per_million": sqs_usd * scale,
        "usd_per_million": (dynamodb_usd + lambda_usd + sqs_usd) * scale,
    }


def _listed(reader: CounterReader, view: str) -> dict[str, Decimal]:
    """A view's all-time values as the reader lists them (a ``Query`` of its item collection): value -> count, a
    combination's values joined as its hand key spells them."""
    group = reader.group(KEY, view)
    return {"".join(row.dims[dim] for dim in view.split("+")): row.value() for row in group.rows}


def main() -> int:
    args = load_options("cost per event of views beside the same stream published as separate keys").parse_args()
    rows = measure_each_fresh(LOADS, measure, args)
    by_name = {row["load"]: row for row in rows}
    for mode in ("single", "packed"):
        views, by_hand = by_name[f"3 views, {mode}"], by_name[f"3 keys by hand, {mode}"]
        ratio = views["write_units_per_event"] / by_hand["write_units_per_event"]
        whole = views["usd_per_million"] / by_hand["usd_per_million"]
        met = "met" if whole < TARGET_RATIO and ratio <= TARGET_RATIO else "NOT MET"
        print(
            f"target ({mode}): 3 views / 3 keys by hand = {whole:.3f} of the whole cost (DynamoDB, Lambda, SQS: "
            f"${views['usd_per_million']:.4f} against ${by_hand['usd_per_million']:.4f} per million events; "
            f"< {TARGET_RATIO:g}) and {ratio:.3f} of the write units per event (<= {TARGET_RATIO:g}): {met}"
        )
    columns = [
        field("messages"),
        field("read_units_per_event", ".4f"),
        field("requests_per_event", ".4f"),
        field("usd_per_million", ".4f", "$ / million events (all)"),
    ]

    def baseline(row: Row) -> int:
        """``0 views`` of the same publishing mode."""
        return 0 if row["load"].endswith("single") else 4

    status = report_beside_sums(
        "views", args, rows, columns, label="load", baseline=baseline, subject="events of one key (customers: --keys)"
    )
    out = console()
    out.print(table("The whole cost per million events (tally.cost.model's prices)", COST_COLUMNS, rows))
    compared = [by_name[name] for name in COMPARED]
    classes = sorted({name for row in compared for name in row["by_class"]})
    by_class = Grid.of([("item class", lambda name: name), *(_class_column(row) for row in compared)], classes)
    out.print(by_class.rich("Write units by class of item: units (writes; item bytes; writes billed past 1 KB)"))
    return status


COST_COLUMNS: Final[list[Column]] = [
    field("load"),
    field("dynamodb_usd_per_million", ".4f", "DynamoDB $"),
    field("lambda_gb_s_per_million", ",.1f", "Lambda GB-s"),
    field("lambda_usd_per_million", ".4f", "Lambda $"),
    field("sqs_requests_per_million", ",.0f", "SQS requests"),
    field("sqs_usd_per_million", ".4f", "SQS $"),
    field("usd_per_million", ".4f", "total $"),
    field("message_bytes_per_event", ".1f", "SQS bytes / event"),
]


def _class_column(row: Row) -> tuple[str, Callable[[str], str]]:
    def cell(name: str) -> str:
        usage = row["by_class"].get(name)
        if usage is None:
            return "-"
        sizes = f"{usage['smallest_bytes']:,}-{usage['largest_bytes']:,} B"
        return f"{usage['write_units']:,.0f} ({usage['writes']:,}; {sizes}; {usage['over_one_kb']:,})"

    return row["load"], cell


if __name__ == "__main__":
    raise SystemExit(main())
