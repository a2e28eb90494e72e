"""Gauge writes on DynamoDB: one conditional ``UpdateItem`` per key, after the counters' commit.

Why not in the counters' transaction: a gauge's write is conditional (the stored maximum must be below
the new one), and a failed condition inside ``TransactWriteItems`` cancels the whole transaction, markers
and ADDs with it. An unconditional SET could not keep a maximum. So each key's gauges are written on
their own, outside the transaction, once the messages carrying them are applied (``tally.pipeline``):

- one ``UpdateItem`` for all of a key's gauges of the batch (``SET`` each, on the condition that every
  one of them improves the stored reading): one write request, one write unit for a small item, in the
  common case (a first reading, a later ``latest``, a new peak);
- when that condition fails (some stored reading is already as good), each gauge again alone, on its own
  condition; a failed condition then means "already as good": the write is done. A failed conditional
  write is still billed (one write unit each), so a batch whose readings mostly lose costs 1 + n writes
  per key; readings are pre-aggregated per batch (``tally.core.gauges``), so n is the number of gauge
  names of the key, not of events.

Idempotent: writing the same readings again changes nothing, so a retry, a redelivery, or another
invocation writing the same message's gauges is harmless.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.model import GaugeKind
from tally.core.numbers import to_wire
from tally.store.expressions import gauge_expressions, gauge_placeholders, gauges_per_update
from tally.store.requests import send_once, translate
from tally.store.schema import gauge_attribute, item_key, latest_order_attribute

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally.core.gauges import GaugeSlot, GaugeValue
    from tally.store.requests import Attempt

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"


def _wire_value(value: object) -> dict[str, str]:
    return {"S": value} if isinstance(value, str) else {"N": to_wire(value)}  # type: ignore[arg-type]


class DynamoDBGaugeStore:
    """Writes a key's gauge readings to its all-time item of the counters table."""

    def __init__(self, client: DynamoDBClient, counters_table: str) -> None:
        self._client = client
        self._table = counters_table

    def write_gauges(self, key: str, slots: Mapping[GaugeSlot, GaugeValue], attempt: Attempt = send_once) -> None:
        """Write ``key``'s readings where they improve on the stored ones, each request sent through ``attempt``.

        Raises ``RetryableStoreError`` (throttling, unknown outcome: writing again is safe) or
        ``StoreError``.
        """
        ordered = list(slots.items())
        step = gauges_per_update()
        for start in range(0, len(ordered), step):
            group = ordered[start : start + step]
            if attempt(partial(self._update, key, group)):
                continue
            if len(group) > 1:
                for one in group:
                    attempt(partial(self._update, key, [one]))

    def _update(self, key: str, group: Sequence[tuple[GaugeSlot, GaugeValue]]) -> bool:
        """One conditional write; False when its condition failed (some stored reading is as good)."""
        update, condition = gauge_expressions([str(kind) for (kind, _), _ in group])
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        for index, ((kind, gauge), reading) in enumerate(group):
            name, value, order_name, order_value = gauge_placeholders(index)
            names[name] = gauge_attribute(kind, gauge)
            values[value] = _wire_value(reading.value)
            if kind is GaugeKind.LATEST:
                names[order_name] = latest_order_attribute(gauge)
                values[order_value] = {"B": reading.order}
        try:
            self._client.update_item(
                TableName=self._table,
                Key=item_key(key),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == _CONDITION_FAILED:
                return False
            raise translate(exc) from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return True
