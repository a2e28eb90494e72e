"""Whether messages already count, for operators (``tally dlq``): their markers, and their journal batches.

A dead letter's refusal may no longer hold: a bounded message refused ``below_floor`` whose copy was
decided again after a restock counts, and its letter stays in the queue. What says a message counts is its
idempotency marker, and only this store knows where markers live and what they hold. A message counts
when its marker names the same content (its digest, or none: a marker from before digests) and was
written directly, or by a journal batch that committed (``COMMITTED``, ``FENCED`` or ``DONE``). A marker of a batch
that is still preparing, was aborted, or whose header has expired says nothing certain: not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tally.core.ledger import BatchState
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.requests import batch_get
from tally.store.schema import HEADER_STATE, LEDGER_ID, header_id

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_dynamodb import DynamoDBClient

_COMMITTED: Final = frozenset({BatchState.COMMITTED, BatchState.FENCED, BatchState.DONE})
_READS_ONLY_TTL_S: Final = 86_400
"""These adapters only read here; the marker lifetime they would write with does not matter."""


class DynamoDBCountedLookup:
    """Reads the markers (and, for journal markers, the batch headers) of the messages asked about."""

    def __init__(self, client: DynamoDBClient, counters_table: str, markers_table: str) -> None:
        self._client = client
        self._markers_table = markers_table
        self._markers = DynamoDBCounterStore(client, counters_table, markers_table, _READS_ONLY_TTL_S)

    def counted(self, digests: Mapping[str, bytes]) -> frozenset[str]:
        """The message ids of ``digests`` (id -> content digest) whose markers count that very content.

        ``BatchGetItem`` only (the operator's grant): the markers, then the headers of the journal batches
        they name. Raises ``StoreError`` when they cannot be read.
        """
        same_content = {
            message_id: marker
            for message_id, marker in self._markers.read_markers(list(digests)).items()
            if not marker.digest or marker.digest == digests[message_id]  # else the id counts other content
        }
        batches = {marker.batch_id for marker in same_content.values() if marker.batch_id is not None}
        committed = self._committed(batches)
        return frozenset(
            message_id
            for message_id, marker in same_content.items()
            if marker.batch_id is None or marker.batch_id in committed
        )

    def _committed(self, batch_ids: set[str]) -> set[str]:
        """Those of ``batch_ids`` whose header says COMMITTED, FENCED or DONE (strongly consistent reads)."""
        if not batch_ids:
            return set()
        by_item = {header_id(batch_id): batch_id for batch_id in batch_ids}
        keys = ({LEDGER_ID: {"S": item_id}} for item_id in by_item)
        return {
            by_item[item[LEDGER_ID]["S"]]
            for item in batch_get(self._client, self._markers_table, keys)
            if BatchState(item[HEADER_STATE]["S"]) in _COMMITTED
        }
