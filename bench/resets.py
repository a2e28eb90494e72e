"""The cost of corrections and resets beside plain sums, on DynamoDB Local.

The same shape of load as ``bench.patterns`` (single-event messages over ``--keys`` keys, batches of 100
records, the handlers' own wiring, windows off, billed by ``tally_local.kit.meter``), with operator messages mixed in:

- ``sums``: ``{"key": k, "delta": 1}``, the baseline;
- ``1 reset per batch``: the batch's 50th message resets its key's ``count`` (the batch commits in three
  segments: before it, the reset alone, after it);
- ``1 correction per batch``: the 50th message is a correction (``"correction": true``) instead;
- ``every message a reset``: the worst case, 100 segments per batch.

Run: ``python -m bench.resets [--events 5000] [--keys 50]``. Every count is read back and compared with
``expected_values`` of the messages in order (``tests/support/reference.py``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.support.reference import expected_values

from bench.metered_load import BATCH, fresh_id, measure_each_fresh, report_beside_sums, run_metered
from bench.results import field, load_options
from tally.config import WINDOWS
from tally.core.decode import decode_message
from tally.core.model import Message

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient


Body = dict[str, Any]


def _sums(key: str, _: int) -> Body:
    return {"key": key, "delta": 1}


def _reset_mid_batch(key: str, number: int) -> Body:
    return {"key": key, "reset": {"count": number}} if number % BATCH == BATCH // 2 else _sums(key, number)


def _correction_mid_batch(key: str, number: int) -> Body:
    return {"key": key, "delta": -1, "correction": True} if number % BATCH == BATCH // 2 else _sums(key, number)


def _all_resets(key: str, number: int) -> Body:
    return {"key": key, "reset": {"count": number}}


PATTERNS: dict[str, Callable[[str, int], Body]] = {
    "sums": _sums,
    "1 reset per batch": _reset_mid_batch,
    "1 correction per batch": _correction_mid_batch,
    "every message a reset": _all_resets,
}


def measure(name: str, events: int, keys: int, client: DynamoDBClient, admin: DynamoDBClient) -> dict[str, Any]:
    make = PATTERNS[name]
    suffix = fresh_id()
    bodies = [json.dumps({"id": f"{suffix}-{n}", **make(f"p:{n % keys}", n)}) for n in range(events)]
    run = run_metered(bodies, {WINDOWS: ""}, client, admin, tag="rst")
    decoded = [decode_message(body) for body in bodies]
    expected = expected_values(message for message in decoded if isinstance(message, Message))
    counted = run.reader.get_many(expected)
    exact = run.clean and all(counted[key].value() == values["count"] for key, values in expected.items())
    return {
        "pattern": name,
        "events": events,
        **run.per_event(events),
        "transactions": run.usage.calls.get("TransactWriteItems", 0),
        "exact": exact,
    }


def main() -> int:
    args = load_options("cost per event of corrections and resets beside plain sums").parse_args()
    rows = measure_each_fresh(PATTERNS, measure, args)
    return report_beside_sums("resets", args, rows, [field("requests_per_event", ".4f"), field("transactions")])


if __name__ == "__main__":
    raise SystemExit(main())
