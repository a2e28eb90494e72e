"""Peer 2, Powertools per-record idempotency: ``BatchProcessor`` + ``idempotent_function``, one ADD per event.

This is the pattern of the Powertools documentation ("Batch integration" in the idempotency utility;
``examples/idempotency/src/integrate_idempotency_with_batch_processor.py``): a ``BatchProcessor`` for SQS,
a record handler wrapped in ``idempotent_function(data_keyword_argument="record")`` with a
``DynamoDBPersistenceLayer`` on its own table (partition key ``id``, TTL on ``expiration``, as the docs'
template declares it) and ``IdempotencyConfig(event_key_jmespath="messageId")``, and
``process_partial_response``. The record handler does the same work as the naive peer: one
``UpdateItem ADD`` per event.

Per record Powertools writes an ``INPROGRESS`` record (a conditional ``PutItem``), runs the handler, then
writes ``COMPLETED`` with the result (``UpdateItem``). Keyed on the SQS ``messageId`` as documented, a
redelivery of the same record is caught, but a producer re-send (a new ``messageId``) is counted again.
``key="body-id"`` keys on the producer's id instead (``powertools_json(body).id``), which catches the
re-send at the same price; neither is atomic with the ADD (a crash between the ADD and the ``COMPLETED``
write counts the event twice once the ``INPROGRESS`` record expires).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from bench.peers.handwritten import add_event, events_of, read_counter_item
from bench.peers.tables import create_table, drop_tables

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from decimal import Decimal

    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.kit.meter import DynamoDBMeter

COUNTER_KEY: Final = "id"
IDEMPOTENCY_KEY: Final = "id"
IDEMPOTENCY_TTL: Final = "expiration"
KEY_PATHS: Final = {"message-id": "messageId", "body-id": "powertools_json(body).id"}

IdempotencyKey = Literal["message-id", "body-id"]


class PowertoolsIdempotentCounter:
    """Powertools' documented batch + idempotency pattern, counting with one ADD per event."""

    def __init__(
        self, client: DynamoDBClient, admin: DynamoDBClient, suffix: str, key: IdempotencyKey = "message-id"
    ) -> None:
        self.name = "powertools" if key == "message-id" else "powertools-body-id"
        self._admin = admin
        self.counters_table = f"bench-pt-counters-{suffix}"
        self.idempotency_table = f"bench-pt-idempotency-{suffix}"
        create_table(admin, self.counters_table, [(COUNTER_KEY, "S")], ttl_attribute=None)
        create_table(admin, self.idempotency_table, [(IDEMPOTENCY_KEY, "S")], ttl_attribute=IDEMPOTENCY_TTL)

        self._processor = BatchProcessor(event_type=EventType.SQS)
        persistence = DynamoDBPersistenceLayer(table_name=self.idempotency_table, boto3_client=client)
        self._config = IdempotencyConfig(event_key_jmespath=KEY_PATHS[key])
        counters_table = self.counters_table

        # Powertools' decorator is untyped; the wrapped function keeps this signature.
        @idempotent_function(  # type: ignore[untyped-decorator]
            data_keyword_argument="record", config=self._config, persistence_store=persistence
        )
        def record_handler(record: SQSRecord) -> dict[str, str]:
            for counter_key, deltas in events_of(record.body):
                add_event(client, counters_table, COUNTER_KEY, counter_key, deltas)
            return {"message": record.body}

        self._record_handler = record_handler

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        self._config.register_lambda_context(context)
        return process_partial_response(
            event=dict(event), record_handler=self._record_handler, processor=self._processor, context=context
        )

    items_per_key = 1

    def read_counters(self, keys: Iterable[str]) -> dict[str, dict[str, Decimal]]:
        return {key: read_counter_item(self._admin, self.counters_table, COUNTER_KEY, key) for key in keys}

    def track(self, meter: DynamoDBMeter) -> None:
        meter.track(self.counters_table, [COUNTER_KEY], "counters")
        meter.track(self.idempotency_table, [IDEMPOTENCY_KEY], "idempotency")

    def drop(self) -> None:
        drop_tables(self._admin, [self.counters_table, self.idempotency_table])
