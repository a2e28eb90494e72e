"""The cost per event of bounded counters beside plain sums, on DynamoDB Local.

The shape of ``bench.patterns`` (the handlers' own wiring, windows off, single-event messages over ``--keys``
keys in batches of 100 records, billed by ``tally_local.kit.meter``), three loads:

- ``sums``: ``{"key": k, "deltas": {"stock": -1}}``, no bound: the baseline;
- ``floor, never reached``: the same under ``CounterBounds`` ``p:*#stock>=0`` and a start far above the
  sales: every write carries its condition, none fails;
- ``floor, half refused``: the start is half the sales per key, so every key reaches its floor halfway
  through the run and each later sale is refused (a cancelled transaction, then the fallback's writes).

Run: ``python -m bench.bounded [--events 5000] [--keys 50]``. Every counter and dead letter is checked: each key
ends at its start less its applied sales (0 for the half-refused load), every other sale ``below_floor``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from bench.metered_load import fresh_id, measure_each_fresh, report_beside_sums, run_metered
from bench.results import field, load_options
from tally.config import COUNTER_BOUNDS, COUNTER_DEFAULTS, WINDOWS

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

LOADS = ("sums", "floor, never reached", "floor, half refused")


def measure(load: str, events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> dict[str, Any]:
    suffix = fresh_id()
    sales_per_key = events // keys
    start = {"sums": 0, "floor, never reached": 10 * sales_per_key, "floor, half refused": sales_per_key // 2}[load]
    declared = {WINDOWS: "", COUNTER_DEFAULTS: f"p:*#stock=start:{start}" if start else ""}
    if load != "sums":
        declared[COUNTER_BOUNDS] = "p:*#stock>=0"
    bodies = [
        json.dumps({"id": f"{suffix}-{n}", "key": f"p:{n % keys}", "deltas": {"stock": -1}}) for n in range(events)
    ]
    run = run_metered(bodies, declared, client, admin, tag="bnd")
    refused = events - keys * (sales_per_key // 2) if load == "floor, half refused" else 0
    expected = Decimal(start - (sales_per_key - (refused // keys)))
    counted = run.reader.get_many([f"p:{k}" for k in range(keys)])
    codes = {str(letter.rejection.code) for letter in run.dead_letters}
    exact = not run.failed and len(run.dead_letters) == refused and codes <= {"below_floor"}
    exact = exact and all(value.values.get("stock", Decimal(start)) == expected for value in counted.values())
    return {
        "load": load,
        **run.per_event(events),
        "transactions": run.usage.calls.get("TransactWriteItems", 0),
        "refused": len(run.dead_letters),
        "exact": exact,
    }


def main() -> int:
    args = load_options("cost per event of bounded counters beside plain sums").parse_args()
    rows = measure_each_fresh(LOADS, measure, args)
    columns = [field("requests_per_event", ".4f"), field("transactions"), field("refused")]
    return report_beside_sums("bounded", args, rows, columns, label="load", subject="single-event sales")


if __name__ == "__main__":
    raise SystemExit(main())
