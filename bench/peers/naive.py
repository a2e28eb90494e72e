"""Peer 1, the naive atomic counter: one ``UpdateItem ... ADD`` per event, as the seed articles show it.

The articles (shared/seeds/) increment a counter with a single atomic update per event through the boto3
client, ``ADD #usage :increase`` (or ``SET #usage = #usage + :increase``), ``ReturnValues="UPDATED_NEW"``,
in a loop over the records. That is this handler (``bench.peers.handwritten``). It has no idempotency at
all: a producer re-send (or an SQS redelivery) is counted again, and the suite reports that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from bench.peers.handwritten import add_event, events_of, read_counter_item
from bench.peers.tables import create_table, drop_tables

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from decimal import Decimal

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.kit.meter import DynamoDBMeter

KEY: Final = "id"


class NaiveCounter:
    """An SQS handler that adds each event's deltas with one ``UpdateItem`` per event."""

    name = "naive"

    def __init__(self, client: DynamoDBClient, admin: DynamoDBClient, suffix: str) -> None:
        self._client = client
        self._admin = admin
        self.table = f"bench-naive-counters-{suffix}"
        create_table(admin, self.table, [(KEY, "S")], ttl_attribute=None)

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        for record in event["Records"]:
            for key, deltas in events_of(record["body"]):
                add_event(self._client, self.table, KEY, key, deltas)
        return {"batchItemFailures": []}

    items_per_key = 1

    def read_counters(self, keys: Iterable[str]) -> dict[str, dict[str, Decimal]]:
        return {key: read_counter_item(self._admin, self.table, KEY, key) for key in keys}

    def track(self, meter: DynamoDBMeter) -> None:
        meter.track(self.table, [KEY], "counters")

    def drop(self) -> None:
        drop_tables(self._admin, [self.table])
