"""The cost per event of distinct counts beside plain sums, on DynamoDB Local.

The load and the billing are ``bench.patterns``' (the handlers' own wiring, ``tally.runtime.wire_pipeline``;
single-event messages over ``--keys`` keys in batches of 100 records; ``tally_local.kit.meter`` bills write and read
units from item sizes and the pricing rules, cancelled transactions and failed conditions included):

- ``sums``: ``{"key": k, "delta": 1}``, the baseline (windows off);
- ``distinct, every member new``: a delta and ``{"viewers": "u<n>"}``, a new member every event (the worst
  case: a member item and its share of an ADD in a transaction);
- ``distinct, members repeat``: the same, members drawn from 20 per key (after the first few batches nearly
  every member is known: a read and no write);
- ``sums, hour+day`` and ``distinct new, hour+day``: the same two with hourly and daily windows (a new
  member is counted all-time and in each window: three member items).

Run: ``python -m bench.distinct [--events 5000] [--keys 50]``. Every count and distinct count is read back
and compared with the exact set sizes (``tally.core.distinct.exact_distinct``).
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from bench.metered_load import NOW_MS, fresh_id, measure_each_fresh, report_beside_sums, run_metered
from bench.results import field, load_options
from tally.config import WINDOWS
from tally.core.distinct import exact_distinct
from tally.core.items import ALL_TIME

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.results import Row

REPEATING_MEMBERS = 20

Body = dict[str, Any]


def _sums(key: str, _: int, __: random.Random) -> Body:
    return {"key": key, "delta": 1, "ts": NOW_MS}


def _new_member(key: str, number: int, _: random.Random) -> Body:
    return {"key": key, "delta": 1, "ts": NOW_MS, "distinct": {"viewers": f"u{number}"}}


def _repeating_member(key: str, _: int, rng: random.Random) -> Body:
    return {"key": key, "delta": 1, "ts": NOW_MS, "distinct": {"viewers": f"u{rng.randrange(REPEATING_MEMBERS)}"}}


PATTERNS: dict[str, tuple[Callable[[str, int, random.Random], Body], str]] = {
    "sums": (_sums, ""),
    "distinct, every member new": (_new_member, ""),
    "distinct, members repeat": (_repeating_member, ""),
    "sums, hour+day": (_sums, "hour,day"),
    "distinct new, hour+day": (_new_member, "hour,day"),
}


def measure(name: str, events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> dict[str, Any]:
    make, windows = PATTERNS[name]
    suffix = fresh_id()
    rng = random.Random(7)
    bodies = []
    expected: dict[str, int] = {}
    members: list[tuple[str, str, str, str]] = []
    for number in range(events):
        key = f"p:{number % keys}"
        body = make(key, number, rng)
        bodies.append(json.dumps({"id": f"{suffix}-{number}", **body}))
        expected[key] = expected.get(key, 0) + 1
        for set_name, member in body.get("distinct", {}).items():
            members.append((key, ALL_TIME, set_name, member))
    run = run_metered(bodies, {WINDOWS: windows}, client, admin, tag="dc")
    counted = run.reader.get_many(expected)
    want = exact_distinct(members)
    exact = run.clean and all(counted[key].value() == Decimal(count) for key, count in expected.items())
    exact = exact and all(
        counted[key].distinct == {n: Decimal(c) for (k, _, n), c in want.items() if k == key} for key in expected
    )
    return {
        "pattern": name,
        "events": events,
        **run.per_event(events),
        "read_units_per_event": run.usage.read_units / events,
        "members_added": sum(result.figures["MembersAdded"] for result in run.results),
        "conditional_failures": run.usage.conditional_failures,
        "exact": exact,
    }


def main() -> int:
    args = load_options("cost per event of distinct counts beside plain sums").parse_args()
    rows = measure_each_fresh(PATTERNS, measure, args)
    columns = [field("read_units_per_event", ".4f"), field("requests_per_event", ".4f"), field("members_added")]

    def baseline(row: Row) -> int:
        """Plain sums, or plain sums with the same windows for the windowed patterns."""
        return 3 if "hour+day" in row["pattern"] else 0

    return report_beside_sums("distinct", args, rows, columns, baseline=baseline)


if __name__ == "__main__":
    raise SystemExit(main())
