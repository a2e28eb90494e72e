"""Count the DynamoDB writes a function makes, through botocore's event hooks, without touching its code.

The local runtime runs each function instance in a process of its own (``tally_local.function``), and
the handler builds its clients itself at cold start. ``WriteMeter.install`` adds an ``after-call``
hook to the handlers botocore registers on every new session (``botocore.handlers.BUILTIN_HANDLERS``),
so the clients the handler creates afterwards, in that process, report every DynamoDB call to the
meter (``before-parameter-build`` keeps the call's parameters in its request context for it).
``writes_of`` (pure) says what a call wrote: the actions of a committed transaction, one item for a
plain ``PutItem``/``UpdateItem``; a cancelled transaction wrote nothing and is counted apart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

_SINGLE_WRITES: Final = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
_PARAMS_EVENT: Final = "before-parameter-build.dynamodb"
_ANSWER_EVENT: Final = "after-call.dynamodb"
_CONTEXT_KEY: Final = "tally_meter_params"


@dataclass(frozen=True, slots=True)
class DynamoDBWrites:
    """DynamoDB write traffic: requests, and the items they wrote by kind."""

    requests: int = 0
    """Write API calls answered (``TransactWriteItems``, ``PutItem``, ``UpdateItem``, ``DeleteItem``, batch writes)."""
    transactions: int = 0
    """Committed ``TransactWriteItems`` calls."""
    cancelled_transactions: int = 0
    """Transactions DynamoDB refused (a marker existed, a conflict): they wrote nothing."""
    counter_adds: int = 0
    """``Update`` actions and ``UpdateItem`` calls committed: the ``ADD`` s to counter items (journal updates too)."""
    puts: int = 0
    """``Put`` actions and ``PutItem`` calls committed: markers and journal items."""
    condition_checks: int = 0
    """``ConditionCheck`` actions of committed transactions (they write nothing but cost a write unit)."""
    failed_requests: int = 0
    """Write calls answered with an error other than a cancelled transaction."""

    @property
    def items_written(self) -> int:
        return self.counter_adds + self.puts

    def __add__(self, other: DynamoDBWrites) -> DynamoDBWrites:
        return DynamoDBWrites(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(DynamoDBWrites)))

    def __sub__(self, other: DynamoDBWrites) -> DynamoDBWrites:
        return DynamoDBWrites(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(DynamoDBWrites)))


def writes_of(operation: str, params: Mapping[str, Any], failed: bool, error_code: str = "") -> DynamoDBWrites:
    """What one answered call wrote (``failed``: DynamoDB returned an error)."""
    if operation == "TransactWriteItems":
        if failed:
            cancelled = error_code == "TransactionCanceledException"
            return DynamoDBWrites(requests=1, cancelled_transactions=int(cancelled), failed_requests=int(not cancelled))
        actions = params.get("TransactItems", [])
        return DynamoDBWrites(
            requests=1,
            transactions=1,
            counter_adds=sum("Update" in action for action in actions),
            puts=sum("Put" in action for action in actions),
            condition_checks=sum("ConditionCheck" in action for action in actions),
        )
    if operation in _SINGLE_WRITES:
        if failed:
            return DynamoDBWrites(requests=1, failed_requests=1)
        return DynamoDBWrites(requests=1, counter_adds=int(operation == "UpdateItem"), puts=int(operation == "PutItem"))
    if operation == "BatchWriteItem":
        if failed:
            return DynamoDBWrites(requests=1, failed_requests=1)
        requests = [item for items in params.get("RequestItems", {}).values() for item in items]
        return DynamoDBWrites(requests=1, puts=sum("PutRequest" in item for item in requests))
    return DynamoDBWrites()


class WriteMeter:
    """Sums ``writes_of`` over every DynamoDB call of the clients created after ``install``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = DynamoDBWrites()
        self._installed = False

    def install(self) -> None:
        """Hook every botocore session created from now on, in this process (idempotent)."""
        from botocore import handlers  # noqa: PLC0415 - botocore's registry of per-session handlers

        if not self._installed:
            handlers.BUILTIN_HANDLERS.extend(self._hooks())
            self._installed = True

    def uninstall(self) -> None:
        """Stop hooking new sessions (clients created meanwhile keep reporting)."""
        from botocore import handlers  # noqa: PLC0415

        if self._installed:
            for hook in self._hooks():
                handlers.BUILTIN_HANDLERS.remove(hook)
            self._installed = False

    def total(self) -> DynamoDBWrites:
        with self._lock:
            return self._total

    def _hooks(self) -> list[tuple[str, Any]]:
        return [(_PARAMS_EVENT, self._keep_params), (_ANSWER_EVENT, self._after_call)]

    @staticmethod
    def _keep_params(params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_CONTEXT_KEY] = params

    def _after_call(self, model: Any, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any) -> None:
        error = parsed.get("Error") or {}
        params = context.get(_CONTEXT_KEY, {})
        writes = writes_of(model.name, params, failed=bool(error), error_code=str(error.get("Code", "")))
        with self._lock:
            self._total = self._total + writes
