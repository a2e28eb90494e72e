"""Fault injection at the botocore layer, so the code under test is the production code, unmodified.

botocore emits ``before-call`` before it sends a request (a handler that returns a response short-
circuits the call: the request never reaches the server) and ``after-call`` once the server answered
(a handler that raises there simulates a response lost on the way back, after the write committed, and
after botocore's own retries, which happen inside the send). Both are registered on one client only.

``DynamoDBFaults`` scripts the next ``TransactWriteItems`` calls of a DynamoDB client; ``BatchFaults`` the next
batch calls of an SQS or Kinesis producer client:

- ``fail_entries``: after the service answered, the parsed response is rewritten so that chosen entries
  read as failed (as SQS's ``Failed`` list or Kinesis's per-record ``ErrorCode`` report them). The
  service did store them, so a retry writes a duplicate with the same id: the harshest realistic case.
- ``lose_responses``: the call reached the service, then the response is lost (a read timeout).
- ``refuse_calls``: the call never reaches the service and fails whole with an error code.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tally_local.kit.answers import Answer, cancelled_answer, error_answer, lost_response, transaction_actions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TRANSACT = "TransactWriteItems"


@dataclass
class Fault:
    """One scheduled fault: ``kind`` is "lose_response", "cancel" (with a reason code) or "error"."""

    kind: str
    reason: str = ""


class DynamoDBFaults:
    """Queue faults for the next ``TransactWriteItems`` calls of one client; counts what happened."""

    def __init__(self, client: DynamoDBClient) -> None:
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._pending_loss = threading.local()
        self.calls = 0
        self.injected: list[str] = []
        events = client.meta.events
        events.register(f"before-call.dynamodb.{TRANSACT}", self._before_call)  # type: ignore[arg-type]
        events.register(f"after-call.dynamodb.{TRANSACT}", self._after_call)

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
            return cancelled_answer({0: fault.reason}, len(transaction_actions(params)))
        return error_answer(fault.reason)

    def _after_call(self, **_: Any) -> None:
        if getattr(self._pending_loss, "value", False):
            self._pending_loss.value = False
            raise lost_response()


_SERVICE_NAMES = {"sqs": "SendMessageBatch", "kinesis": "PutRecords"}
_PASS: tuple[str, Any] = ("pass", None)


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
