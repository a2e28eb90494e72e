"""DynamoDB requests shared by the adapters, and the one translation of DynamoDB errors into tally's.

``batch_get`` is the one ``BatchGetItem`` loop (the reader, the counter store and the journal use it);
``translate`` reads a failed call, cancellation reasons included, into the hierarchy in ``tally.errors``;
``scan_all_time_items`` is the whole-table read of batch jobs and operators.
"""

from __future__ import annotations

import random
import re
import time
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from tally.core.items import (
    ALL_TIME,
)
from tally.core.ledger import MarkerMet, MarkersExistError
from tally.core.limits import BATCH_GET_MAX_KEYS
from tally.core.plan import ConditionRefusedError
from tally.errors import (
    BatchStateError,
    ChunkAppliedError,
    RetryableStoreError,
    StoreError,
    WriteRejectedError,
)
from tally.store.markers import marker_records
from tally.store.schema import (
    PARTITION_KEY,
    SORT_KEY,
    VIEW_PARTITION_MARK,
    item_read,
    view_window_prefix,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.items import ItemKey
    from tally.core.write import ItemRead
    from tally.store.actions import Role
    from tally.store.schema import RawItem


# How DynamoDB words a number it cannot store, a counter an ADD would take out of the Number range among them
# (AWS: "Attempting to store more than 38 significant digits in a Number", "Number overflow. ..."; DynamoDB Local:
# "DynamoDB only supports precision up to 38 digits"): only to choose the dead letter's code.
NUMBER_RANGE: Final = re.compile(r"Number overflow|Number underflow|significant digits|precision", re.IGNORECASE)


_Reason: TypeAlias = "Mapping[str, Any]"
"""One of a cancelled transaction's ``CancellationReasons`` (its ``Code``, ``Message`` and, for a failed condition
asked so, the ``Item`` as it was): botocore's plain dictionary."""


# Cancellation reason codes that refuse the transaction and say why: a condition, or a retry can get past.
_CONDITION_REASON: Final = "ConditionalCheckFailed"


# Cancellation reason codes that a retry can get past (DynamoDB documents these for TransactWriteItems).
RETRYABLE_REASONS: Final = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
)


# Whole-request error codes that a retry can get past; botocore has already retried most of them.
_RETRYABLE_ERRORS: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "TransactionInProgressException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


_T = TypeVar("_T")


class Attempt(Protocol):
    """Runs one request of a post-commit write (a gauge update, a member read or transaction, a window move's read
    or transaction), and again while it fails for now (``RetryableStoreError``), as long as its caller's policy
    allows; returns what the request returns, raises the last error when it gives up. The store sends every
    request through it; the caller (``tally.post_commit``: ``SettledBatch.attempt``) decides whether a request
    may start at all, how often and how long."""

    def __call__(self, send: Callable[[], _T], /) -> _T: ...


def send_once(send: Callable[[], _T]) -> _T:
    """The ``Attempt`` of a caller with no retry policy and no deadline (an operator's command): one send."""
    return send()


BATCH_GET_MAX_ROUNDS: Final = 8
"""Calls per chunk before keys DynamoDB keeps leaving unprocessed are a ``RetryableStoreError``."""


_BATCH_GET_PAUSE_S: Final = 0.05


_BATCH_GET_MAX_PAUSE_S: Final = 1.0


