"""The commit journal on DynamoDB: each step of the batch protocol as one conditional request.

The protocol itself (which step follows which, and why each condition is there) lives in
``tally.commit.protocol`` and ``docs/journal.md``; this adapter only turns each step into items and
conditions of the markers table, and the outcomes back into values and errors.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.defaults import NO_DEFAULTS, CounterDefaults
from tally.core.items import ALL_TIME, item_parts
from tally.core.ledger import BatchRecord, BatchState, Claim
from tally.core.limits import BATCH_WRITE_MAX_ITEMS
from tally.core.thresholds import CrossingPage
from tally.core.write import FenceAnswer
from tally.errors import BatchStateError, RetryableStoreError, StoreError
from tally.store.actions import Role, add_update, batch_state_check, fenced_update, replaced_batch_check
from tally.store.markers import marker_actions
from tally.store.notifications import notification_put
from tally.store.pages import decode_crossings, decode_page, encode_crossings, encode_page
from tally.store.requests import batch_get, translate
from tally.store.schema import (
    APPLIED_REFUSED,
    EXPIRES_AT,
    HEADER_CHUNKS,
    HEADER_DONE_AT,
    HEADER_LEASE_UNTIL,
    HEADER_STATE,
    LEDGER_ID,
    PAGE_CROSSINGS,
    PAGE_DATA,
    PARTITION_KEY,
    SORT_KEY,
    RawItem,
    applied_id,
    fence_attribute,
    fence_from_item,
    header_id,
    item_counters,
    item_key,
    item_where,
    page_id,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.core.plan import JournalPage
    from tally.core.thresholds import Crossing
    from tally.core.write import FencedWrite

JOURNAL_GRACE_SECONDS: Final = 86_400
"""Journal items outlive every marker of their batch by at least this much (the TTL ordering rule)."""


class DynamoDBJournal:
    """The journal steps on the markers table (counters are only touched by apply steps)."""

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        markers_table: str,
        marker_ttl_seconds: int,
        defaults: CounterDefaults = NO_DEFAULTS,
        *,
        notifications_table: str | None = None,
    ) -> None:
        self._defaults = defaults
        """Declared start values: the journal's ADDs start from them as the direct ones do."""
        self._notifications = notifications_table
        """Where a crossing page's notifications go (declared thresholds; None: no page of crossings is written)."""
        self._client = client
        self._counters = counters_table
        self._markers = markers_table
        self._ttl = marker_ttl_seconds

    def _journal_expiry(self, lease_until_ms: int) -> int:
        # Markers are claimed only while the header is PREPARING, i.e. before the lease ends, and expire
        # ttl after their claim; journal items expire ttl + grace after the lease: always later.
        return lease_until_ms // 1000 + self._ttl + JOURNAL_GRACE_SECONDS

    # ------------------------------------------------------------------------------------ claiming
    def open(self, batch_id: str, lease_until_ms: int, claims: Sequence[Claim], now_ms: int) -> None:
        """Create the header (PREPARING) and claim the first messages, atomically."""
        header: TransactWriteItemTypeDef = {
            "Put": {
                "TableName": self._markers,
                "Item": {
                    LEDGER_ID: {"S": header_id(batch_id)},
                    HEADER_STATE: {"S": BatchState.PREPARING},
                    HEADER_LEASE_UNTIL: {"N": str(lease_until_ms)},
                    EXPIRES_AT: {"N": str(self._journal_expiry(lease_until_ms))},
                },
                "ConditionExpression": "attribute_not_exists(#id)",
                "ExpressionAttributeNames": {"#id": LEDGER_ID},
            }
        }
        self._transact([(header, Role("batch", batch_id)), *self._claim_actions(batch_id, claims, now_ms)])

    def claim(self, batch_id: str, claims: Sequence[Claim], now_ms: int) -> None:
        """Claim more messages, on the condition that the batch is still PREPARING (not aborted)."""
        check = batch_state_check(self._markers, batch_id, BatchState.PREPARING)
        self._transact([check, *self._claim_actions(batch_id, claims, now_ms)])

    def _claim_actions(
        self, batch_id: str, claims: Sequence[Claim], now_ms: int
    ) -> list[tuple[TransactWriteItemTypeDef, Role]]:
        expires_at = now_ms // 1000 + self._ttl
        # One action per marker item: a block's claims share one (tally.core.numbered_ids).
        actions = marker_actions(self._markers, claims, now_ms, expires_at, batch_id=batch_id)
        checked: set[str] = set()
        for claim in claims:
            if claim.replaces is not None and claim.replaces not in checked:
                # The replaced marker counts as absent only because its batch is aborted (or, past its
                # horizon, its header is gone): check it here, once per batch (DynamoDB refuses two
                # operations on one item in a transaction).
                checked.add(claim.replaces)
                actions.append(replaced_batch_check(self._markers, claim.replaces))
        return actions

    # ---------------------------------------------------------------------------------- committing
    def commit_single(self, batch_id: str, increments: Totals) -> None:
        """PREPARING -> DONE together with every ADD of a batch that fits one transaction (no pages)."""
        self._transact([self._transition(batch_id, BatchState.PREPARING, BatchState.DONE), *self._adds(increments)])

    def write_pages(self, batch_id: str, pages: Sequence[JournalPage], lease_until_ms: int) -> None:
        """Store every apply chunk's page before the commit, so anyone can finish the batch."""
        self._put_all(self._page_items(batch_id, pages, lease_until_ms))

    def write_spill(self, batch_id: str, pages: Sequence[CrossingPage], lease_until_ms: int) -> None:
        """The pages of a spill and its header, ``COMMITTED`` with those pages as its chunks (``Spill``).

        Written before the transaction that commits the spill's messages and writes their markers naming the
        batch: until then nothing names it (an orphan of a transaction that never committed counts nothing and
        expires), and from then on whoever meets one of those markers finishes it."""
        header = {
            LEDGER_ID: {"S": header_id(batch_id)},
            HEADER_STATE: {"S": BatchState.COMMITTED},
            HEADER_LEASE_UNTIL: {"N": str(lease_until_ms)},
            HEADER_CHUNKS: {"N": str(len(pages))},
            EXPIRES_AT: {"N": str(self._journal_expiry(lease_until_ms))},
        }
        self._put_all([*self._page_items(batch_id, pages, lease_until_ms), header])

    def _page_items(self, batch_id: str, pages: Sequence[JournalPage], lease_until_ms: int) -> list[dict[str, Any]]:
        expires_at = str(self._journal_expiry(lease_until_ms))
        return [
            {
                LEDGER_ID: {"S": page_id(batch_id, index)},
                **(
                    {PAGE_CROSSINGS: {"B": encode_crossings(page.crossings)}}
                    if isinstance(page, CrossingPage)
                    else {PAGE_DATA: {"B": encode_page(page)}}
                ),
                EXPIRES_AT: {"N": expires_at},
            }
            for index, page in enumerate(pages)
        ]

    def _put_all(self, items: Sequence[dict[str, Any]]) -> None:
        requests: list[Any] = [{"PutRequest": {"Item": item}} for item in items]
        for start in range(0, len(requests), BATCH_WRITE_MAX_ITEMS):
            # Rewriting a page is harmless (same content), so a throttled write is simply retried whole.
            try:
                response = self._client.batch_write_item(
                    RequestItems={self._markers: requests[start : start + BATCH_WRITE_MAX_ITEMS]}
                )
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            if response.get("UnprocessedItems"):
                raise RetryableStoreError("journal pages left unprocessed (throttled)")

    def commit(self, batch_id: str, chunk_count: int, first_chunk: Totals, lease_until_ms: int) -> None:
        """PREPARING -> COMMITTED, atomically with applying chunk 0 (and recording that it is applied)."""
        transition = self._transition(batch_id, BatchState.PREPARING, BatchState.COMMITTED, chunks=chunk_count)
        self._transact([transition, self._applied_put(batch_id, 0, lease_until_ms), *self._adds(first_chunk)])

    def add_chunk(self, batch_id: str, index: int, page: JournalPage, lease_until_ms: int) -> None:
        """Apply chunk ``index`` of a COMMITTED batch once (its increments, or the crossings it records): raises
        ChunkAppliedError if it already was."""
        writes = self._records(page.crossings) if isinstance(page, CrossingPage) else self._adds(page)
        self._transact([self._applied_put(batch_id, index, lease_until_ms), *writes])

    def _records(self, crossings: Sequence[Crossing]) -> list[tuple[TransactWriteItemTypeDef, Role]]:
        """The notification items of a crossing page, as the transaction that committed them would have written
        them (their expiry from the crossing's time, as the marker's)."""
        if self._notifications is None:
            raise StoreError("a journal page of crossings, and no notifications table to record them in")
        table = self._notifications
        return [notification_put(table, crossing, crossing.at_ms // 1000 + self._ttl) for crossing in crossings]

    def commit_header(self, batch_id: str, chunk_count: int) -> None:
        """PREPARING -> FENCED of a fenced batch, alone: a plain conditional ``UpdateItem`` (1 write unit)."""
        self._header_update(batch_id, BatchState.PREPARING, BatchState.FENCED, {HEADER_CHUNKS: str(chunk_count)})

    def mark_done(self, batch_id: str, now_ms: int) -> None:
        """FENCED -> DONE of a fenced batch, with when (``done_at``, which prunes of its marks wait on); a batch
        already DONE is fine."""
        try:
            self._header_update(batch_id, BatchState.FENCED, BatchState.DONE, {HEADER_DONE_AT: str(now_ms)})
        except BatchStateError:
            record = self.read(batch_id)
            if record is None or record.state is not BatchState.DONE:
                raise

    def _header_update(self, batch_id: str, expected: BatchState, new: BatchState, numbers: dict[str, str]) -> None:
        names = {"#state": HEADER_STATE, **{f"#n{i}": name for i, name in enumerate(numbers)}}
        values: dict[str, Any] = {":new": {"S": new}, ":expected": {"S": expected}}
        values.update({f":n{i}": {"N": value} for i, value in enumerate(numbers.values())})
        sets = ["#state = :new", *(f"#n{i} = :n{i}" for i in range(len(numbers)))]
        try:
            self._client.update_item(
                TableName=self._markers,
                Key={LEDGER_ID: {"S": header_id(batch_id)}},
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="#state = :expected",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise BatchStateError(f"batch {batch_id} is not {expected}") from exc
            raise translate(exc) from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc

    def apply_fenced(self, write: FencedWrite) -> FenceAnswer:
        """One part of one item of a fenced batch, as one plain conditional ``UpdateItem`` (``fenced_update``);
        refused, the item's marks as they were, for the core to read why (``tally.core.fence.refusal``)."""
        try:
            answer = self._client.update_item(**fenced_update(self._counters, write))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise translate(exc) from exc
            found: RawItem = exc.response.get("Item", {})  # type: ignore[assignment]  # ALL_OLD: botocore types it loosely
            return FenceAnswer(committed=False, fence=fence_from_item(found))
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return FenceAnswer(committed=True, fence=fence_from_item(answer.get("Attributes", {})))

    def read_marks(self, items: Sequence[ItemKey], epoch: str) -> dict[ItemKey, int]:
        """``epoch``'s mark on each of ``items`` that has one: eventually consistent ``BatchGetItem``s of 100 (half
        the read units of a consistent read), only the keys and the mark projected. What a finisher reads before
        sending a FENCED batch's parts (``tally.core.fence.still_to_send``): a mark read is one some write set, and
        one missed only costs a write the condition refuses."""
        mark = fence_attribute(epoch)
        keys = {item: item_key(item) for item in items}
        wanted = {item_where(key): key for key in keys.values()}  # two ItemKeys of one item: asked once
        found = {
            item_where(raw): int(raw[mark]["N"])
            for raw in batch_get(
                self._client,
                self._counters,
                list(wanted.values()),
                consistent=False,
                attributes=(PARTITION_KEY, SORT_KEY, mark),
            )
            if mark in raw
        }
        return {item: found[item_where(key)] for item, key in keys.items() if item_where(key) in found}

    def refuse_chunk(self, batch_id: str, index: int, reason: str, lease_until_ms: int) -> None:
        """Record that DynamoDB refuses chunk ``index`` (a counter would leave the Number range)."""
        self._transact([self._applied_put(batch_id, index, lease_until_ms, refused=reason[:1000] or "refused")])

    def finish(self, batch_id: str) -> None:
        """COMMITTED -> DONE once every chunk is applied (a batch already DONE is fine): one plain conditional
        ``UpdateItem`` of the header, 1 write unit where a one-action transaction costs 2; nothing else is written
        with it, so nothing needs a transaction's atomicity."""
        try:
            self._header_update(batch_id, BatchState.COMMITTED, BatchState.DONE, {})
        except BatchStateError:
            record = self.read(batch_id)
            if record is None or record.state is not BatchState.DONE:
                raise

    def abort(self, batch_id: str, now_ms: int, *, expired_only: bool) -> bool:
        """PREPARING -> ABORTED (another's batch only once its lease has expired); True if it is aborted."""
        condition = "#state = :preparing" + (" AND #lease < :now" if expired_only else "")
        values: dict[str, Any] = {":preparing": {"S": BatchState.PREPARING}, ":aborted": {"S": BatchState.ABORTED}}
        names = {"#state": HEADER_STATE}
        if expired_only:
            values[":now"] = {"N": str(now_ms)}
            names["#lease"] = HEADER_LEASE_UNTIL
        try:
            self._client.update_item(
                TableName=self._markers,
                Key={LEDGER_ID: {"S": header_id(batch_id)}},
                UpdateExpression="SET #state = :aborted",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise translate(exc) from exc
            record = self.read(batch_id)
            return record is not None and record.state is BatchState.ABORTED
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return True

    # --------------------------------------------------------------------------------------- reads
    def read(self, batch_id: str) -> BatchRecord | None:
        """The header of ``batch_id`` (strongly consistent), or None if there is none."""
        try:
            item = self._client.get_item(
                TableName=self._markers, Key={LEDGER_ID: {"S": header_id(batch_id)}}, ConsistentRead=True
            ).get("Item")
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        return None if item is None else _header_record(batch_id, item)

    def read_headers(self, batch_ids: Sequence[str]) -> dict[str, BatchRecord | None]:
        """The headers of ``batch_ids`` (strongly consistent ``BatchGetItem``s of 100), None for each that has none:
        one request where ``read`` would send one per batch."""
        found = _header_items(self._client, self._markers, batch_ids)
        return {
            batch_id: None if (item := found[batch_id]) is None else _header_record(batch_id, item)
            for batch_id in found
        }

    def read_progress(self, batch_id: str, chunk_count: int) -> tuple[list[JournalPage], set[int]]:
        """The pages of a committed batch and the indexes of its chunks already applied (or refused)."""
        ids = [page_id(batch_id, i) for i in range(chunk_count)] + [applied_id(batch_id, i) for i in range(chunk_count)]
        keys = [{LEDGER_ID: {"S": item_id}} for item_id in ids]
        found = {item[LEDGER_ID]["S"]: item for item in batch_get(self._client, self._markers, keys)}
        pages: list[JournalPage] = []
        for index in range(chunk_count):
            page = found.get(page_id(batch_id, index))
            if page is None:
                raise StoreError(f"journal page {index} of committed batch {batch_id} is missing")
            crossings = page.get(PAGE_CROSSINGS)
            if crossings is not None:
                pages.append(CrossingPage(decode_crossings(crossings["B"])))
            else:
                pages.append(decode_page(page[PAGE_DATA]["B"]))
        applied = {index for index in range(chunk_count) if applied_id(batch_id, index) in found}
        return pages, applied

    def read_counters(self, items: Sequence[ItemKey]) -> dict[ItemKey, dict[str, Decimal]]:
        """The stored counters of ``items`` (strongly consistent ``BatchGetItem``s of 100); absent: none.

        Read before a multi-chunk commit, so that a later chunk DynamoDB would refuse (a sum leaving the
        Number range) is found while the batch can still be aborted. An absent counter
        with a declared start value reads as its start: that is what its write adds to.
        """
        by_key = {item_where(item_key(item)): item for item in items}
        stored_items = batch_get(self._client, self._counters, [item_key(item) for item in items])
        found = {by_key[item_where(stored)]: item_counters(stored) for stored in stored_items}
        if self._defaults.has_starts:
            # What a started counter's write adds to when it is absent: its start, not zero.
            for item in items:
                parts = item_parts(item)
                if parts.window != ALL_TIME or parts.shard != 0:
                    continue
                starts = self._defaults.starts(parts.key)
                counters = found.setdefault(item, {})
                for name, start in starts.items():
                    counters.setdefault(name, Decimal(start))
        return found

    # ------------------------------------------------------------------------------------- helpers
    def _transition(
        self, batch_id: str, expected: BatchState, new: BatchState, chunks: int | None = None
    ) -> tuple[TransactWriteItemTypeDef, Role]:
        names = {"#state": HEADER_STATE}
        values: dict[str, Any] = {":new": {"S": new}, ":expected": {"S": expected}}
        expression = "SET #state = :new"
        if chunks is not None:
            expression += ", #chunks = :chunks"
            names["#chunks"] = HEADER_CHUNKS
            values[":chunks"] = {"N": str(chunks)}
        return {
            "Update": {
                "TableName": self._markers,
                "Key": {LEDGER_ID: {"S": header_id(batch_id)}},
                "UpdateExpression": expression,
                "ConditionExpression": "#state = :expected",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }, Role("batch", batch_id)

    def _applied_put(
        self, batch_id: str, index: int, lease_until_ms: int, refused: str | None = None
    ) -> tuple[TransactWriteItemTypeDef, Role]:
        item: dict[str, Any] = {
            LEDGER_ID: {"S": applied_id(batch_id, index)},
            EXPIRES_AT: {"N": str(self._journal_expiry(lease_until_ms))},
        }
        if refused is not None:
            item[APPLIED_REFUSED] = {"S": refused}
        return {
            "Put": {
                "TableName": self._markers,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(#id)",
                "ExpressionAttributeNames": {"#id": LEDGER_ID},
            }
        }, Role("applied", batch_id)

    def _adds(self, increments: Totals) -> list[tuple[TransactWriteItemTypeDef, Role]]:
        return [
            add_update(self._counters, key, counters, self._defaults.starts(item_parts(key).key))
            for key, counters in increments.items()
        ]

    def _transact(self, actions: Sequence[tuple[TransactWriteItemTypeDef, Role]]) -> None:
        try:
            self._client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, [role for _, role in actions]) from exc


def _header_items(
    client: DynamoDBClient, markers_table: str, batch_ids: Iterable[str], attributes: Sequence[str] = ()
) -> dict[str, RawItem | None]:
    """Batch id -> its header item (only ``attributes`` when given), None where it has none: strongly consistent
    ``BatchGetItem``s of 100, each id asked once, in id order."""
    wanted = {header_id(batch_id): batch_id for batch_id in sorted(set(batch_ids))}
    if not wanted:
        return {}
    keys = [{LEDGER_ID: {"S": ledger_id}} for ledger_id in wanted]
    found = {item[LEDGER_ID]["S"]: item for item in batch_get(client, markers_table, keys, attributes=attributes)}
    return {batch_id: found.get(ledger_id) for ledger_id, batch_id in wanted.items()}


def _header_record(batch_id: str, item: RawItem) -> BatchRecord:
    chunks = item.get(HEADER_CHUNKS)
    return BatchRecord(
        batch_id=batch_id,
        state=BatchState(item[HEADER_STATE]["S"]),
        lease_until_ms=int(item[HEADER_LEASE_UNTIL]["N"]),
        chunks=int(chunks["N"]) if chunks is not None else 0,
        done_at_ms=int(item[HEADER_DONE_AT]["N"]) if HEADER_DONE_AT in item else None,
    )


LANDED_STATES: Final = frozenset({BatchState.DONE})
"""Header states that say every item write of a batch has landed (DONE is written after the last of them)."""


def landed_batches(client: DynamoDBClient, markers_table: str, batch_ids: Iterable[str]) -> set[str]:
    """Which of ``batch_ids`` have landed every item write, by their headers in ``markers_table`` (strongly
    consistent ``BatchGetItem``s): DONE, or no header at all. A header is deleted by its TTL only after every
    marker of its batch (``JOURNAL_GRACE_SECONDS``), so once it is gone no finisher can meet a marker and land
    what is missing: what landed then is all that ever will."""
    headers = _header_items(client, markers_table, batch_ids, attributes=(LEDGER_ID, HEADER_STATE))
    return {
        batch_id
        for batch_id, item in headers.items()
        if item is None or BatchState(item[HEADER_STATE]["S"]) in LANDED_STATES
    }
