"""Corrections and resets at the edges: the producer's ``Event.reset_to``/``Event.correct``, ``tally reset`` and
``tally correct`` (moto's server), ``tally get --operators`` and the read endpoint's ``operators`` (moto)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.decode import decode_message
from tally.core.limits import MAX_OPERATOR_COUNTERS, WIRE_LIMITS
from tally.core.model import CounterEvent, Message
from tally.handlers import read as read_handler
from tally.handlers import sqs as sqs_handler
from tally.producer import Event
from tally.producer.packing import PackLimits, build_messages
from tally.producer.wire import packed_message
from tally_local.context import LocalLambdaContext
from tests.support.events import load_event
from tests.support.moto_function import counters_on_moto, moto_function
from tests.support.moto_server import client, drain_queue, unique

if TYPE_CHECKING:
    from collections.abc import Iterator

TS = 4_102_444_800_000


# ------------------------------------------------------------------------------------------- the producer
def test_operator_events_are_sent_alone_and_decode_as_sent() -> None:
    events = [
        Event.count("a"),
        Event.reset_to("stock:1", {"stock": 100}, id="fix-1"),
        Event.count("b"),
        Event.correct("stock:1", {"stock": Decimal("-2.5")}, id="fix-2", ts=TS),
        Event.count("c"),
    ]
    messages = build_messages(events, PackLimits(max_bytes=10_000))
    decoded = [decode_message(message.body, WIRE_LIMITS) for message in messages]
    # In the order given: a packed message of what came before each operator event, then the event alone
    assert [m.message_id for m in decoded if isinstance(m, Message)][1::2] == ["fix-1", "fix-2"]
    assert len(messages) == 5
    by_id = {m.message_id: m.events for m in decoded if isinstance(m, Message)}
    assert by_id["fix-1"] == (CounterEvent("stock:1", {}, None, reset={"stock": 100}),)
    assert by_id["fix-2"] == (CounterEvent("stock:1", {"stock": Decimal("-2.5")}, TS, correction=True),)
    with pytest.raises(ValueError, match="cannot be packed"):
        packed_message([events[0], events[1]], "p")


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Event("k", {"n": 1}, id="x", reset={"n": 2}), ValueError),
        (lambda: Event("k", {}, id="x", reset={}), ValueError),
        (lambda: Event("k", {}, id="x", reset={"n": 1.5}), TypeError),
        (lambda: Event("k", {}, id="x", reset={"n": 1}, correction=True), ValueError),
        (lambda: Event("k", {}, id="x", correction=True), ValueError),
        (lambda: Event("k", {"n": 1}, id="x", correction=True, gauges={"g": ("max", 1)}), ValueError),
        (lambda: Event.reset_to("k", {f"c{n}": 1 for n in range(MAX_OPERATOR_COUNTERS + 1)}, id="x"), ValueError),
    ],
)
def test_the_producer_refuses_what_the_consumer_would_dead_letter(make: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


# ----------------------------------------------------------------------------------- tally reset / correct
def test_reset_and_correct_publish_one_message_each_and_print_its_id(moto_aws: str) -> None:
    # GIVEN a queue
    sqs = client("sqs", moto_aws)
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    # WHEN an operator resets (id generated), re-sends it with the printed id, and corrects with an id
    first = CliRunner().invoke(cli, ["reset", "stock:1", "stock", "100", "--queue-url", url])
    assert first.exit_code == 0, first.output
    printed = first.output.strip()
    again = CliRunner().invoke(cli, ["reset", "stock:1", "stock", "100", "--id", printed, "--queue-url", url])
    fix = CliRunner().invoke(
        cli, ["correct", "stock:1", "stock", "-3.5", "--id", "fix-9", "--ts", str(TS), "--queue-url", url]
    )
    assert again.output.strip() == printed
    assert fix.exit_code == 0, fix.output
    assert fix.output == "fix-9\n"
    # THEN the queue holds the reset twice under one id (one count at the consumer) and the correction
    bodies = [m["Body"].encode() for m in drain_queue(sqs, url)]
    decoded = [decode_message(body, WIRE_LIMITS) for body in bodies]
    assert sorted(m.message_id for m in decoded if isinstance(m, Message)) == sorted([printed, printed, "fix-9"])
    assert len(set(bodies)) == 2
    events = {m.message_id: m.events[0] for m in decoded if isinstance(m, Message)}
    assert events[printed].reset == {"stock": 100}
    assert events["fix-9"] == CounterEvent("stock:1", {"stock": Decimal("-3.5")}, TS, correction=True)


def test_publish_takes_resets_and_corrections_from_json_lines(moto_aws: str) -> None:
    # GIVEN JSON lines with an event, a reset and a correction (one with its id), and a packed reset
    sqs = client("sqs", moto_aws)
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    lines = (
        '{"key": "stock:1", "deltas": {"stock": 4}}\n'
        '{"key": "stock:1", "reset": {"stock": 100}, "id": "fix-1"}\n'
        '{"key": "stock:1", "deltas": {"stock": -2.5}, "correction": true}\n'
    )
    # WHEN they are published; a reset inside a packed message is refused before anything is sent
    result = CliRunner().invoke(cli, ["publish", "--file", "-", "--queue-url", url], input=lines)
    refused = CliRunner().invoke(
        cli,
        ["publish", "--file", "-", "--queue-url", url],
        input='{"id": "p", "events": [{"key": "k", "reset": {"n": 1}}]}\n',
    )
    # THEN three messages arrive in order, the operator events alone and decoded as written
    assert result.exit_code == 0, result.output
    assert refused.exit_code == 2
    decoded = [decode_message(m["Body"].encode(), WIRE_LIMITS) for m in drain_queue(sqs, url)]
    events = [m.events for m in decoded if isinstance(m, Message)]
    assert len(events) == 3
    assert {event.reset is not None or event.correction for (event,) in events} == {True, False}
    assert any(m.message_id == "fix-1" for m in decoded if isinstance(m, Message))
    assert next(e for (e,) in events if e.correction).deltas == {"stock": Decimal("-2.5")}


@pytest.mark.parametrize(
    "args",
    [
        ("reset", "k", "n", "1"),  # no target
        ("reset", "k", "n", "abc", "--queue-url", "http://q"),
        ("correct", "k", "n", "NaN", "--queue-url", "http://q"),
    ],
)
def test_operator_usage_errors(moto_aws: str, args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 2, result.output


# ---------------------------------------------------------------------------------- tally get --operators
@pytest.fixture
def counters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with counters_on_moto(
        monkeypatch,
        [
            {
                "pk": {"S": "stock:1"},
                "sk": {"S": "all"},
                "c#stock": {"N": "97"},
                "reset_at#stock": {"N": str(TS)},
                "reset_id#stock": {"S": "fix-1"},
                "reset_to#stock": {"N": "100"},
                "corrected_at#stock": {"N": str(TS + 1000)},
                "corrected_id#stock": {"S": "fix-2"},
                "corrected_by#stock": {"N": "-3"},
            }
        ],
    ):
        yield


def test_get_operators_shows_the_last_reset_and_correction(counters: None) -> None:
    as_json = CliRunner().invoke(cli, ["get", "stock:1", "--operators", "--json"])
    table = CliRunner().invoke(cli, ["get", "stock:1", "--operators"])
    plain = CliRunner().invoke(cli, ["get", "stock:1", "--json"])
    never = CliRunner().invoke(cli, ["get", "other", "--operators"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == {
        "correction": {"stock": {"at": "2100-01-01T00:00:01Z", "at_ms": TS + 1000, "id": "fix-2", "delta": -3}},
        "reset": {"stock": {"at": "2100-01-01T00:00:00Z", "at_ms": TS, "id": "fix-1", "value": 100}},
    }
    assert "fix-1" in table.output
    assert "2100-01-01T00:00:00Z" in table.output
    assert plain.output == '{"stock":97}\n'  # the counters' answer is unchanged
    assert "never reset or corrected" in never.output


# ------------------------------------------------------------------------------------------ the read endpoint
def test_the_read_endpoint_answers_the_last_reset_and_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the SQS reset sample counted by the SQS handler (moto)
    with moto_function(monkeypatch) as _:
        sqs_handler.pipeline.cache_clear()
        read_handler.reader.cache_clear()
        assert sqs_handler.handler(load_event("sqs-resets.json"), LocalLambdaContext()) == {"batchItemFailures": []}
        event = load_event("read/read-get.json")
        event["rawPath"] = event["requestContext"]["http"]["path"] = "/counters/stock%3Aresets-sqs"
        event["rawQueryString"] = ""
        event.pop("queryStringParameters", None)
        # WHEN its key is read through the function URL
        response = read_handler.handler(event, LocalLambdaContext())
    sqs_handler.pipeline.cache_clear()
    read_handler.reader.cache_clear()
    # THEN the answer carries the records beside the counters, numbers as strings
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {
        "key": "stock:resets-sqs",
        "counters": {"sold": "4", "stock": "99"},
        "operators": {
            "correction": {"stock": {"at": "2100-01-01T00:00:00Z", "at_ms": TS, "id": "rst-sqs-4", "delta": "2"}},
            "reset": {"stock": {"at": "2100-01-01T00:00:00Z", "at_ms": TS, "id": "rst-sqs-2", "value": "100"}},
        },
    }


# ------------------------------------------------------------------------------------- bounds and the operator
@pytest.fixture
def floored(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """stock:1's stock at 2 under a floor of 0 (and a ceiling of 10), and a queue to send to: its URL."""
    with counters_on_moto(monkeypatch, [{"pk": {"S": "stock:1"}, "sk": {"S": "all"}, "c#stock": {"N": "2"}}]):
        monkeypatch.setenv("TALLY_COUNTER_BOUNDS", "stock:*#stock>=0;stock:*#stock<=10")
        yield boto3.client("sqs").create_queue(QueueName="events")["QueueUrl"]


