"""The commit journal against the chunked path on workload U (packed), same DynamoDB Local, same run.

The journal's measurement: write units and requests per event (billed from item sizes by ``tally_local.kit.meter``),
events per second, and the most ADDs any (key, batch) received, for the packed U stream delivered in
Lambda-style batches of 100 records, with the journal on and off (``Applier.use_journal``).

Run: ``python -m bench.journal_compare [--events 50000]`` (``make bench-journal``).
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any

from bench.peers.tally_pipeline import TallyCounter
from bench.results import EXACT, field, load_options, report
from bench.suite import run_peer
from bench.workloads import WorkloadSpec, deliver, usage_events
from tally.commit.applier import Applier
from tally.runtime import CLIENT_CONFIG
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient


class AddsPerBatch:
    """Counts, per handler call (one batch), the ADDs each counter item receives."""

    def __init__(self, counters_prefix: str) -> None:
        self.prefix = counters_prefix
        self.current: Counter[str] = Counter()
        self.max_per_item = 0

    def attach(self, client: DynamoDBClient) -> None:
        client.meta.events.register("before-call.dynamodb.TransactWriteItems", self._count)

    def next_batch(self) -> None:
        if self.current:
            self.max_per_item = max(self.max_per_item, *self.current.values())
        self.current = Counter()

    def _count(self, params: dict[str, Any], **_: Any) -> None:
        for action in json.loads(params["body"])["TransactItems"]:
            update = action.get("Update")
            if update and update["TableName"].startswith(self.prefix):
                self.current[json.dumps(update["Key"], sort_keys=True)] += 1


class _Journalled(TallyCounter):
    """tally on packed messages with the commit journal on or off, telling ``adds`` where each batch starts."""

    def __init__(
        self, client: DynamoDBClient, admin: DynamoDBClient, suffix: str, *, journal: bool, adds: AddsPerBatch
    ) -> None:
        super().__init__(client, admin, suffix, packed=True)
        applier = self._pipeline._applier
        assert isinstance(applier, Applier)
        applier.use_journal = journal
        self._adds = adds

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        self._adds.next_batch()
        return super().handle(event, context)


def measure(events: int) -> list[dict[str, Any]]:
    spec = WorkloadSpec(events=events)
    stream = deliver("U", usage_events(spec), spec, packed=True)
    rows = []
    with DynamoDBLocal() as ddb:
        admin, client = ddb.client(), ddb.client(CLIENT_CONFIG)
        for label, use_journal in (("journal (one ADD per key per batch)", True), ("chunked path", False)):
            adds = AddsPerBatch("bench-tally-counters-")
            adds.attach(client)
            factory = partial(_Journalled, journal=use_journal, adds=adds)
            run = run_peer(factory, stream, client=client, admin=admin, batch_size=100)
            adds.next_batch()
            rows.append(
                {
                    "path": label,
                    "events": run.events,
                    "events_per_s": run.events_per_second,
                    "write_units_per_event": run.write_units_per_event,
                    "requests_per_event": run.requests_per_event,
                    "max_adds_per_item_per_batch": adds.max_per_item,
                    "exact": run.correctness.exact,
                }
            )
    return rows


def main() -> int:
    parser = load_options("journal vs chunked path on workload U, packed", events=50_000)
    args = parser.parse_args()
    rows = measure(args.events)
    columns = [
        field("path"),
        field("events_per_s", ",.0f", "events/s"),
        field("write_units_per_event", ".4f"),
        field("requests_per_event", ".5f"),
        field("max_adds_per_item_per_batch", header="max ADDs per (item, batch)"),
        EXACT,
    ]
    title = f"workload U, packed messages of 100 events, {args.events:,} events, batches of 100"
    journal, chunked = rows
    note = (
        f"journal vs chunked: {chunked['write_units_per_event'] / journal['write_units_per_event']:.2f}x fewer write "
        f"units, {chunked['requests_per_event'] / journal['requests_per_event']:.1f}x fewer requests, "
        f"{journal['events_per_s'] / chunked['events_per_s']:.2f}x events/s"
    )
    return report("journal", title, columns, rows, {"events": args.events}, json_out=args.json_out, notes=[note])


if __name__ == "__main__":
    raise SystemExit(main())
