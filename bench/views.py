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

The target (issue: "3 views cost less than publishing the 3 keys yourself"): ``3 views`` / ``3 keys by hand`` in
write units per event below 1, in each mode; the ratio is reported as ``TARGET_RATIO``'s verdict. Every load's
counts are read back and compared with the exact sums (the views through ``CounterReader.group``, a ``Query``
per view; the hand keys with ``get_many``).

Run: ``python -m bench views [--events 5000] [--keys 50] [--json-out FILE]``.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from bench.metered_load import measure_each_fresh, report_beside_sums, run_metered
from bench.results import field, load_options
from tally.config import COUNTER_VIEWS
from tally.core.views import NO_VIEWS, parse_counter_views
from tally.producer.event import Event
from tally.producer.packing import NumberedIds, PackLimits, build_messages

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.results import Row
    from tally.reader.dynamodb import CounterReader

ROUTES: Final = 8
KEY: Final = "api"
SQS_MAX_BYTES: Final = 256 * 1024
TARGET_RATIO: Final = 1.0
"""``3 views`` must cost less than this times ``3 keys by hand`` (write units per event, the same mode)."""

VIEWS_OF: Final = {"0 views": "", "1 view": "api=customer", "3 views": "api=customer,route,customer+route"}
"""Each load's ``CounterViews`` (``3 keys by hand`` declares none)."""
LOADS: Final = tuple(f"{load}, {mode}" for mode in ("single", "packed") for load in (*VIEWS_OF, "3 keys by hand"))


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
    messages = build_messages(_events(load, stream), limits, NumberedIds(), views)
    run = run_metered(
        [message.body.decode() for message in messages], {COUNTER_VIEWS: declared}, client, admin, tag="vw"
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
        "exact": exact,
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
        ratio = (
            by_name[f"3 views, {mode}"]["write_units_per_event"]
            / by_name[f"3 keys by hand, {mode}"]["write_units_per_event"]
        )
        met = "met" if ratio < TARGET_RATIO else "NOT MET"
        print(
            f"target ({mode}): 3 views / 3 keys by hand = {ratio:.2f} write units per event (< {TARGET_RATIO:g}: {met})"
        )
    columns = [field("messages"), field("read_units_per_event", ".4f"), field("requests_per_event", ".4f")]

    def baseline(row: Row) -> int:
        """``0 views`` of the same publishing mode."""
        return 0 if row["load"].endswith("single") else 4

    return report_beside_sums(
        "views", args, rows, columns, label="load", baseline=baseline, subject="events of one key (customers: --keys)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