def query_pages(client: DynamoDBClient, request: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every item a ``Query`` (``request``: its parameters) finds, page after page; ``ClientError`` translated."""
    kwargs = dict(request)
    while True:
        try:
            response = client.query(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Iterable[Mapping[str, Any]],
    *,
    consistent: bool = True,
    attributes: Sequence[str] = (),
    sleep: Callable[[float], object] = time.sleep,
) -> list[RawItem]:
    """Every stored item of ``keys`` in ``table``: ``BatchGetItem``s of at most 100 keys (strongly consistent
    unless ``consistent=False``; only ``attributes`` when given, which must name the key attributes for the answer
    to be matched to its keys), the keys DynamoDB leaves unprocessed asked again; errors translated once,
    here. The one BatchGetItem loop of tally: the reader, the counter store and the journal all use it.

    A partly throttled ``BatchGetItem`` succeeds with ``UnprocessedKeys`` (botocore retries only a call that
    failed as a whole): they are asked again after a pause drawn from a doubling ceiling (full jitter), as
    AWS asks, and after ``BATCH_GET_MAX_ROUNDS`` calls the read fails as retryable instead of spinning for the
    rest of the invocation.

    ``keys`` is read 100 at a time, so a caller may pass a generator: a 10,000-record batch's marker keys,
    built at once, cost 2.4 MB of peak memory (``bench.memory``).
    """
    items: list[RawItem] = []
    pending = iter(keys)
    while page := list(islice(pending, BATCH_GET_MAX_KEYS)):
        request: Any = {table: {"Keys": page, "ConsistentRead": consistent, **_projection(attributes)}}
        for round_ in range(1, BATCH_GET_MAX_ROUNDS + 1):
            try:
                response = client.batch_get_item(RequestItems=request)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            items.extend(response.get("Responses", {}).get(table, []))
            request = response.get("UnprocessedKeys") or None
            if request is None:
                break
            if round_ < BATCH_GET_MAX_ROUNDS:
                sleep(random.uniform(0, min(_BATCH_GET_MAX_PAUSE_S, _BATCH_GET_PAUSE_S * 2**round_)))
        else:
            left = len(request.get(table, {}).get("Keys", []))
            raise RetryableStoreError(f"{left} keys left unprocessed by {BATCH_GET_MAX_ROUNDS} BatchGetItem calls")
    return items


def _projection(attributes: Sequence[str]) -> dict[str, Any]:
    """A ``ProjectionExpression`` of ``attributes``, every name through a placeholder (an epoch's mark is named
    with bytes DynamoDB reserves in expressions); nothing when none are named (the whole item)."""
    if not attributes:
        return {}
    names = {f"#p{index}": name for index, name in enumerate(attributes)}
    return {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}


def _markers_in_the_way(
    role: Role, old_item: Mapping[str, Any], met: dict[str, MarkerMet], vanished: set[str]
) -> set[str]:
    """The messages of a cancelled marker or block action whose own condition failed (from ``ALL_OLD``), what
    each marker says put in ``met``.

    A message whose attribute exists failed ``attribute_not_exists``, unless it claimed to replace an aborted
    batch's marker and the marker still names that batch. A replacing claim whose marker is gone failed too:
    it is named in ``vanished`` (TTL deleted the marker since it was read), never reported as a marker without
    a batch, which would read as a direct marker, that is, applied.
    """
    if role.kind == "marker":
        # Its own item: no item in the reason means no marker at all (a replacing claim whose marker TTL deleted).
        found = marker_records(old_item, [role.name]).get(role.name) if old_item else None
        if found is None:
            vanished.add(role.name)
        else:
            met[role.name] = MarkerMet.of(found)
        return {role.name}
    stood: set[str] = set()
    records = marker_records(old_item, [claim.message_id for claim in role.claims]) if old_item else {}
    for claim in role.claims:
        message_id, replaces = claim.message_id, claim.replaces
        record = records.get(message_id)
        if record is None:
            if replaces is not None:
                stood.add(message_id)
                vanished.add(message_id)
            continue
        if replaces is not None and record.batch_id == replaces:
            continue
        stood.add(message_id)
        met[message_id] = MarkerMet.of(record)
    return stood


def translate(exc: Exception, roles: Sequence[Role] = ()) -> StoreError:
    """Turn a failed DynamoDB call into tally's errors, reading cancellation reasons by position."""
    if not isinstance(exc, ClientError):
        if isinstance(exc, BotoConnectionError | BotoCoreError):
            # The request may or may not have committed; conditions make the retry safe either way.
            return RetryableStoreError(f"outcome unknown: {exc}")
        return StoreError(str(exc))
    error = exc.response.get("Error", {})
    code = error.get("Code", "")
    message = error.get("Message", "")
    if code != "TransactionCanceledException":
        if code == "ValidationException":
            # DynamoDB refuses the request as sent, whatever the wording (a number it cannot store, a size, an
            # expression limit, a key too long, two actions on one item, and any rule not listed here), for the
            # whole request, without naming the action. The same request is refused again on every attempt: the
            # caller settles the message it carries, or isolates the culprit among several (failing the batch
            # would fail it, and its innocent neighbours, on every delivery).
            return WriteRejectedError(message or code, number_range=NUMBER_RANGE.search(message) is not None)
        if code in _RETRYABLE_ERRORS:
            return RetryableStoreError(f"{code}: {message}")
        return StoreError(f"{code}: {message}")
    cancellation = _Cancellation()
    for role, reason in zip(roles, exc.response.get("CancellationReasons", []), strict=False):
        cancellation.read(role, reason)
    return cancellation.error()


class _Cancellation:
    """What a cancelled transaction's reasons say, read one action (by its ``Role``) at a time, then the one error
    they make: markers in the way first, then a batch not in its state, an apply chunk applied, a refused condition,
    a request refused as sent, a conflict or throttling."""

    def __init__(self) -> None:
        self.markers: set[str] = set()
        self.met: dict[str, MarkerMet] = {}
        self.vanished: set[str] = set()
        self.failed_batch: str | None = None
        self.applied_failed = False
        self.rejected = False
        self.details: list[str] = []
        self.refused: dict[ItemKey, ItemRead | None] = {}
        self.out_of_range = True
        self.retryable = False

    def read(self, role: Role, reason: _Reason) -> None:
        code = reason.get("Code") or "None"
        if code == "None":
            return
        if code == _CONDITION_REASON:
            _CONDITIONS.get(role.kind, _Cancellation.unexpected)(self, role, reason)
        elif code in RETRYABLE_REASONS:
            self.retryable = True
        else:
            # ``ValidationError`` (a number, a size, a key: on any action), ``ItemCollectionSizeLimitExceeded``,
            # or a code not documented yet: this action is refused as sent, on every attempt (settled like a
            # whole-request ``ValidationException``).
            self.rejected = True
            text = str(reason.get("Message", "")) or code
            self.details.append(text if role.kind == "add" else f"{code} on {role.kind} {role.name!r}: {text}")
            self.out_of_range = self.out_of_range and NUMBER_RANGE.search(text) is not None

    def marker(self, role: Role, reason: _Reason) -> None:
        stood = _markers_in_the_way(role, reason.get("Item", {}), self.met, self.vanished)
        self.markers.update(stood)
        if not stood:
            self.details.append(f"block condition failed without a marker in the way: {reason.get('Message', '')}")

    def batch(self, role: Role, reason: _Reason) -> None:
        self.failed_batch = role.name

    def applied_chunk(self, role: Role, reason: _Reason) -> None:
        self.applied_failed = True

    def condition(self, role: Role, reason: _Reason) -> None:
        """A counter item's condition (a bound, a level, no move since): the item as it met it, if there was one."""
        if role.item is None:
            self.unexpected(role, reason)
            return
        found = reason.get("Item")
        self.refused[role.item] = item_read(found) if found is not None else None

    def unexpected(self, role: Role, reason: _Reason) -> None:
        """A condition tally never sets on such an action: a defect, never settled as a message's fate."""
        self.details.append(
            f"{reason.get('Code')} on {role.kind} {role.name or role.item!r}: {reason.get('Message', '')}"
        )

    def error(self) -> StoreError:
        if self.markers:
            return MarkersExistError(self.met, frozenset(self.vanished))
        if self.failed_batch is not None:
            return BatchStateError(self.failed_batch)
        if self.applied_failed:
            return ChunkAppliedError("apply chunk already applied")
        if self.refused and not self.rejected:
            return ConditionRefusedError(self.refused)
        if self.rejected:
            return WriteRejectedError("; ".join(self.details), number_range=self.out_of_range)
        if self.retryable:
            return RetryableStoreError("transaction cancelled by a conflict or throttling")
        return StoreError("transaction cancelled: " + ("; ".join(self.details) or "no reason given"))


_CONDITIONS: Final[Mapping[str, Callable[[_Cancellation, Role, _Reason], None]]] = {
    "marker": _Cancellation.marker,
    "block": _Cancellation.marker,
    "batch": _Cancellation.batch,
    "add": _Cancellation.condition,
    "applied": _Cancellation.applied_chunk,
}
"""How a failed condition reads, by what its action does (a marker in the way, a batch not in its state...)."""


def scan_all_time_items(client: DynamoDBClient, table: str, *, views: bool = False) -> Iterator[Mapping[str, Any]]:
    """Every key's all-time item (and a hot key's shard items), strongly consistent: a whole-table ``Scan``
    that reads the window items too and keeps only ``sk = all`` (for batch jobs and operators, never a
    request path); with ``views``, every view's all-time items too (``sk`` beginning ``all\x1f``)."""
    # A view's all-time item: its sort key begins ``all\x1f`` and its partition holds the view mark (a distinct-count
    # member's sort key may begin ``all\x1f`` too, in a partition without it: a key never holds U+001F).
    condition = "#sk = :all OR (begins_with(#sk, :view) AND contains(#pk, :mark))" if views else "#sk = :all"
    values = {":all": {"S": ALL_TIME}}
    if views:
        values |= {":view": {"S": view_window_prefix(ALL_TIME)}, ":mark": {"S": VIEW_PARTITION_MARK}}
    pages = client.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression=condition,
        ExpressionAttributeNames={"#sk": SORT_KEY, "#pk": PARTITION_KEY} if views else {"#sk": SORT_KEY},
        ExpressionAttributeValues=values,
        ConsistentRead=True,
    )
    try:
        for page in pages:
            yield from page.get("Items", [])
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc) from exc
