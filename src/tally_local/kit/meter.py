"""Count every DynamoDB request a peer makes and bill it, through botocore's event hooks.

The hooks sit on one boto3 client (the one the peer under test was given), so the code under test is
unmodified and every peer is measured the same way, Powertools' own idempotency-table reads and writes
included:

- ``before-parameter-build``: keeps the request's parameters for the bill, and asks DynamoDB Local for
  its own ``ConsumedCapacity`` (``ReturnConsumedCapacity=TOTAL``; it changes no write or read), kept
  beside the computed figure as a cross-check;
- ``before-send``: counts HTTP attempts (botocore's own retries included);
- ``after-call``: bills the call from its parameters, its outcome and the shadow of the items
  (``tally_local.kit.shadow``), then applies a successful write to the shadow.

A cancelled transaction wrote nothing but was prepared: it is billed one write unit per item per
started KB (the prepare half of a transactional write; AWS does not document the charge) and reported
apart, so a reader can re-bill it either way.

Given a ``classify`` for a table (``track``), the meter also adds up every write per class of item (a marker, a
journal page, a view's item...): how many, their write units, their sizes and how many were billed past 1 KB
(``Usage.by_class``), so a benchmark can say which items a difference in write units comes from.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from tally.cost.capacity import WRITE_UNIT_BYTES, item_size, read_units, transactional_write_units, write_units
from tally_local.kit.shadow import Expression, ShadowTables, UnsupportedRequest, apply_update

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.cost.capacity import Item

_CONTEXT_KEY: Final = "bench_meter_request"
_DATA_PLANE: Final = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "Query",
        "Scan",
    }
)
_SINGLE_ITEM: Final = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem"})
_TOLERANCE: Final = 1e-9


@dataclass(frozen=True, slots=True)
class ClassUsage:
    """The writes of one class of item (``DynamoDBMeter.track``'s ``classify``)."""

    writes: int
    """Items written (each action of a transaction, each put or delete of a batch write, each single write)."""
    write_units: float
    smallest_bytes: int
    largest_bytes: int
    """The item sizes billed (the larger of before and after)."""
    over_one_kb: int
    """Writes billed on more than 1 KB (a second write unit, or more)."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What a peer's run cost, in requests and capacity units."""

    calls: Mapping[str, int]
    """API calls per operation (after botocore's retries)."""
    attempts: int
    """HTTP requests sent (one per call, plus botocore's retries)."""
    write_units: float
    """Committed writes plus failed conditional writes plus the prepare half of cancelled transactions."""
    read_units: float
    cancelled_transactions: int
    cancelled_write_units: float
    """The share of ``write_units`` billed for cancelled transactions (their prepare phase)."""
    conditional_failures: int
    transaction_items: int
    transaction_write_units: float
    """Write units of committed transactions (2 per item per KB)."""
    largest_item_bytes: int
    """The largest item a single-item or transactional write touched (batch-written journal pages aside)."""
    local_reported_single_item: float
    """DynamoDB Local's own ``ConsumedCapacity`` for single-item calls: it should equal the next figure."""
    computed_single_item: float
    single_item_mismatches: int
    """Single-item calls where DynamoDB Local's figure and the computed one differ (should be 0)."""
    local_reported_transactions: float
    """DynamoDB Local's figure for ``TransactWriteItems`` (known to be wrong: shown, never used)."""
    cancellation_reasons: Mapping[str, int] = field(default_factory=dict)
    """Why transactions were cancelled: ``"<reason code> on <table alias>"`` -> how many actions."""
    written_items: int = 0
    """Items written: transaction actions (cancelled ones included), batch-written puts and deletes, single writes."""
    by_class: Mapping[str, ClassUsage] = field(default_factory=dict)
    """Writes per class of item, on the tables ``track`` was given a ``classify`` for."""

    @property
    def requests(self) -> int:
        return self.attempts


class DynamoDBMeter:
    """Bills the DynamoDB calls of the clients it is attached to."""

    def __init__(self) -> None:
        self.shadow = ShadowTables()
        self._aliases: dict[str, str] = {}
        self._classify: dict[str, Callable[[Item], str]] = {}
        self._lock = threading.Lock()
        """The pipeline sends a round's direct transactions from several threads (``TALLY_WRITE_CONCURRENCY``):
        each call is billed whole under this lock, so no count is lost to an interleaving."""
        self.reset()

    def track(
        self,
        table: str,
        key_names: Sequence[str],
        alias: str | None = None,
        *,
        classify: Callable[[Item], str] | None = None,
    ) -> None:
        """Bill calls on ``table`` (key attribute names, partition key first); ``alias`` names it in reports;
        ``classify`` (an item's primary key -> its class) adds its writes up per class (``Usage.by_class``)."""
        self.shadow.track(table, key_names)
        self._aliases[table] = alias or table
        if classify is not None:
            self._classify[table] = classify

    def reset(self) -> None:
        """Zero the counters (the shadow keeps the items: it mirrors the tables, not the run)."""
        self._calls: Counter[str] = Counter()
        self._attempts = 0
        self._write_units = 0.0
        self._read_units = 0.0
        self._cancelled = 0
        self._cancelled_units = 0.0
        self._conditional_failures = 0
        self._transaction_items = 0
        self._transaction_units = 0.0
        self._largest = 0
        self._reported_single = 0.0
        self._computed_single = 0.0
        self._mismatches = 0
        self._reported_transactions = 0.0
        self._reasons: Counter[str] = Counter()
        self._written = 0
        self._classes: dict[str, ClassUsage] = {}
        self.unsupported: list[str] = []  # requests the meter could not bill: the run is then invalid
        self.overhead_s = 0.0  # time spent billing inside the hooks: the suite subtracts it from the handler's

    def usage(self) -> Usage:
        return Usage(
            calls=dict(self._calls),
            attempts=self._attempts,
            write_units=self._write_units,
            read_units=self._read_units,
            cancelled_transactions=self._cancelled,
            cancelled_write_units=self._cancelled_units,
            conditional_failures=self._conditional_failures,
            transaction_items=self._transaction_items,
            transaction_write_units=self._transaction_units,
            largest_item_bytes=self._largest,
            local_reported_single_item=self._reported_single,
            computed_single_item=self._computed_single,
            single_item_mismatches=self._mismatches,
            local_reported_transactions=self._reported_transactions,
            cancellation_reasons=dict(self._reasons),
            written_items=self._written,
            by_class=dict(self._classes),
        )

    # ------------------------------------------------------------------------------ botocore hooks
    def attach(self, client: DynamoDBClient) -> None:
        events = client.meta.events
        for event, handler in self._hooks():
            events.register(event, handler, unique_id=f"bench-meter-{id(self)}-{event}")

    def detach(self, client: DynamoDBClient) -> None:
        events = client.meta.events
        for event, _ in self._hooks():
            events.unregister(event, unique_id=f"bench-meter-{id(self)}-{event}")

    @contextmanager
    def attached(self, client: DynamoDBClient) -> Iterator[DynamoDBMeter]:
        """Bill ``client``'s calls while the block runs. A call the meter could not bill makes the run's figures
        wrong: it is raised at the end even if the code under test caught it (Powertools catches per record)."""
        self.attach(client)
        try:
            yield self
        finally:
            self.detach(client)
        if self.unsupported:
            raise UnsupportedRequest(f"the meter could not bill {self.unsupported[0]}")

    def _hooks(self) -> list[tuple[str, Any]]:
        return [
            ("before-parameter-build.dynamodb", self._before_parameter_build),
            ("before-send.dynamodb", self._before_send),
            ("after-call.dynamodb", self._after_call),
        ]

    def _before_parameter_build(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        operation = model.name
        if operation not in _DATA_PLANE:
            return
        # A shallow copy suffices: botocore only reads the parameters, and the callers build fresh ones per call.
        context[_CONTEXT_KEY] = (operation, dict(params))
        params["ReturnConsumedCapacity"] = "TOTAL"

    def _before_send(self, **_: Any) -> None:
        with self._lock:
            self._attempts += 1

    def _after_call(self, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any) -> None:
        request = context.get(_CONTEXT_KEY)
        if request is None:
            return
        with self._lock:
            started = time.perf_counter()
            try:
                self._account(request, parsed)
            except UnsupportedRequest as exc:
                # Kept as well as raised: a peer that catches exceptions per record (Powertools) must not hide it.
                self.unsupported.append(str(exc))
                raise
            finally:
                self.overhead_s += time.perf_counter() - started

    def _account(self, request: tuple[str, Mapping[str, Any]], parsed: Mapping[str, Any]) -> None:
        operation, params = request
        self._calls[operation] += 1
        error = parsed.get("Error", {}).get("Code")
        computed = self._bill(operation, params, parsed, error)
        if operation in _SINGLE_ITEM:
            reported = parsed.get("ConsumedCapacity", {}).get("CapacityUnits")
            if reported is not None:
                self._reported_single += float(reported)
                self._computed_single += computed
                if abs(float(reported) - computed) > _TOLERANCE:
                    self._mismatches += 1
        elif operation == "TransactWriteItems":
            self._reported_transactions += sum(
                float(entry.get("CapacityUnits", 0)) for entry in parsed.get("ConsumedCapacity", [])
            )

    # ------------------------------------------------------------------------------------- billing
    def _bill(self, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None) -> float:
        """Bill one call; returns its units (write or read) for the cross-check."""
        if operation == "GetItem":
            return self._read(params["TableName"], [params["Key"]], consistent=bool(params.get("ConsistentRead")))
        if operation == "BatchGetItem":
            return self._batch_get(params, parsed, error)
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            return self._single_write(operation, params, error)
        if operation == "TransactWriteItems":
            return self._transaction(params, parsed, error)
        if operation == "BatchWriteItem":
            return self._batch_write(params, parsed, error)
        raise UnsupportedRequest(f"{operation} is not billed by the meter")

    def _read(self, table: str, keys: Sequence[Item], *, consistent: bool) -> float:
        units = sum(read_units(item_size(self.shadow.get(table, key)), consistent=consistent) for key in keys)
        self._read_units += units
        return units

    def _batch_get(self, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None) -> float:
        if error is not None:
            return 0.0
        unprocessed = parsed.get("UnprocessedKeys", {})
        units = 0.0
        for table, request in params["RequestItems"].items():
            skipped = unprocessed.get(table, {}).get("Keys", [])
            keys = [key for key in request["Keys"] if key not in skipped]
            units += self._read(table, keys, consistent=bool(request.get("ConsistentRead")))
        return units

    def _batch_write(self, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None) -> float:
        """Each put or delete a standard write of its item (the journal's pages); unprocessed ones cost nothing."""
        if error is not None:
            return 0.0
        unprocessed = parsed.get("UnprocessedItems", {})
        units = 0.0
        for table, requests in params["RequestItems"].items():
            skipped = unprocessed.get(table, [])
            for request in requests:
                if request in skipped:
                    continue
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    key = self.shadow.key_of(table, item)
                    size = max(item_size(self.shadow.get(table, key)), item_size(item))
                    self.shadow.put(table, dict(item))
                else:
                    key = request["DeleteRequest"]["Key"]
                    size = item_size(self.shadow.get(table, key))
                    self.shadow.delete(table, key)
                units += write_units(size)  # not in ``largest_item_bytes``: pages are not counter or marker items
                self._written_one(table, key, size, write_units(size))
        self._write_units += units
        return units

    def _single_write(self, operation: str, params: Mapping[str, Any], error: str | None) -> float:
        table = params["TableName"]
        before, after = self._before_after(operation, params, table)
        size = max(item_size(before), item_size(after))
        self._largest = max(self._largest, size)
        key = self.shadow.key_of(table, params["Item"]) if operation == "PutItem" else params["Key"]
        if error is None:
            self._store(table, operation, params, after)
        elif error == "ConditionalCheckFailedException":
            self._conditional_failures += 1
        else:
            return 0.0  # refused before it touched the item (validation, throttling): not billed
        units = float(write_units(size))
        self._write_units += units
        self._written_one(table, key, size, units)
        return units

    def _transaction(self, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None) -> float:
        actions: list[tuple[str, str, dict[str, Any] | None, int]] = []
        keys: list[Item] = []
        for entry in params["TransactItems"]:
            ((kind, action),) = entry.items()
            table = action["TableName"]
            keys.append(self.shadow.key_of(table, action["Item"]) if kind == "Put" else action["Key"])
            operation = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem"}.get(kind)
            if operation is None:  # ConditionCheck: billed on the item it checks, nothing written
                before = self.shadow.get(table, action["Key"])
                actions.append((table, kind, None, item_size(before)))
                continue
            before, after = self._before_after(operation, action, table)
            actions.append((table, operation, after, max(item_size(before), item_size(after))))
        self._transaction_items += len(actions)
        if error is None:
            units = float(sum(transactional_write_units(size) for *_, size in actions))
            for (table, operation, after, size), entry, key in zip(actions, params["TransactItems"], keys, strict=True):
                self._written_one(table, key, size, float(transactional_write_units(size)))
                self._largest = max(self._largest, size)
                if after is not None or operation == "DeleteItem":
                    ((_, action),) = entry.items()
                    self._store(table, operation, action, after)
            self._write_units += units
            self._transaction_units += units
            return units
        if error == "TransactionCanceledException":
            for (table, *_), reason in zip(actions, parsed.get("CancellationReasons", []), strict=False):
                code = reason.get("Code") or "None"
                if code != "None":
                    self._reasons[f"{code} on {self._aliases.get(table, table)}"] += 1
            prepared = float(sum(write_units(size) for *_, size in actions))
            for (table, *_, size), key in zip(actions, keys, strict=True):
                self._written_one(table, key, size, float(write_units(size)))
            self._cancelled += 1
            self._cancelled_units += prepared
            self._write_units += prepared
            return prepared
        return 0.0

    def _written_one(self, table: str, key: Item, size: int, units: float) -> None:
        """One item written (or prepared, or refused by its condition) and billed ``units``: counted, and added to
        its class if its table has a ``classify``."""
        self._written += 1
        classify = self._classify.get(table)
        if classify is None:
            return
        name = classify(key)
        seen = self._classes.get(name)
        over = int(size > WRITE_UNIT_BYTES)
        self._classes[name] = (
            ClassUsage(1, units, size, size, over)
            if seen is None
            else ClassUsage(
                seen.writes + 1,
                seen.write_units + units,
                min(seen.smallest_bytes, size),
                max(seen.largest_bytes, size),
                seen.over_one_kb + over,
            )
        )

    def _before_after(
        self, operation: str, params: Mapping[str, Any], table: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        if operation == "PutItem":
            item = params["Item"]
            return self.shadow.get(table, self.shadow.key_of(table, item)), dict(item)
        key = params["Key"]
        before = self.shadow.get(table, key)
        if operation == "DeleteItem":
            return before, None
        placeholders = Expression(
            params.get("ExpressionAttributeNames", {}), params.get("ExpressionAttributeValues", {})
        )
        if "UpdateExpression" not in params:
            raise UnsupportedRequest("UpdateItem without an UpdateExpression (AttributeUpdates) is not supported")
        return before, apply_update(before, key, params["UpdateExpression"], placeholders)

    def _store(self, table: str, operation: str, params: Mapping[str, Any], after: dict[str, Any] | None) -> None:
        if operation == "DeleteItem" or after is None:
            self.shadow.delete(table, params["Key"])
        else:
            self.shadow.put(table, after)
