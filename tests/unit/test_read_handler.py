"""The read endpoint (``tally.handlers.read``) on moto, driven by the function URL events in ``events/read/``.

What it proves: the documented answers (events/read/expected.json) after the sample events counted; every
malformed request is a 400 with its reason and no DynamoDB call; other paths and methods are 404; DynamoDB's
throttling is a 503 and any other failure a 500 whose body holds no trace; numbers are strings, exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tally.errors import RetryableStoreError
from tally.handlers import read as read_handler
from tally.handlers import sqs as sqs_handler
from tally.reader import CounterReader
from tally_local.context import LocalLambdaContext
from tally_local.kit.calls import RECORDER
from tests.support.events import EVENTS_DIR, load_event
from tests.support.moto_function import moto_function

if TYPE_CHECKING:
    from collections.abc import Iterator

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
READ_EVENTS = EVENTS_DIR / "read"
EXPECTED: dict[str, Any] = json.loads((READ_EVENTS / "expected.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Endpoint:
    dynamodb: Any

    def get(
        self, raw_path: str, query: dict[str, str] | None = None, method: str = "GET"
    ) -> tuple[int, Any, dict[str, str]]:
        event = json.loads((READ_EVENTS / "read-get.json").read_text(encoding="utf-8"))
        event["rawPath"] = event["requestContext"]["http"]["path"] = raw_path
        event["requestContext"]["http"]["method"] = method
        event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in (query or {}).items())
        if query:
            event["queryStringParameters"] = query
        return answer(read_handler.handler(event, LocalLambdaContext()))


def answer(response: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    return response["statusCode"], json.loads(response["body"]), response.get("headers", {})


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[Endpoint]:
    views = json.loads((EVENTS_DIR / "expected.json").read_text(encoding="utf-8"))["sqs-views.json"]["counter_views"]
    with moto_function(
        monkeypatch, TALLY_WINDOWS="hour,day", TALLY_HOT_KEYS="hot=4", TALLY_COUNTER_VIEWS=views
    ) as function:
        sqs_handler.pipeline.cache_clear()
        read_handler.reader.cache_clear()
        yield Endpoint(function.dynamodb)
    sqs_handler.pipeline.cache_clear()
    read_handler.reader.cache_clear()


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_sample_request_gets_its_documented_answer(endpoint: Endpoint, event_file: str) -> None:
    # GIVEN the sample events it reads, counted by the SQS handler
    expected = EXPECTED[event_file]
    for counted in expected["after"]:
        sqs_handler.handler(load_event(counted), LocalLambdaContext())
    # WHEN the function URL request is answered THEN status and body are exactly as documented
    status, body, headers = answer(read_handler.handler(load_event(f"read/{event_file}"), LocalLambdaContext()))
    assert (status, body) == (expected["status"], expected["body"])
    assert headers["Content-Type"] == "application/json"


def test_every_sample_request_file_is_documented() -> None:
    assert {path.name for path in READ_EVENTS.glob("*.json")} - {"expected.json"} == set(EXPECTED)


def put(endpoint: Endpoint, pk: str, sk: str, **counters: str) -> None:
    item = {"pk": {"S": pk}, "sk": {"S": sk}} | {f"c#{name}": {"N": value} for name, value in counters.items()}
    endpoint.dynamodb.put_item(TableName="counters", Item=item)


def test_numbers_are_exact_strings_and_hot_keys_summed(endpoint: Endpoint) -> None:
    # GIVEN a hot key whose shards add up past 2^53 and to 38 digits
    put(endpoint, "hot", "all", big="9007199254740993", fine="0.1")
    put(endpoint, "hot\x1f3", "all", big="1", fine="0.20000000000000000000000000000000000001")
    status, body, _ = endpoint.get("/counters/hot")
    # THEN every digit is there, as a string (a JSON number would be a double in JavaScript)
    assert (status, body["counters"]) == (
        200,
        {"big": "9007199254740994", "fine": "0.30000000000000000000000000000000000001"},
    )


def test_distinct_counts_are_answered_beside_the_counters_hot_shards_summed(endpoint: Endpoint) -> None:
    # GIVEN a hot key whose distinct count is on two shards, all-time and in one hour
    for pk, viewers in (("hot", "2"), ("hot\x1f3", "5")):
        for sk in ("all", "h#2026-11-24T20:00Z"):
            endpoint.dynamodb.put_item(
                TableName="counters",
                Item={"pk": {"S": pk}, "sk": {"S": sk}, "c#count": {"N": "1"}, "dc#viewers": {"N": viewers}},
            )
    # WHEN the key and its hours are asked for
    _, body, _ = endpoint.get("/counters/hot")
    _, series, _ = endpoint.get(
        "/counters/hot", {"window": "hour", "from": "2026-11-24T19:00Z", "to": "2026-11-24T20:00Z"}
    )
    # THEN "distinct" (set -> members, as strings) sits beside "counters"; a window without members has none
    assert body == {"key": "hot", "counters": {"count": "2"}, "distinct": {"viewers": "7"}}
    assert series["windows"] == [
        {"start": "2026-11-24T19:00:00Z", "counters": {}},
        {"start": "2026-11-24T20:00:00Z", "counters": {"count": "2"}, "distinct": {"viewers": "7"}},
    ]


def test_a_key_is_percent_decoded_once(endpoint: Endpoint) -> None:
    put(endpoint, "a%41 b/c", "all", count="1")
    assert endpoint.get("/counters/a%2541%20b%2Fc")[:2] == (200, {"key": "a%41 b/c", "counters": {"count": "1"}})
    assert endpoint.get("/counters/never%20counted")[:2] == (200, {"key": "never counted", "counters": {}})


@pytest.mark.parametrize(
    ("raw_path", "query", "reason"),
    [
        ("/counters/%FF", None, "not percent-encoded UTF-8"),
        ("/counters/a%1Fb", None, "U+001F"),
        ("/counters/" + "x" * 2001, None, "2001 bytes"),
        ("/counters/k", {"window": "minute"}, "not counted here"),
        ("/counters/k", {"window": "hour", "from": "2100-01-01T00:00:00"}, "needs a UTC offset"),
        ("/counters/k", {"window": "hour", "from": "soon"}, "neither epoch milliseconds nor ISO 8601"),
        ("/counters/k", {"window": "hour", "from": "4102448400000", "to": "4102444800000"}, "from is after to"),
        ("/counters/k", {"window": "hour", "from": "0", "to": "4102444800000"}, "at most 1000 per read"),
        ("/counters/k", {"windows": "hour"}, "unknown query parameter"),
        ("/counters/k", {"from": "0"}, "need a window"),
        ("/counters/k", {"top": "3"}, "give by"),
        ("/counters/k", {"by": "cust omer"}, "is not a view"),
        ("/counters/k", {"by": "customer", "from": "0"}, "not from and to"),
        ("/counters/k", {"by": "customer", "at": "0"}, "at needs a window"),
        ("/counters/k", {"by": "customer", "window": "minute"}, "not counted here"),
        ("/counters/k", {"by": "customer", "top": "0"}, "top is a whole number"),
        ("/counters/k", {"by": "customer", "counter": "calls"}, "give top too"),
        ("/counters/a%1Fb", {"by": "customer"}, "U+001F"),
    ],
)
def test_what_cannot_be_answered_is_a_400_with_its_reason(
    endpoint: Endpoint, raw_path: str, query: dict[str, str] | None, reason: str
) -> None:
    with RECORDER.capture() as calls:
        status, body, _ = endpoint.get(raw_path, query)
    assert status == 400
    assert body["error"] == "bad_request"
    assert reason in body["message"]
    assert calls == []  # refused before DynamoDB


@pytest.mark.parametrize(("raw_path", "method"), [("/counters/k", "POST"), ("/counters/", "GET"), ("/", "GET")])
def test_other_paths_and_methods_are_404(endpoint: Endpoint, raw_path: str, method: str) -> None:
    assert endpoint.get(raw_path, method=method)[:2] == (
        404,
        {"error": "not_found", "message": "GET /counters/{percent-encoded key}[?window=&from=&to=][?by=&at=&top=]"},
    )


def test_throttling_is_a_503_to_retry(endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    def throttled(self: CounterReader, keys: Any) -> Any:
        raise RetryableStoreError("ProvisionedThroughputExceededException: slow down")

    monkeypatch.setattr(CounterReader, "get_many", throttled)
    status, body, headers = endpoint.get("/counters/k")
    assert (status, body["error"], headers["Retry-After"]) == (503, "unavailable", "1")


def test_any_other_failure_is_a_500_without_a_trace(endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: CounterReader, keys: Any) -> Any:
        raise RuntimeError("secret detail in /var/task/tally/reader.py line 12")

    monkeypatch.setattr(CounterReader, "get_many", broken)
    status, body, _ = endpoint.get("/counters/k")
    assert status == 500
    assert body == {"error": "internal", "message": "the read failed; see the function's log"}
