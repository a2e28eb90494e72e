"""The DynamoDB counter store: it encodes the direct transactions the core decides, and reads items and markers.

``write`` sends one ``DirectWrite`` (``tally.core.write``, planned by ``tally.core.write_planner``) as one
``TransactWriteItems``: the markers, one action per item (``tally.store.actions.item_action``: its ADDs, start
values, a reset's values, the operator's record and its conditions, as given), the crossings' notifications, all or
nothing. It decides nothing: which conditions, which values, which crossings and which reads came before are the
core's. ``read_items`` is the strongly consistent read a write is planned from (a reset's values, a key item's
moves and pointers, a window item's moved part); ``read_markers`` and ``read_marker`` the markers. Larger units of
a batch go through the commit journal (``tally.store.journal``); both share the item schema in
``tally.store.schema``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.errors import ConfigurationError, WriteRejectedError
from tally.store.actions import item_action, replaced_batch_check
from tally.store.expressions import condition_fits
from tally.store.markers import marker_actions, marker_id, marker_records
from tally.store.notifications import notification_put
from tally.store.requests import batch_get, translate
from tally.store.schema import LEDGER_ID, item_key, item_read, item_where

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.items import ItemKey
    from tally.core.ledger import MarkerRecord
    from tally.core.write import DirectWrite, ItemRead


class DynamoDBCounterStore:
    """Counter store on the counters and markers tables (and the notifications table, where crossings are
    recorded); the client is injected so tests and local runs can point it."""

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        markers_table: str,
        marker_ttl_seconds: int,
        *,
        notifications_table: str | None = None,
    ) -> None:
        self.client = client
        self.counters_table = counters_table
        self.markers_table = markers_table
        self.marker_ttl_seconds = marker_ttl_seconds
        self.notifications_table = notifications_table or ""

    def write(self, write: DirectWrite) -> None:
        """Commit one direct transaction as planned: all its markers, item writes and crossings, or nothing.

        Raises ``MarkersExistError`` naming the messages that already have markers (with the batch and content
        digest of each), ``RetryableStoreError`` for throttling, conflicts and unknown outcomes, ``WriteRejectedError``
        when DynamoDB refuses the request as sent (a number, a size: on every attempt), ``ConditionRefusedError``
        when an item's condition fails (``tally.core.plan``: each refused item as the condition met it).
        """
        expires_at = write.at_ms // 1000 + self.marker_ttl_seconds
        actions = marker_actions(self.markers_table, write.claims, write.at_ms, expires_at, batch_id=write.spill_batch)
        actions += [replaced_batch_check(self.markers_table, batch) for batch in write.replaced]
        actions += [item_action(self.counters_table, item) for item in write.items]
        if write.crossings and not self.notifications_table:
            raise ConfigurationError("a write records crossings: the counter store needs the notifications table")
        actions += [notification_put(self.notifications_table, crossing, expires_at) for crossing in write.crossings]
        if not actions:
            return  # nothing to send (an empty transaction names no table): only a broken planner plans so
        if len(actions) > TRANSACT_MAX_ACTIONS:
            # The protocol leaves room for every action (``DirectWrite.action_count``, ``Spill``): refuse as DynamoDB
            # would rather than send what it refuses, so the message is settled (dead-lettered) like any refusal.
            raise WriteRejectedError(
                f"{len(actions)} actions in one transaction (DynamoDB takes {TRANSACT_MAX_ACTIONS})", number_range=False
            )
        if any(role.kind == "add" and not _fits(action) for action, role in actions):
            raise WriteRejectedError(
                "a crossing condition over DynamoDB's 300 operators or 4 KB per expression (a thresholded counter "
                "moved in too many windows by one write)",
                number_range=False,
            )
        try:
            self.client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, [role for _, role in actions]) from exc

    def read_items(self, items: Sequence[ItemKey]) -> dict[ItemKey, ItemRead]:
        """Each of ``items`` as it is now (strongly consistent ``BatchGetItem``s; an item not there yet reads empty):
        what a write is planned from (``tally.core.write_planner``)."""
        keys = {item: item_key(item) for item in items}
        wanted = {item_where(key): key for key in keys.values()}  # two ItemKeys of one item: asked once
        found = {item_where(raw): raw for raw in batch_get(self.client, self.counters_table, list(wanted.values()))}
        return {item: item_read(found.get(item_where(key), {})) for item, key in keys.items()}

    def read_markers(self, message_ids: Sequence[str]) -> dict[str, MarkerRecord]:
        """The markers that exist among ``message_ids`` (eventually consistent ``BatchGetItem``s of 100).

        Read before writing so that a batch's redelivered or re-sent messages do not cancel, and waste,
        whole transactions: a read unit costs a fifth of a write unit. The read is only advice, so it is
        eventually consistent, at half the read units: the conditional marker writes are what guard
        exactly-once. A marker the read misses cancels one transaction (whose cancellation reasons,
        strongly consistent, then name it); a stale marker of an aborted batch that has since been
        replaced fails the replacing claim's condition the same way.
        """
        by_item: dict[str, list[str]] = {}
        for message_id in message_ids:
            by_item.setdefault(marker_id(message_id), []).append(message_id)
        keys = ({LEDGER_ID: {"S": item_id}} for item_id in by_item)  # a block is asked for once
        found: dict[str, MarkerRecord] = {}
        for item in batch_get(self.client, self.markers_table, keys, consistent=False):
            found.update(marker_records(item, by_item[item[LEDGER_ID]["S"]]))
        return found

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        """The marker of ``message_id``, if it has one (strongly consistent)."""
        try:
            response = self.client.get_item(
                TableName=self.markers_table,
                Key={LEDGER_ID: {"S": marker_id(message_id)}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        item = response.get("Item")
        return None if item is None else marker_records(item, [message_id]).get(message_id)


def _fits(action: TransactWriteItemTypeDef) -> bool:
    body: Mapping[str, Any] = action.get("Update") or action.get("ConditionCheck") or {}
    return condition_fits(str(body.get("ConditionExpression", "")))
