"""The cost per event of the counter patterns beside plain sums, on DynamoDB Local.

Each pattern runs the same shape of load through the handlers' own wiring (``tally.runtime.wire_pipeline``,
windows off, as the peers run): single-event messages over ``--keys`` keys, delivered in batches of 100
records, billed by ``tally_local.kit.meter`` (write units from item sizes and the pricing rules, failed conditional
writes included):

- ``sums``: ``{"key": k, "delta": 1}``, the baseline;
- ``start + default delta``: ``{"key": k}`` with ``CounterDefaults`` ``p:*#count=start:1000,delta:1``;
- ``gauge max``: a delta and a ``max`` reading drawn at random (a new peak gets rarer as the run goes on);
- ``gauge latest``: a delta and a ``latest`` reading, ``ts`` increasing (every batch's reading is newer);
- ``gauge latest, late``: the same, ``ts`` decreasing (every reading loses to the stored one: the worst case).

``--all`` (what ``make bench`` runs) adds the other counter patterns from their own benchmarks, on the same
DynamoDB Local and the same load size, in one table beside the same plain sums: bounded counters
(``bench.bounded``), corrections and resets (``bench.resets``) and distinct counts (``bench.distinct``).

Run: ``python -m bench.patterns [--events 5000] [--keys 50] [--json-out FILE]`` (``make bench-patterns``; ``make
bench`` runs it after the peers and writes docs/patterns.json). Every count and gauge is read back and checked.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from bench.metered_load import BATCH, NOW_MS, fresh_id, report_beside_sums, run_metered
from bench.results import field, load_options
from tally.config import COUNTER_DEFAULTS, WINDOWS
from tally.post_commit.gauges import GAUGE_WRITES
from tally.runtime import CLIENT_CONFIG
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient


Body = dict[str, Any]


def _sums(key: str, _: int, __: random.Random) -> Body:
    return {"key": key, "delta": 1}


def _defaults(key: str, _: int, __: random.Random) -> Body:
    return {"key": key}


def _gauge_max(key: str, _: int, rng: random.Random) -> Body:
    return {"key": key, "delta": 1, "gauges": {"peak": {"max": rng.randint(0, 10**6)}}}


def _gauge_latest(key: str, number: int, _: random.Random) -> Body:
    return {"key": key, "delta": 1, "ts": NOW_MS - 600_000 + number, "gauges": {"last": {"latest": number}}}


def _gauge_latest_late(key: str, number: int, _: random.Random) -> Body:
    return {"key": key, "delta": 1, "ts": NOW_MS - number, "gauges": {"last": {"latest": number}}}


PATTERNS: dict[str, tuple[Callable[[str, int, random.Random], Body], str]] = {
    "sums": (_sums, ""),
    "start + default delta": (_defaults, "p:*#count=start:1000,delta:1"),
    "gauge max": (_gauge_max, ""),
    "gauge latest": (_gauge_latest, ""),
    "gauge latest, late": (_gauge_latest_late, ""),
}


def measure(name: str, events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> dict[str, Any]:
    make, declared = PATTERNS[name]
    suffix = fresh_id()
    rng = random.Random(7)
    bodies = []
    expected: dict[str, int] = {}
    for number in range(events):
        key = f"p:{number % keys}"
        bodies.append(json.dumps({"id": f"{suffix}-{number}", **make(key, number, rng)}))
        expected[key] = expected.get(key, 0) + 1
    run = run_metered(bodies, {WINDOWS: "", COUNTER_DEFAULTS: declared}, client, admin, tag="pat")
    start_value = 1000 if declared else 0
    counted = run.reader.get_many(expected)
    exact = run.clean and all(counted[key].value() == Decimal(start_value + count) for key, count in expected.items())
    return {
        "pattern": name,
        "events": events,
        **run.per_event(events),
        "conditional_failures": run.usage.conditional_failures,
        # The gauge step's own count: a fenced journal batch's item writes, commit and DONE are UpdateItems too.
        "gauge_writes": sum(result.figures.get(GAUGE_WRITES, 0) for result in run.results),
        "exact": exact,
    }


def other_patterns(events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> list[dict[str, Any]]:
    """The other counter patterns, measured by their own benchmarks (each beside plain sums there too)."""
    from bench import bounded, distinct, resets  # noqa: PLC0415 (only with --all)

    rows: list[dict[str, Any]] = []
    for load in bounded.LOADS[1:]:
        rows.append({"pattern": f"bounded: {load}"} | bounded.measure(load, events, keys, client, admin))
    for name in list(resets.PATTERNS)[1:]:
        rows.append({"gauge_writes": 0, "conditional_failures": 0} | resets.measure(name, events, keys, client, admin))
    for name in list(distinct.PATTERNS)[1:]:
        rows.append({"gauge_writes": 0} | distinct.measure(name, events, keys, client, admin))
    return rows


def main() -> int:
    parser = load_options("cost per event of start values, default deltas and gauges")
    parser.add_argument("--all", action="store_true", help="also bounded counters, resets and distinct counts")
    args = parser.parse_args()
    with DynamoDBLocal() as ddb:
        admin, client = ddb.client(), ddb.client(CLIENT_CONFIG)
        rows = [measure(name, args.events, args.keys, client, admin) for name in PATTERNS]
        if args.all:
            rows += other_patterns(args.events, args.keys, client, admin)
    columns = [
        field("requests_per_event", ".4f"),
        field("gauge_writes", header="gauge UpdateItems"),
        field("conditional_failures", header="failed conditions"),
    ]
    parameters = {"events": args.events, "keys": args.keys, "batch": BATCH}
    return report_beside_sums("patterns", args, rows, columns, parameters=parameters)


if __name__ == "__main__":
    raise SystemExit(main())
