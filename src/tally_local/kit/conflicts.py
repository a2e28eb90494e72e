"""DynamoDB's rule that two transactions on one item at once conflict, which DynamoDB Local does not keep.

DynamoDB cancels a ``TransactWriteItems`` with ``TransactionConflict`` on an action whose item another
transaction in flight writes; DynamoDB Local serialises transactions and never says so. ``InFlightTransactions``
is the registry of what is in flight, shared by every client of a run; ``ConflictEmulator`` applies the rule to
the clients it is attached to (the hot-key benchmark's consumers). The chaos run's fault injector consults the
same registry from its own hooks (``tally_local.chaos.faults``).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING, Any

from tally_local.kit.answers import Answer, cancelled_answer, transaction_items

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_TOKEN = "tally_kit_in_flight"
"""Key, in botocore's per-request context, of the request's token in the registry."""


class InFlightTransactions:
    """The items of the transactions in flight right now, across every client that shares this object."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flying: dict[int, tuple[int, frozenset[str]]] = {}
        self._next = 0
        self.self_overlaps: list[str] = []
        """Conflicts between two transactions of one client: one invocation racing itself (a defect)."""

    def enter(self, client_id: int, items: list[str]) -> tuple[int | None, int | None]:
        """Register a transaction about to be sent: (its token, None), or (None, the index of an action whose
        item another transaction in flight writes: DynamoDB cancels this one with ``TransactionConflict``)."""
        wanted = frozenset(items)
        with self._lock:
            for owner, flying in self._flying.values():
                shared = wanted & flying
                if shared:
                    if owner == client_id:
                        self.self_overlaps.append(f"one invocation sent two transactions on {sorted(shared)[0]}")
                    return None, items.index(sorted(shared)[0])
            self._next += 1
            self._flying[self._next] = (client_id, wanted)
            return self._next, None

    def leave(self, token: int) -> None:
        with self._lock:
            self._flying.pop(token, None)


class ConflictEmulator:
    """Cancels a transaction of an attached client that meets another one in flight, as DynamoDB does."""

    def __init__(self, in_flight: InFlightTransactions | None = None) -> None:
        self.in_flight = in_flight or InFlightTransactions()
        self._lock = threading.Lock()
        self.conflicts = 0
        self.transactions = 0

    def attach(self, client: DynamoDBClient) -> None:
        # A before-call handler may answer in place of the service (botocore's stubs say it returns None).
        before = partial(self._before, client_id=id(client))
        client.meta.events.register("before-call.dynamodb.TransactWriteItems", before)  # type: ignore[arg-type]
        client.meta.events.register("after-call.dynamodb.TransactWriteItems", self._after)

    def _before(self, params: dict[str, Any], context: dict[str, Any], client_id: int, **_: Any) -> Answer | None:
        items = transaction_items(params)
        token, conflicted = self.in_flight.enter(client_id, items)
        with self._lock:
            self.transactions += 1
            self.conflicts += conflicted is not None
        if conflicted is not None:
            return cancelled_answer(
                {conflicted: "TransactionConflict"}, len(items), "Transaction is ongoing for the item"
            )
        context[_TOKEN] = token
        return None

    def _after(self, context: dict[str, Any], **_: Any) -> None:
        token = context.pop(_TOKEN, None)
        if token is not None:
            self.in_flight.leave(token)
