"""Fault injection at the botocore layer, so the code under test is the production code, unmodified.

botocore emits ``before-call`` before it sends a request (a handler that returns a response short-
circuits the call: the request never reaches the server) and ``after-call`` once the server answered
(a handler that raises there simulates a response lost on the way back, after the write committed, and
after botocore's own retries, which happen inside the send). Both are registered on one client only.

``DynamoDBFaults`` scripts the next ``TransactWriteItems`` calls of a DynamoDB client; ``ObjectFaults`` the next
``PutObject`` calls of an S3 client (the archive's writes: a lost answer, a refusal, the invocation killed before
the write is sent); ``BatchFaults`` the next batch calls of an SQS or Kinesis producer client:

- ``fail_entries``: after the service answered, the parsed response is rewritten so that chosen entries
  read as failed (as SQS's ``Failed`` list or Kinesis's per-record ``ErrorCode`` report them). The
  service did store them, so a retry writes a duplicate with the same id: the harshest realistic case.
- ``lose_responses``: the call reached the service, then the response is lost (a read timeout).
- ``refuse_calls``: the call never reaches the service and fails whole with an error code.

``SweepBefore`` runs TTL's sweep just before a chosen request of one DynamoDB client: an expired item read by one
request of an invocation is gone by the next (AWS deletes expired items at any moment, days after their expiry).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tally_local.kit.answers import Answer, cancelled_answer, error_answer, lost_response, transaction_actions

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from mypy_boto3_dynamodb import DynamoDBClient

TRANSACT = "TransactWriteItems"


@dataclass
class Fault:
    """One scheduled fault: ``kind`` is "lose_response", "cancel" (with a reason code) or "error"."""

    kind: str
    reason: str = ""


class DynamoDBFaults:
    """Queue faults for the next ``TransactWriteItems`` calls (or ``operation``'s: a fenced journal write, a header
    update, are ``UpdateItem``s) of one client; counts what happened."""

    def __init__(self, client: DynamoDBClient, operation: str = TRANSACT) -> None:
        self.operation = operation
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._pending_loss = threading.local()
        self.calls = 0
        self.injected: list[str] = []
        events = client.meta.events
        events.register(f"before-call.dynamodb.{operation}", self._before_call)  # type: ignore[arg-type]
        events.register(f"after-call.dynamodb.{operation}", self._after_call)

    def lose_responses(self, count: int = 1) -> None:
        """The next ``count`` transactions commit on the server, but the caller gets a read timeout."""
        self._push(Fault("lose_response"), count)

    def cancel(self, reason: str, count: int = 1) -> None:
        """The next ``count`` transactions are cancelled with ``reason`` on their first action."""
        self._push(Fault("cancel", reason), count)

    def fail(self, code: str, count: int = 1) -> None:
        """The next ``count`` transactions fail with a whole-request error ``code`` (never sent)."""
        self._push(Fault("error", code), count)

    def pass_through(self, count: int = 1) -> None:
        """The next ``count`` transactions go through untouched (to place a later fault on a given call)."""
        self._push(Fault("pass"), count)

    def clear(self) -> None:
        """Drop the faults not used yet."""
        with self._lock:
            self._faults.clear()

    def _push(self, fault: Fault, count: int) -> None:
        with self._lock:
            self._faults.extend([fault] * count)

    def _next(self) -> Fault | None:
        with self._lock:
            self.calls += 1
            return self._faults.popleft() if self._faults else None

    def _before_call(self, params: dict[str, Any], **_: Any) -> Answer | None:
        fault = self._next()
        self._pending_loss.value = False
        if fault is None or fault.kind == "pass":
            return None
        self.injected.append(fault.kind if fault.kind != "cancel" else f"cancel:{fault.reason}")
        if fault.kind == "lose_response":
            self._pending_loss.value = True
            return None
        if fault.kind == "cancel":
            if self.operation != TRANSACT:  # a single-item write is throttled whole, never cancelled
                return error_answer("ThrottlingException")
            return cancelled_answer({0: fault.reason}, len(transaction_actions(params)))
        return error_answer(fault.reason)

    def _after_call(self, **_: Any) -> None:
        if getattr(self._pending_loss, "value", False):
            self._pending_loss.value = False
            raise lost_response()


@dataclass(frozen=True, slots=True)
class Sweep:
    """One sweep ``SweepBefore`` ran: the request it preceded (its operation and body) and the items it deleted."""

    operation: str
    request: dict[str, Any]
    deleted: int


class SweepBefore:
    """TTL's sweep between two requests of ONE DynamoDB client: armed with ``arm``, it runs ``sweep`` just before
    the ``nth`` next request (of ``operations``, or of any kind), once; then the request goes on as sent.

    An expired item stays readable on AWS until TTL's background sweep deletes it, which may happen between
    the read that found an item and the write that relies on it; DynamoDB Local runs no such sweep, and a sweep
    between two invocations never falls there. ``sweep`` (``tally_local.chaos.ttl.sweep_expired`` on a client
    of its own, bound to the table and the moment) returns how many items it deleted. It runs on a thread of
    its own: the deletion is TTL's, not the function's (the IAM contract attributes a call to the product's
    frames on the calling thread's stack).
    """

    def __init__(self, client: DynamoDBClient, sweep: Callable[[], int]) -> None:
        self._sweep = sweep
        self._lock = threading.Lock()
        self._countdown = 0
        self._operations: frozenset[str] = frozenset()
        self.swept: list[Sweep] = []
        """Every sweep run, in order."""
        client.meta.events.register("before-call.dynamodb", self._before_call)

    def arm(self, nth: int = 1, operations: Collection[str] = ()) -> None:
        """Sweep just before the ``nth`` next request of ``operations`` (empty: any operation)."""
        if nth < 1:
            raise ValueError(f"nth must be at least 1, not {nth}")
        with self._lock:
            self._countdown = nth
            self._operations = frozenset(operations)

    def disarm(self) -> None:
        with self._lock:
            self._countdown = 0

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._countdown > 0

    def _before_call(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            if self._countdown == 0 or (self._operations and model.name not in self._operations):
                return
            self._countdown -= 1
            if self._countdown:
                return
        outcome: list[int | Exception] = []

        def run() -> None:
            try:
                outcome.append(self._sweep())
            except Exception as exc:  # raised below, on the caller's thread: a broken sweep fails the test
                outcome.append(exc)

        sweeper = threading.Thread(target=run, name="ttl-sweep")
        sweeper.start()
        sweeper.join()
        (deleted,) = outcome
        if isinstance(deleted, Exception):
            raise deleted
        self.swept.append(Sweep(model.name, json.loads(params.get("body") or b"{}"), deleted))


_PASS: tuple[str, Any] = ("pass", None)


class KilledBeforeWrite(Exception):
    """The invocation died before a write was sent (``ObjectFaults.kill``): its batch fails whole, as a Lambda
    killed between the commit and the archive write does; the source redelivers it."""


class ObjectFaults:
    """Scripted faults for the next ``PutObject`` calls of one S3 client; records every key put."""

    PUT: Final = "PutObject"

    def __init__(self, client: Any) -> None:
        self._plan: deque[tuple[str, Any]] = deque()
        self._lock = threading.Lock()
        self._current = threading.local()
        self.sent = 0
        """Puts that reached the service (a lost answer's included)."""
        events = client.meta.events
        events.register(f"before-call.s3.{self.PUT}", self._before_call)
        events.register(f"after-call.s3.{self.PUT}", self._after_call)

    def lose_responses(self, count: int = 1) -> None:
        """The next ``count`` puts store their object, then the caller gets a read timeout."""
        self._push(("lose", None), count)

    def refuse(self, code: str, status: int, count: int = 1) -> None:
        """The next ``count`` puts fail whole with ``code`` (``SlowDown`` 503, ``AccessDenied`` 403...), unsent."""
        self._push(("refuse", (code, status)), count)

    def kill(self, count: int = 1) -> None:
        """The next ``count`` puts are never sent: ``KilledBeforeWrite`` is raised in their place."""
        self._push(("kill", None), count)

    def _push(self, item: tuple[str, Any], count: int) -> None:
        with self._lock:
            self._plan.extend([item] * count)

    def _before_call(self, **_: Any) -> Answer | None:
        with self._lock:
            kind, argument = self._plan.popleft() if self._plan else _PASS
        self._current.kind = kind
        if kind == "kill":
            raise KilledBeforeWrite("killed before the archive write was sent")
        if kind == "refuse":
            code, status = argument
            return error_answer(code, status=status)
        with self._lock:
            self.sent += 1
        return None

    def _after_call(self, **_: Any) -> None:
        if getattr(self._current, "kind", "pass") == "lose":
            self._current.kind = "pass"
            raise lost_response()


_SERVICE_NAMES = {"sqs": "SendMessageBatch", "kinesis": "PutRecords"}


class BatchFaults:
    """Scripted faults for the next batch calls of one SQS or Kinesis client; records what was sent."""

    def __init__(self, client: Any) -> None:
        self.service = client.meta.service_model.service_name
        self.operation = _SERVICE_NAMES[self.service]
        self._plan: deque[tuple[str, Any]] = deque()
        self._lock = threading.Lock()
        self._lose_next = False
        self._current = _PASS
        self.calls = 0
        self.sent: list[list[Any]] = []
        """The entries (SQS) or records (Kinesis) of every call, in order, as the request carried them."""
        events = client.meta.events
        events.register(f"provide-client-params.{self.service}.{self.operation}", self._record)
        events.register(f"before-call.{self.service}.{self.operation}", self._before_call)
        events.register(f"after-call.{self.service}.{self.operation}", self._after_call)

    def fail_entries(self, *indexes: int, code: str = "", sender_fault: bool = False) -> None:
        """The next call: the entries at ``indexes`` read as failed (they were stored all the same)."""
        default = "InternalError" if self.service == "sqs" else "ProvisionedThroughputExceededException"
        self._push(("fail", (set(indexes), code or default, sender_fault)))

    def lose_responses(self, count: int = 1) -> None:
        """The next ``count`` calls are stored by the service, but their responses are lost."""
        for _ in range(count):
            self._push(("lose", None))

    def refuse_calls(self, code: str, count: int = 1, status: int = 400) -> None:
        """The next ``count`` calls fail whole with ``code`` without reaching the service."""
        for _ in range(count):
            self._push(("refuse", (code, status)))

    def pass_through(self, count: int = 1) -> None:
        """The next ``count`` calls go through untouched (to place a fault on a later call)."""
        for _ in range(count):
            self._push(("pass", None))

    def _push(self, item: tuple[str, Any]) -> None:
        with self._lock:
            self._plan.append(item)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        entries = params.get("Entries", params.get("Records", []))
        self.sent.append([dict(entry) for entry in entries])

    def _before_call(self, **_: Any) -> Answer | None:
        with self._lock:
            self.calls += 1
            self._current = self._plan.popleft() if self._plan else _PASS
        kind, argument = self._current
        if kind == "refuse":
            code, status = argument
            return error_answer(code, status=status)
        return None

    def _after_call(self, parsed: dict[str, Any], **_: Any) -> None:
        kind, argument = self._current
        if kind == "lose":
            raise lost_response()
        if kind != "fail":
            return
        indexes, code, sender_fault = argument
        if self.service == "sqs":
            successful = parsed.get("Successful", [])
            parsed["Successful"] = [entry for entry in successful if int(entry["Id"]) not in indexes]
            parsed["Failed"] = [
                {"Id": str(index), "SenderFault": sender_fault, "Code": code, "Message": "injected"}
                for index in sorted(indexes)
            ]
        else:
            for index in indexes:
                parsed["Records"][index] = {"ErrorCode": code, "ErrorMessage": "injected"}
            parsed["FailedRecordCount"] = len(indexes)
