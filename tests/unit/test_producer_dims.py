"""Publishing with dimensions: ``Event(dims=...)``, packing that counts view items, ``tally publish --dim``.

What it proves: the producer refuses at the call a ``dims`` the consumer could never read; it writes what the decoder
reads (the same content digest as the consumer's decoding); told the consumer's views, it refuses what they would
dead-letter before anything is sent and packs by the items each event writes (its key's and its views'), so a
packed message stays within a transaction where it would otherwise have spilled to the journal; ``tally publish
--dim`` publishes dims and reads the stack's views.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.aggregate import message_totals
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.limits import WIRE_LIMITS
from tally.core.model import CounterEvent, Message
from tally.core.views import parse_counter_views
from tally.producer import Event, PackLimits, build_messages
from tally.producer.wire import single_message
from tests.support.moto_server import client, drain_queue, unique

if TYPE_CHECKING:
    from collections.abc import Iterator

VIEWS = parse_counter_views("api*=customer,route,customer+route")
ACME = {"customer": "acme", "route": "/v1/users"}


def ids() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"m-{n}"


def test_dims_are_sent_as_the_consumer_reads_them() -> None:
    event = Event("api", {"calls": 2}, dims=ACME)
    decoded = decode_message(single_message(event, "m1").body, WIRE_LIMITS, views=VIEWS)
    assert isinstance(decoded, Message)
    assert decoded.events[0].dims == ACME
    assert Event.count("api", dims=ACME).dims == ACME
    reset = Event.reset_to("api", {"calls": 0}, id="r1", dims={"customer": "acme"})
    back = decode_message(single_message(reset, "r1").body, WIRE_LIMITS, views=VIEWS)
    assert isinstance(back, Message)
    assert back.events[0].dims == {"customer": "acme"}
    assert content_digest(back) == content_digest(
        Message("r1", (CounterEvent("api", {}, reset={"calls": 0}, dims={"customer": "acme"}),))
    )


@pytest.mark.parametrize(
    "dims",
    [
        {},
        {"cust omer": "a"},
        {"customer": ""},
        {"customer": 7},
        {"customer": "a\x1fb"},
        {f"d{n}": "v" for n in range(9)},
    ],
)
def test_a_dims_the_consumer_could_never_read_is_refused_at_the_call(dims: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="dims of 'api'"):
        Event("api", {"calls": 1}, dims=dims)


def test_told_the_views_the_producer_refuses_what_they_would_dead_letter() -> None:
    with pytest.raises(ValueError, match="missing_dimension"):
        build_messages([Event.count("api", dims={"customer": "acme"})], None, iter(ids()).__next__, VIEWS)
    with pytest.raises(ValueError, match="unknown_dimension"):
        build_messages([Event.count("page", dims={"customer": "acme"})], None, iter(ids()).__next__, VIEWS)
    assert build_messages([Event.count("page")], None, iter(ids()).__next__, VIEWS)


def test_packing_counts_each_events_view_items() -> None:
    # GIVEN 60 events of one key, each of another customer and route: 1 + 3 x 60 items in all
    events = [Event.count("api", dims={"customer": f"c{n}", "route": f"/r{n}"}) for n in range(60)]
    blind = build_messages(events, PackLimits(max_bytes=256 * 1024), iter(ids()).__next__)
    told = build_messages(events, PackLimits(max_bytes=256 * 1024, views=VIEWS), iter(ids()).__next__)
    # THEN blind to the views, one message writes 181 items (past a transaction: the journal); told them, no message
    # writes more than 99 items, and every event is still sent once
    assert len(blind) == 1
    assert len(message_totals(decoded(blind[0].body), views=VIEWS).totals) == 181
    assert len(told) > 1
    assert all(len(message_totals(decoded(m.body), views=VIEWS).totals) <= 99 for m in told)
    assert sum(len(m.events) for m in told) == 60


def decoded(body: bytes) -> Message:
    message = decode_message(body, WIRE_LIMITS, views=VIEWS)
    assert isinstance(message, Message), message
    return message


def test_publish_dim_sends_dims_and_reads_the_stacks_views(moto_aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    monkeypatch.setenv("TALLY_COUNTER_VIEWS", "api*=customer,route,customer+route")
    sent = CliRunner().invoke(
        cli,
        [
            "publish",
            "api",
            "2",
            "--counter",
            "calls",
            "--dim",
            "customer=acme",
            "--dim",
            "route=/v1/users",
            "--queue-url",
            url,
        ],
    )
    refused = CliRunner().invoke(cli, ["publish", "api", "--dim", "customer=acme", "--queue-url", url])
    bad = CliRunner().invoke(cli, ["publish", "api", "--dim", "customer", "--queue-url", url])
    assert sent.exit_code == 0, sent.output
    (body,) = [m["Body"] for m in drain_queue(client("sqs", moto_aws), url)]
    assert json.loads(body)["dims"] == ACME
    assert refused.exit_code == 2
    assert "missing_dimension" in refused.output
    assert "expected NAME=VALUE" in bad.output
