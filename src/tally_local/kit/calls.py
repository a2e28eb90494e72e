"""Every AWS API call the test session makes, with the tally code that made it: the IAM contract's input.

IAM is checked per call on AWS and never by DynamoDB Local or moto, so a call the function's role does not
allow passes every local test and fails on every batch once deployed (``BatchGetItem`` and
``BatchWriteItem``, ungranted, once did exactly that). The recorder wraps ``botocore.client.BaseClient._make_api_call``,
which every client goes through however it was built (``boto3.client``, a ``Session``, DynamoDB Local's
client, the clients moto's ``mock_aws`` intercepts), validates the request as botocore would for a client built
without its validation (tally's own, ``tally.client_config``: an encoding mistake fails the test that makes it), and
keeps, per call:

- the service and operation, and each resource the request names (table and the key attributes of each
  item, index, queue, stream, stack), with the sub-operation of a transaction or batch item;
- the nearest frame under ``tally`` (the call site) and who made the call, decided by the call stack:
  ``function`` when the site is the Lambda's code (``tally.store``, ``dlq``, ``handlers``, ...) reached
  through the Lambda's orchestration (``handlers``, ``runtime``, ``pipeline``, ``post_commit``, ``commit``);
  ``operator`` when the stack passes through ``tally.cli``, ``tally.ops`` or ``tally.audit`` (the audit reads
  the archive and the table on threads of its own, whose stacks hold no ``tally.cli`` frame);
  ``read-function`` through the read endpoint's handler (``tally.handlers.read``); ``reader`` and ``producer``
  through the libraries an application embeds (``tally.reader``, ``tally.producer``) from anywhere else;
  otherwise nobody the template grants anything to (the tests' set-up, ``tally_local`` and ``bench`` code, a
  test driving an adapter directly).

``CreateTable`` requests are kept too (whoever makes them): they tell which template table a test's table
stands for (its key schema). Calls are aggregated with a count, so the recording stays small.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.client import BaseClient
from botocore.validate import ParamValidationDecorator, validate_parameters

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

FUNCTION = "function"
OPERATOR = "operator"
# The read endpoint's function, and the two libraries an application embeds (checked against
# ReadFunction's role, ReaderPolicy and ProducerPolicy).
READ_FUNCTION = "read-function"
READER = "reader"
PRODUCER = "producer"
ROLES = (FUNCTION, OPERATOR, READ_FUNCTION, READER, PRODUCER)

# The Lambda's own orchestration: a call is the function's only when the stack passes through one of these.
ORCHESTRATION = (
    "tally.handlers",
    "tally.runtime",
    "tally.pipeline",
    "tally.post_commit",
    "tally.commit.applier",
    "tally.commit",
)
# Where the function's calls are made (the nearest tally frame).
FUNCTION_CODE = (
    *ORCHESTRATION,
    "tally.store",
    "tally.dead_letter_sender",
    "tally.archive_writer",
    "tally.sources",
    "tally.commit.marker_reads",
)
OPERATOR_CODE = ("tally.cli", "tally.ops", "tally.audit")
READ_ENDPOINT = ("tally.handlers.read",)
READER_CODE = ("tally.reader",)
PRODUCER_CODE = ("tally.producer",)


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


@dataclass(frozen=True, order=True)
class Target:
    """One resource a request names: ``kind`` table/queue/stream/stack, with the item's sub-operation
    (``Put``/``Update``/``Delete``/``ConditionCheck``/``Get``, ``PutRequest``/``DeleteRequest``) and key
    attributes for DynamoDB items, and the index for an index read."""

    kind: str
    name: str
    item_action: str = ""
    attributes: tuple[str, ...] = ()
    index: str = ""


@dataclass(frozen=True, order=True)
class Call:
    """One kind of call: the same operation on the same resources from the same site by the same caller."""

    role: str
    site: str
    service: str
    operation: str
    targets: tuple[Target, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "site": self.site,
            "service": self.service,
            "operation": self.operation,
            "targets": [[t.kind, t.name, t.item_action, list(t.attributes), t.index] for t in self.targets],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Call:
        return cls(
            role=data["role"],
            site=data["site"],
            service=data["service"],
            operation=data["operation"],
            targets=tuple(
                Target(kind, name, action, tuple(attrs), index) for kind, name, action, attrs, index in data["targets"]
            ),
        )


def _attributes(item: Any) -> tuple[str, ...]:
    return tuple(sorted(item)) if isinstance(item, dict) else ()


def _dynamodb_targets(operation: str, params: dict[str, Any]) -> list[Target]:
    if operation in {"TransactWriteItems", "TransactGetItems"}:
        targets = []
        for entry in params.get("TransactItems", []):
            for action, body in entry.items():
                shape = body.get("Key") or body.get("Item")
                targets.append(Target("table", body["TableName"], action, _attributes(shape)))
        return targets
    if operation == "BatchGetItem":
        return [
            Target("table", table, "Get", _attributes((spec.get("Keys") or [{}])[0]))
            for table, spec in params.get("RequestItems", {}).items()
        ]
    if operation == "BatchWriteItem":
        targets = []
        for table, requests in params.get("RequestItems", {}).items():
            for request in requests:
                for action, body in request.items():
                    targets.append(Target("table", table, action, _attributes(body.get("Item") or body.get("Key"))))
        return targets
    if "TableName" in params:
        shape = params.get("Key") or params.get("Item")
        return [Target("table", params["TableName"], "", _attributes(shape), params.get("IndexName", ""))]
    return []


def _targets(service: str, operation: str, params: dict[str, Any]) -> tuple[Target, ...]:
    if service == "dynamodb":
        found = _dynamodb_targets(operation, params)
    elif service == "sqs":
        url = params.get("QueueUrl")
        found = [Target("queue", url.rstrip("/").rsplit("/", 1)[-1] if url else params.get("QueueName", ""))]
    elif service == "kinesis":
        stream = params.get("StreamName") or params.get("StreamARN") or ""
        found = [Target("stream", stream.rsplit(":stream/", 1)[-1])]
    elif service == "cloudformation":
        found = [Target("stack", params.get("StackName", ""))]
    elif service == "s3" and "Key" in params:
        # an object: its bucket, and its key's first two segments (aws/lambda) as the prefix IAM is asked for
        found = [Target("object", params.get("Bucket", ""), "/".join(str(params["Key"]).split("/")[:2]))]
    elif service == "s3":
        found = [Target("bucket", params.get("Bucket", ""))]
    else:
        found = []
    return tuple(sorted(set(found)))


_TALLY = 1
_OPERATOR = 2
_READ_ENDPOINT = 4
_FUNCTION_CODE = 8
_ORCHESTRATION = 16
_READER = 32
_PRODUCER = 64


@functools.cache
def _kinds(module: str) -> int:
    """The groups above ``module`` belongs to, as bits: computed once per module, since every API call of the
    session walks its stack (a chaos run makes tens of thousands)."""
    if not _within(module, ("tally",)):
        return 0
    groups = (
        (_OPERATOR, OPERATOR_CODE),
        (_READ_ENDPOINT, READ_ENDPOINT),
        (_FUNCTION_CODE, FUNCTION_CODE),
        (_ORCHESTRATION, ORCHESTRATION),
        (_READER, READER_CODE),
        (_PRODUCER, PRODUCER_CODE),
    )
    return _TALLY | sum(bit for bit, packages in groups if _within(module, packages))


def _caller() -> tuple[str, str]:
    """(role, site) from the call stack; role "" when the call is nobody's the template grants to."""
    frame: FrameType | None = sys._getframe(1)
    site = ""
    nearest = 0  # the kinds of the nearest tally frame (the site's module)
    seen = 0  # of every tally frame on the stack
    while frame is not None:
        kinds = _kinds(frame.f_globals.get("__name__", ""))
        if kinds:
            if not site:
                module = frame.f_globals["__name__"]
                site = f"{module.replace('.', '/')}.py:{frame.f_lineno} {frame.f_code.co_name}"
                nearest = kinds
            seen |= kinds
        frame = frame.f_back
    if not seen:
        return "", ""
    if seen & _OPERATOR:
        return OPERATOR, site
    if seen & _READ_ENDPOINT:
        return READ_FUNCTION, site
    if nearest & _FUNCTION_CODE and seen & _ORCHESTRATION:
        return FUNCTION, site
    # An application's reads and publishes, wherever they come from (a test, the demo, a benchmark's check)
    if seen & _READER:
        return READER, site
    if seen & _PRODUCER:
        return PRODUCER, site
    return "", site