def _sent(url: str) -> list[Message]:
    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [m for m in (decode_message(x["Body"].encode(), WIRE_LIMITS) for x in messages) if isinstance(m, Message)]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("correct", "stock:1", "stock", "-5"), "takes it to -3, below its floor 0"),
        (("correct", "stock:1", "stock", "9"), "takes it to 11, above its ceiling 10"),
        (("reset", "stock:1", "stock", "-1"), "sets 'stock:1'/'stock' to -1, below its floor 0"),
        (("correct", "stock:2", "stock", "-1"), "takes it to -1, below its floor 0"),  # never counted: 0
    ],
    ids=["correct-below", "correct-above", "reset-below", "missing-counter"],
)
def test_an_operator_message_that_crosses_a_bound_is_not_sent_without_force(
    floored: str, args: tuple[str, ...], said: str
) -> None:
    # WHEN an operator's message would take a bounded counter across its bound
    refused = CliRunner().invoke(cli, [*args, "--queue-url", floored])
    # THEN it says so, the bound and where it ends, and sends nothing
    assert refused.exit_code == 1, refused.output
    assert said in refused.output
    assert "--force" in refused.output
    assert _sent(floored) == []
    # AND with --force it is sent, as given (an operator's message is applied whatever the bounds)
    forced = CliRunner().invoke(cli, [*args, "--queue-url", floored, "--force"])
    assert forced.exit_code == 0, forced.output
    assert len(_sent(floored)) == 1


@pytest.mark.parametrize(
    "args",
    [("correct", "stock:1", "stock", "-2"), ("correct", "stock:1", "stock", "8"), ("reset", "stock:1", "stock", "0")],
    ids=["down-to-the-floor", "up-to-the-ceiling", "reset-to-the-floor"],
)
def test_an_operator_message_within_the_bounds_is_sent_at_once(floored: str, args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*args, "--queue-url", floored])
    assert result.exit_code == 0, result.output
    assert len(_sent(floored)) == 1
