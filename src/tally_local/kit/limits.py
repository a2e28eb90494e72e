"""DynamoDB's published request limits, checked on every request one client sends.

A request DynamoDB refuses as sent is refused on every attempt: the code under test must never send one, or, if it
does, must settle the message that carried it (``tally.store.requests.translate``). ``RequestLimits`` watches a
client (a botocore ``provide-client-params`` hook: the code under test is the production code, unmodified) and
records each request that breaks one of AWS's rules, checked from the documentation, sharing no code with the
product's own planning: at most 100 actions per transaction and no two on one item; 4 MB per transaction; 25
requests per ``BatchWriteItem`` and 100 keys per ``BatchGetItem``; an expression at most 4 KB, and a condition at
most 300 operators and functions; every Number at most 38 significant digits, its magnitude from 1E-130 to
9.99...E+125; a partition key at most 2,048 bytes and a sort key 1,024; an item put at most 400 KB. DynamoDB Local
enforces these too (with its own wording for some: ``docs/aws-fidelity.md``), so the request still goes on and is
refused there; the record says which rule a test or the chaos run broke, whatever the emulator answered.
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final

from tally.cost.capacity import item_size

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

MAX_TRANSACTION_ACTIONS: Final = 100
MAX_TRANSACTION_BYTES: Final = 4 * 1024 * 1024
MAX_BATCH_WRITE_REQUESTS: Final = 25
MAX_BATCH_GET_KEYS: Final = 100
MAX_EXPRESSION_BYTES: Final = 4 * 1024
MAX_CONDITION_OPERATORS: Final = 300
MAX_DIGITS: Final = 38
MAX_PARTITION_KEY_BYTES: Final = 2048
MAX_SORT_KEY_BYTES: Final = 1024
MAX_ITEM_BYTES: Final = 400 * 1024

_OPERATORS: Final = re.compile(
    r"<>|<=|>=|=|<|>|\b(?:AND|OR|NOT|BETWEEN|IN)\b"
    r"|\b(?:attribute_exists|attribute_not_exists|attribute_type|begins_with|contains|size)\s*\(",
    re.IGNORECASE,
)
_ACTIONS: Final = ("Put", "Update", "Delete", "ConditionCheck")
_SMALLEST: Final = Decimal("1E-130")
_LARGEST: Final = Decimal("9.9999999999999999999999999999999999999E+125")


class RequestLimits:
    """Records every request of ``client`` that breaks one of DynamoDB's published limits (``violations``)."""

    def __init__(self, client: DynamoDBClient, tables: Iterable[str] = ()) -> None:
        """Watch ``client``; the key schemas of ``tables`` are read now, before any fault a run attaches to the
        client after this could hit those reads (another table's is read when a request first names it, on a
        thread of the watch's own: the read is the watch's, never a call of the code it watches, which the IAM
        contract's recorder charges by the calling thread's stack)."""
        self._client = client
        self._lock = threading.Lock()
        self._schemas: dict[str, tuple[str, str | None]] = {}
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="request-limits")
        for table in tables:
            self._schema(table)
        self.violations: list[str] = []
        """One line per broken rule: the operation and what it broke."""
        self.requests = 0
        client.meta.events.register("provide-client-params.dynamodb", self._provide_client_params)

    def _provide_client_params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        """Sees each call's parameters as the caller gave them (numbers as text, binaries as bytes)."""
        operation = model.name
        if operation == "DescribeTable":
            return
        found = list(self._broken(operation, params))
        with self._lock:
            self.requests += 1
            self.violations.extend(f"{operation}: {rule}" for rule in found)

    def _broken(self, operation: str, params: Mapping[str, Any]) -> Iterator[str]:
        if operation == "TransactWriteItems":
            yield from self._transaction(params.get("TransactItems", []))
        elif operation == "BatchWriteItem":
            yield from self._batch_write(params.get("RequestItems", {}))
        elif operation == "BatchGetItem":
            for table, asked in params.get("RequestItems", {}).items():
                if len(asked.get("Keys", [])) > MAX_BATCH_GET_KEYS:
                    yield f"{len(asked['Keys'])} keys (at most {MAX_BATCH_GET_KEYS})"
                for key in asked.get("Keys", []):
                    yield from self._key(table, key)
        elif operation in {"PutItem", "UpdateItem", "DeleteItem"}:
            yield from self._action(operation.removesuffix("Item"), params)
        elif operation == "GetItem":
            yield from self._key(params["TableName"], params["Key"])

    def _transaction(self, actions: Sequence[Mapping[str, Any]]) -> Iterator[str]:
        if len(actions) > MAX_TRANSACTION_ACTIONS:
            yield f"{len(actions)} actions (at most {MAX_TRANSACTION_ACTIONS})"
        if len(json.dumps(actions, default=str).encode("utf-8")) > MAX_TRANSACTION_BYTES:
            yield "a transaction over 4 MB"
        items: set[str] = set()
        for action in actions:
            kind, body = next((name, action[name]) for name in _ACTIONS if name in action)
            yield from self._action(kind, body)
            item = json.dumps([body["TableName"], self._key_of(kind, body)], sort_keys=True)
            if item in items:
                yield f"two actions on one item of {body['TableName']}"
            items.add(item)

    def _batch_write(self, request_items: Mapping[str, Sequence[Mapping[str, Any]]]) -> Iterator[str]:
        for table, requests in request_items.items():
            if len(requests) > MAX_BATCH_WRITE_REQUESTS:
                yield f"{len(requests)} requests (at most {MAX_BATCH_WRITE_REQUESTS})"
            for request in requests:
                if "PutRequest" in request:
                    yield from self._action("Put", {"TableName": table, **request["PutRequest"]})
                else:
                    yield from self._action("Delete", {"TableName": table, **request["DeleteRequest"]})

    def _action(self, kind: str, body: Mapping[str, Any]) -> Iterator[str]:
        table = body["TableName"]
        for field in ("UpdateExpression", "ConditionExpression"):
            expression = body.get(field, "")
            if len(expression.encode("utf-8")) > MAX_EXPRESSION_BYTES:
                yield f"a {field} of {len(expression.encode('utf-8'))} bytes (at most {MAX_EXPRESSION_BYTES})"
        operators = len(_OPERATORS.findall(body.get("ConditionExpression", "")))
        if operators > MAX_CONDITION_OPERATORS:
            yield f"a condition of {operators} operators (at most {MAX_CONDITION_OPERATORS})"
        for placeholder, value in body.get("ExpressionAttributeValues", {}).items():
            yield from (f"{placeholder}: {problem}" for problem in _numbers(value))
        if kind == "Put":
            item = body["Item"]
            yield from (problem for value in item.values() for problem in _numbers(value))
            if item_size(item) > MAX_ITEM_BYTES:
                yield f"an item of {item_size(item)} bytes put into {table} (at most {MAX_ITEM_BYTES})"
        yield from self._key(table, self._key_of(kind, body))

    def _key_of(self, kind: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        if kind != "Put":
            key: Mapping[str, Any] = body["Key"]
            return key
        partition, sort = self._schema(body["TableName"])
        names = [partition] if sort is None else [partition, sort]
        return {name: body["Item"][name] for name in names if name in body["Item"]}

    def _key(self, table: str, key: Mapping[str, Any]) -> Iterator[str]:
        partition, sort = self._schema(table)
        for name, value in key.items():
            if name not in {partition, sort}:
                yield f"{name!r} is not a key attribute of {table}"
                continue
            limit = MAX_PARTITION_KEY_BYTES if name == partition else MAX_SORT_KEY_BYTES
            size = len(str(next(iter(value.values()))).encode("utf-8"))
            if size > limit:
                yield f"key attribute {name!r} of {size} bytes in {table} (at most {limit})"
            yield from _numbers(value)

    def _schema(self, table: str) -> tuple[str, str | None]:
        with self._lock:
            known = self._schemas.get(table)
        if known is not None:
            return known
        schema = self._reads.submit(self._client.describe_table, TableName=table).result()["Table"]["KeySchema"]
        partition = next(entry["AttributeName"] for entry in schema if entry["KeyType"] == "HASH")
        sort = next((entry["AttributeName"] for entry in schema if entry["KeyType"] == "RANGE"), None)
        with self._lock:
            self._schemas[table] = (partition, sort)
        return partition, sort


def _numbers(value: Mapping[str, Any]) -> Iterator[str]:
    """What DynamoDB would refuse among the Numbers of one attribute value (nested ones included)."""
    if "N" in value:
        problem = _number_problem(value["N"])
        if problem is not None:
            yield problem
    for text in value.get("NS", []):
        problem = _number_problem(text)
        if problem is not None:
            yield problem
    for member in value.get("L", []):
        yield from _numbers(member)
    for member in value.get("M", {}).values():
        yield from _numbers(member)


def _number_problem(text: str) -> str | None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        return f"the Number {text[:60]!r} is not a number"
    if not number.is_finite():
        return f"the Number {text[:60]!r} is not finite"
    if not number:
        return None
    digits = number.as_tuple().digits
    significant = len(digits) - (len(digits) - len(bytes(digits).rstrip(b"\x00")))
    if significant > MAX_DIGITS:
        return f"the Number {text[:60]} has {significant} significant digits (at most {MAX_DIGITS})"
    if not _SMALLEST <= number.copy_abs() <= _LARGEST:  # copy_abs: exact (abs() rounds to 28 digits)
        return f"the Number {text[:60]} is out of DynamoDB's range"
    return None
