"""What threshold notifications cost beside plain sums, and how long a crossing takes from commit to PutEvents.

The shape of ``bench.bounded`` (the handlers' own wiring, windows off, single-event messages ``+1`` over
``--keys`` keys in batches of 100 records, every call billed by ``tally_local.kit.meter`` from item sizes), with the
fenced apply off (``FencedApply=false``): a thresholded message takes a direct transaction on either setting, and so
then do the baselines' batches, which with it on take the fenced journal for its lower cost (docs/journal.md, "Small
batches through the fenced path"): what a threshold costs is then what it adds to the same transactions. Loads:

- ``sums``: no threshold: the baseline;
- ``thresholds, never crossed``: ``CounterThresholds`` ``u:*#n>=1000000000``: every write carries its crossing
  condition, none fails;
- ``thresholds, crossed``: levels at a quarter, half, three quarters and all of each key's events: each key
  crosses four levels, each crossing costs the refused transaction and the exact one with its notification;
- ``day windows`` and ``day thresholds, late``: the same events with ``ts`` in yesterday's UTC day (ended, so
  moved off the key items after the first batch), counted per day; the second declares the same levels per day
  (``u:*#n@day>=...``): each of its late events is judged against the day's whole value, the moved part said
  by the key item's pointer (one item read per key and batch: ``tally.core.moved``), the cost beside the first.

The third load runs the notifications pipe model (``tally_local.pipe``) on DynamoDB Local's stream beside the
function, putting to an in-memory bus: the latency of each crossing is the time from the answer of the
transaction that committed it to the ``PutEvents`` that carried it (both clocks of this process). On AWS the
pipe's own polling of the stream adds to it; nothing here measures that (docs/aws-fidelity.md).

Run: ``python -m bench notifications [--events 5000] [--keys 50] [--json-out docs/notifications.json]``. Every
counter is checked, and every key's crossings are exactly its four levels, each announced.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from bench.deployment import TEMPLATE, default_settings
from bench.metered_load import BATCH, fresh_id, report_beside_sums
from bench.peers.tables import tally_tables
from bench.peers.tally_pipeline import RecordingDeadLetterQueue
from bench.results import Row, field, load_options
from tally.config import COUNTER_THRESHOLDS, FENCED_APPLY, NOTIFICATIONS_TABLE, WINDOWS
from tally.core.model import SourceRecord
from tally.reader import CounterReader, NotificationReader
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.kit.meter import DynamoDBMeter
from tally_local.pipe import LocalNotificationsPipe
from tally_local.resources import LocalResources
from tally_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_dynamodb import DynamoDBClient

LOADS: Final = ("sums", "thresholds, never crossed", "thresholds, crossed", "day windows", "day thresholds, late")


class _TimedBus:
    """The bus: when each notification id was first put (ms, this process's clock)."""

    def __init__(self) -> None:
        self.first_put_ms: dict[str, float] = {}
        self.events = 0
        self._lock = threading.Lock()

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        now = time.perf_counter() * 1000
        with self._lock:
            for entry in Entries:
                self.first_put_ms.setdefault(json.loads(entry["Detail"])["notification_id"], now)
            self.events += len(Entries)
        return {"FailedEntryCount": 0, "Entries": [{} for _ in Entries]}


def _commit_times(client: DynamoDBClient, table: str) -> dict[str, float]:
    """When each notification id's transaction answered (ms, this process's clock), through botocore's hooks."""
    committed: dict[str, float] = {}

    def keep(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_notifications"] = [
            entry["Put"]["Item"]["notification_id"]["S"]
            for entry in params.get("TransactItems", [])
            if "Put" in entry and entry["Put"]["TableName"] == table
        ]

    def answered(context: dict[str, Any], parsed: Mapping[str, Any] | None = None, **_: Any) -> None:
        if parsed is not None and "Error" not in parsed:
            now = time.perf_counter() * 1000
            for notification_id in context.get("bench_notifications", []):
                committed.setdefault(notification_id, now)

    client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", keep)
    client.meta.events.register("after-call.dynamodb.TransactWriteItems", answered)
    return committed


def measure(load: str, events: int, keys: int, ddb: DynamoDBLocal) -> dict[str, Any]:
    client, admin, endpoint = ddb.client(CLIENT_CONFIG), ddb.client(), ddb.endpoint_url
    suffix = fresh_id()
    per_key = events // keys
    logical_ids = ("CountersTable", "MarkersTable", "NotificationsTable")
    counters, markers, notifications = tally_tables(admin, "ntf", suffix, *logical_ids)
    quarters = ",".join(str(per_key * q // 4) for q in (1, 2, 3, 4))
    levels = {"thresholds, never crossed": "u:*#n>=1000000000", "thresholds, crossed": "u:*#n>=" + quarters}.get(
        load, "u:*#n@day>=" + quarters if load == "day thresholds, late" else ""
    )
    windowed = load.startswith("day")
    declared = {
        WINDOWS: "day" if windowed else "",
        COUNTER_THRESHOLDS: levels,
        NOTIFICATIONS_TABLE: notifications,
        FENCED_APPLY: "false",
    }
    yesterday_ms = (time.time_ns() // 86_400_000_000_000 - 1) * 86_400_000 + 43_200_000  # noon, UTC
    pipeline = wire_pipeline(client, RecordingDeadLetterQueue(), default_settings(counters, markers, declared))
    meter = DynamoDBMeter()
    meter.track(counters, ["pk", "sk"], "counters")
    meter.track(markers, ["id"], "markers")
    meter.track(notifications, ["notification_id"], "notifications")
    committed = _commit_times(client, notifications)
    bus = _TimedBus()
    template = load_template(TEMPLATE)
    resources = LocalResources("bench", template, endpoint, endpoint, {"NotificationsTable": notifications}, {}, {})
    pipe = LocalNotificationsPipe(resources, events=bus, poll_s=0.05)
    ts = {"ts": yesterday_ms} if windowed else {}
    bodies = [
        json.dumps({"id": f"{suffix}-{n}", "key": f"u:{n % keys}", "deltas": {"n": 1}, **ts}) for n in range(events)
    ]
    failed = 0
    with meter.attached(client), pipe:
        started = time.perf_counter()
        for first in range(0, len(bodies), BATCH):
            now_ms = time.time_ns() // 1_000_000
            records = [
                SourceRecord(f"r{first + i}", body, now_ms) for i, body in enumerate(bodies[first : first + BATCH])
            ]
            failed += len(pipeline.process(records, now_ms, lambda: 60_000).failed_record_ids)
        seconds = time.perf_counter() - started
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(bus.first_put_ms) < len(committed):
            time.sleep(0.05)
    usage = meter.usage()
    reader = CounterReader(counters, client=admin)
    counted = reader.get_many([f"u:{k}" for k in range(keys)])
    recorded = NotificationReader(notifications, client=admin).list()
    exact = failed == 0 and all(value.values.get("n") == Decimal(per_key) for value in counted.values())
    if quarters in levels:  # the loads that cross each key's four levels
        by_key: dict[str, list[Decimal]] = {}
        for crossing in recorded:
            by_key.setdefault(crossing.key, []).append(Decimal(crossing.level))
        exact = exact and all(sorted(v) == [Decimal(per_key * q // 4) for q in (1, 2, 3, 4)] for v in by_key.values())
        exact = exact and len(by_key) == keys and set(bus.first_put_ms) == {c.notification_id for c in recorded}
    else:
        exact = exact and not recorded
    lags = sorted(bus.first_put_ms[nid] - committed[nid] for nid in committed if nid in bus.first_put_ms)
    return {
        "load": load,
        "events": events,
        "write_units_per_event": usage.write_units / events,
        "read_units_per_event": usage.read_units / events,
        "requests_per_event": usage.requests / events,
        "transactions": usage.calls.get("TransactWriteItems", 0),
        "cancelled_transactions": usage.cancelled_transactions,
        "reads": sum(n for op, n in usage.calls.items() if op in {"GetItem", "BatchGetItem", "Query", "Scan"}),
        "crossings": len(recorded),
        "events_per_s": events / seconds,
        "commit_to_put_ms": {
            "p50": statistics.median(lags) if lags else None,
            "p95": lags[int(0.95 * (len(lags) - 1))] if lags else None,
            "max": lags[-1] if lags else None,
            "n": len(lags),
        },
        "exact": exact,
    }


def _lag(row: Row) -> str:
    lag = row["commit_to_put_ms"]
    return f"{lag['p50']:.0f}/{lag['p95']:.0f}/{lag['max']:.0f}" if lag["n"] else "-"


def main() -> int:
    args = load_options("threshold notifications: cost beside plain sums, commit -> put").parse_args()
    with DynamoDBLocal() as ddb:
        rows = [measure(load, args.events, args.keys, ddb) for load in LOADS]
    columns = [
        field("read_units_per_event", ".4f"),
        field("requests_per_event", ".4f"),
        field("transactions"),
        field("cancelled_transactions", header="cancelled"),
        field("crossings"),
        ("commit->put p50/p95/max ms", _lag),
    ]
    parameters = {"events": args.events, "keys": args.keys, "batch": BATCH}
    return report_beside_sums(
        "notifications", args, rows, columns, label="load", subject="single-event messages (+1)", parameters=parameters
    )


if __name__ == "__main__":
    raise SystemExit(main())
