"""Fault injection at the botocore layer, so the code under test is the production code, unmodified.

botocore emits ``before-call`` before it sends a request (a handler that returns a response short-
circuits the call: the request never reaches the server) and ``after-call`` once the server answered
(a handler that raises there simulates a response lost on the way back, after the write committed, and
after botocore's own retries, which happen inside the send). Both are registered on one client only.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ReadTimeoutError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TRANSACT = "TransactWriteItems"


@dataclass
class _FakeHttpResponse:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    text: str = ""


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
        events.register(f"before-call.dynamodb.{TRANSACT}", self._before_call)
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

    def _before_call(self, params: dict[str, Any], **_: Any) -> tuple[_FakeHttpResponse, dict[str, Any]] | None:
        fault = self._next()
        self._pending_loss.value = False
        if fault is None or fault.kind == "pass":
            return None
        self.injected.append(fault.kind if fault.kind != "cancel" else f"cancel:{fault.reason}")
        if fault.kind == "lose_response":
            self._pending_loss.value = True
            return None
        if fault.kind == "cancel":
            # ``params`` is the serialized request: its JSON body holds the transaction's actions.
            count = len(json.loads(params["body"])["TransactItems"])
            reasons = [{"Code": fault.reason, "Message": "injected"}] + [{"Code": "None"}] * (count - 1)
            message = f"Transaction cancelled, please refer cancellation reasons [{fault.reason}]"
            body = {
                "Error": {"Code": "TransactionCanceledException", "Message": message},
                "CancellationReasons": reasons,
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            return _FakeHttpResponse(400), body
        body = {
            "Error": {"Code": fault.reason, "Message": "injected"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return _FakeHttpResponse(400), body

    def _after_call(self, **_: Any) -> None:
        if getattr(self._pending_loss, "value", False):
            self._pending_loss.value = False
            raise ReadTimeoutError(endpoint_url="injected://lost-response")
