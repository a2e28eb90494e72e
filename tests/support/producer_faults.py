"""Faults for the producer's batch calls, injected at the botocore layer of one client.

- ``fail_entries``: after the service answered, the parsed response is rewritten so that chosen entries
  read as failed (as SQS's ``Failed`` list or Kinesis's per-record ``ErrorCode`` report them). The
  service did store them, so a retry writes a duplicate with the same id: the harshest realistic case.
- ``lose_responses``: the call reached the service, then the response is lost (a read timeout).
- ``refuse_calls``: the call never reaches the service and fails whole with an error code.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ReadTimeoutError

_SERVICE_NAMES = {"sqs": "SendMessageBatch", "kinesis": "PutRecords"}


@dataclass
class _FakeHttpResponse:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    text: str = ""


class BatchFaults:
    """Scripted faults for the next batch calls of one SQS or Kinesis client; records what was sent."""

    def __init__(self, client: Any) -> None:
        self.service = client.meta.service_model.service_name
        self.operation = _SERVICE_NAMES[self.service]
        self._plan: deque[tuple[str, Any]] = deque()
        self._lock = threading.Lock()
        self._lose_next = False
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

    def _before_call(self, **_: Any) -> tuple[_FakeHttpResponse, dict[str, Any]] | None:
        with self._lock:
            self.calls += 1
            self._current = self._plan.popleft() if self._plan else ("pass", None)
        kind, argument = self._current
        if kind == "refuse":
            code, status = argument
            body = {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": status}}
            return _FakeHttpResponse(status), body
        return None

    def _after_call(self, parsed: dict[str, Any], **_: Any) -> None:
        kind, argument = self._current
        if kind == "lose":
            raise ReadTimeoutError(endpoint_url="injected://lost-response")
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