class Recorder:
    """Aggregates calls (with counts) and the key schemas of the tables created, for this process."""

    def __init__(self) -> None:
        self.calls: Counter[Call] = Counter()
        self.tables: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self._captures: list[list[Call]] = []
        self._original: Any = None

    def install(self) -> None:
        if self._original is not None:
            return
        original = BaseClient._make_api_call  # type: ignore[attr-defined]
        recorder = self

        def _make_api_call(client: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
            recorder.record(client.meta.service_model.service_name, operation_name, api_params)
            if not isinstance(getattr(client, "_serializer", None), ParamValidationDecorator):
                # tally's clients skip botocore's validation (tally.client_config): the session does it for them
                shape = client.meta.service_model.operation_model(operation_name).input_shape
                if shape is not None:  # an operation without input has nothing to validate
                    validate_parameters(api_params, shape)
            return original(client, operation_name, api_params)

        self._original = original
        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        if self._original is not None:
            BaseClient._make_api_call = self._original  # type: ignore[attr-defined]
            self._original = None

    def record(self, service: str, operation: str, params: dict[str, Any]) -> None:
        try:
            role, site = _caller()
            call = Call(role, site, service, operation, _targets(service, operation, params))
        except Exception as exc:  # a recorder bug must show (role "error" fails the check), not hide the call
            call = Call("error", f"recorder failed: {exc!r}", service, operation, ())
        with self._lock:
            self.calls[call] += 1
            for capture in self._captures:
                capture.append(call)
            if service == "dynamodb" and operation == "CreateTable":
                keys = tuple(sorted(key["AttributeName"] for key in params.get("KeySchema", [])))
                self.tables[str(params.get("TableName"))] = keys

    @contextmanager
    def capture(self) -> Iterator[list[Call]]:
        """The calls made (by any thread) while the block runs."""
        captured: list[Call] = []
        with self._lock:
            self._captures.append(captured)
        try:
            yield captured
        finally:
            with self._lock:
                self._captures.remove(captured)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": [[call.to_json(), count] for call, count in self.calls.items()],
                "tables": {name: list(keys) for name, keys in self.tables.items()},
            }


RECORDER = Recorder()
"""The session's recorder (installed by tests/conftest.py in ``pytest_configure``)."""


@dataclass
class Recording:
    """Calls and created tables, merged from every process of a run (xdist workers included)."""

    calls: Counter[Call]
    tables: dict[str, tuple[str, ...]]

    @classmethod
    def empty(cls) -> Recording:
        return cls(Counter(), {})

    def merge(self, data: dict[str, Any]) -> None:
        for call, count in data.get("calls", []):
            self.calls[Call.from_json(call)] += int(count)
        for name, keys in data.get("tables", {}).items():
            self.tables[name] = tuple(keys)

    @classmethod
    def of(cls, calls: list[Call], tables: dict[str, tuple[str, ...]]) -> Recording:
        return cls(Counter(calls), dict(tables))
