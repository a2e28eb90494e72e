"""What an instrument answers in place of the service, shaped as AWS sends it, and what a transaction names.

A botocore ``before-call`` handler that returns ``(http_response, parsed_body)`` answers the call: the request
never reaches the server. An ``after-call`` handler that raises ``lost_response()`` makes the caller see a read
timeout after the server committed the write (botocore's own retries happen inside the send, before it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from botocore.exceptions import ReadTimeoutError

Answer = tuple["FakeHttpResponse", dict[str, Any]]

KEY_ATTRIBUTES: Final = ("pk", "sk", "id")
"""The key attributes of tally's tables (counters: pk, sk; markers: id): what names an item in a Put."""


@dataclass
class FakeHttpResponse:
    """The HTTP half of an answer given in place of the service (botocore reads only these attributes)."""

    status_code: int = 400
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    text: str = ""


def error_answer(code: str, *, status: int = 400, message: str = "injected") -> Answer:
    """A whole-request error ``code`` (throttling, an internal error, a validation error...)."""
    body = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return FakeHttpResponse(status), body


def cancelled_answer(reasons: dict[int, str], actions: int, message: str = "injected") -> Answer:
    """A ``TransactionCanceledException`` with ``reasons`` (action index -> code) and ``"None"`` elsewhere."""
    listed = [{"Code": reasons[i], "Message": message} if i in reasons else {"Code": "None"} for i in range(actions)]
    codes = ", ".join(sorted(set(reasons.values())))
    body = {
        "Error": {
            "Code": "TransactionCanceledException",
            "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        },
        "CancellationReasons": listed,
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    return FakeHttpResponse(400), body


def lost_response() -> ReadTimeoutError:
    """The error a caller sees when the service committed the request and its answer never came back."""
    return ReadTimeoutError(endpoint_url="injected://lost-response")


def transaction_actions(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions of a serialized ``TransactWriteItems`` request (``params`` as ``before-call`` sees it)."""
    actions: list[dict[str, Any]] = json.loads(params["body"])["TransactItems"]
    return actions


def transaction_items(params: dict[str, Any]) -> list[str]:
    """The item each action of a ``TransactWriteItems`` request writes or checks, one per action, in order."""
    items = []
    for action in transaction_actions(params):
        ((kind, spec),) = action.items()
        key = spec["Item"] if kind == "Put" else spec["Key"]
        named = {name: key[name] for name in KEY_ATTRIBUTES if name in key}
        items.append(json.dumps([spec["TableName"], named], sort_keys=True))
    return items
