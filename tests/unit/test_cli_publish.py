"""``tally publish`` against moto's server: arguments, JSON lines, synthetic load, stacks, failures."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Gauge, GaugeKind, Message
from tests.support.moto_server import client, create_stream, drain_queue, read_stream, unique

if TYPE_CHECKING:
    from pathlib import Path


def run(*args: str, stdin: str | None = None) -> Any:
    return CliRunner().invoke(cli, ["publish", *args], input=stdin)


def messages_in(bodies: list[bytes]) -> list[Message]:
    decoded = [decode_message(body, WIRE_LIMITS) for body in bodies]
    assert all(isinstance(m, Message) for m in decoded), decoded
    return decoded  # type: ignore[return-value]


def totals(messages: list[Message]) -> dict[str, dict[str, Decimal]]:
    """Exact sums over DISTINCT message ids (what the consumer will count)."""
    distinct = {m.message_id: m for m in messages}
    sums: dict[str, dict[str, Decimal]] = {}
    for message in distinct.values():
        for event in message.events:
            for name, value in event.deltas.items():
                sums.setdefault(event.key, {}).setdefault(name, Decimal(0))
                sums[event.key][name] += value
    return sums


def queue_bodies(endpoint: str, url: str) -> list[bytes]:
    return [m["Body"].encode() for m in drain_queue(client("sqs", endpoint), url)]


def stream_bodies(endpoint: str, stream: str) -> list[bytes]:
    return [r["Data"] for records in read_stream(client("kinesis", endpoint), stream).values() for r in records]


def test_key_and_delta_from_arguments(moto_aws: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run("page:/home", "3", "--queue-url", url)
    assert result.exit_code == 0, result.output
    assert "messages sent" in result.output
    (message,) = messages_in(queue_bodies(moto_aws, url))
    assert [(e.key, dict(e.deltas)) for e in message.events] == [("page:/home", {"count": 3})]


def test_events_from_specs_are_exact_and_an_id_is_kept(moto_aws: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run(
        "--event",
        "key=shop:42,orders=1,revenue=49.99,ts=2026-11-21T10:15:00Z",
        "--event",
        '{"key": "shop:42", "deltas": {"revenue": 0.01}, "id": "order-7"}',
        "--queue-url",
        url,
    )
    assert result.exit_code == 0, result.output
    messages = {m.message_id: m for m in messages_in(queue_bodies(moto_aws, url))}
    assert messages["order-7"].events[0].deltas == {"revenue": Decimal("0.01")}
    assert totals(list(messages.values())) == {"shop:42": {"orders": 1, "revenue": Decimal("50.00")}}
    (other,) = [m for mid, m in messages.items() if mid != "order-7"]
    assert other.events[0].ts_ms == 1_795_256_100_000


def test_json_lines_with_events_and_whole_messages_to_a_stream(moto_aws: str, tmp_path: Path) -> None:
    stream, _ = create_stream(client("kinesis", moto_aws))
    lines = tmp_path / "events.jsonl"
    lines.write_text(
        '{"key": "a", "delta": 1}\n'
        "\n"
        '{"key": "b", "deltas": {"x": 2.50}, "ts": 1790000000000}\n'
        '{"id": "pack-from-log", "events": [{"key": "a", "delta": 5}, {"key": "c", "delta": -1}]}\n'
    )
    result = run("--file", str(lines), "--stream-name", stream)
    assert result.exit_code == 0, result.output
    messages = messages_in(stream_bodies(moto_aws, stream))
    assert "pack-from-log" in {m.message_id for m in messages}
    assert totals(messages) == {"a": {"count": 6}, "b": {"x": Decimal("2.5")}, "c": {"count": -1}}


def test_json_lines_may_leave_deltas_to_the_deployment_and_carry_gauges(moto_aws: str) -> None:
    # GIVEN events without a delta (the key's default counts them) and with gauges
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    stdin = '{"key": "views:/a"}\n{"key": "shop:1", "ts": 1790000000000, "gauges": {"last": {"latest": "x"}}}\n'
    # WHEN they are published
    result = run("--file", "-", "--queue-url", url, stdin=stdin)
    # THEN the bodies carry exactly that: no delta, and the gauges
    assert result.exit_code == 0, result.output
    defaults = parse_counter_defaults("views:*#count=delta:1")
    decoded = [decode_message(body, WIRE_LIMITS, defaults) for body in queue_bodies(moto_aws, url)]
    events = [event for message in decoded if isinstance(message, Message) for event in message.events]
    assert sorted((event.key, dict(event.deltas), event.gauges) for event in events) == [
        ("shop:1", {}, {"last": Gauge(GaugeKind.LATEST, "x")}),
        ("views:/a", {"count": 1}, None),
    ]


def test_json_lines_may_name_distinct_members(moto_aws: str) -> None:
    # GIVEN events naming members of distinct-count sets, one of them without a delta
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    stdin = '{"key": "v:1", "delta": 1, "distinct": {"viewers": "u-17"}}\n{"key": "v:1", "distinct": {"c": "fr"}}\n'
    # WHEN they are published THEN the bodies carry the members as written
    result = run("--file", "-", "--queue-url", url, stdin=stdin)
    assert result.exit_code == 0, result.output
    decoded = [decode_message(body, WIRE_LIMITS) for body in queue_bodies(moto_aws, url)]
    events = [event for message in decoded if isinstance(message, Message) for event in message.events]
    assert sorted((json.dumps(dict(event.deltas)), json.dumps(event.distinct)) for event in events) == [
        ('{"count": 1}', '{"viewers": "u-17"}'),
        ("{}", '{"c": "fr"}'),
    ]


def test_stdin(moto_aws: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run("--file", "-", "--queue-url", url, stdin='{"key": "k", "delta": 4}\n{"key": "k", "delta": 6}\n')
    assert result.exit_code == 0, result.output
    assert totals(messages_in(queue_bodies(moto_aws, url))) == {"k": {"count": 10}}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"key": "k", "delta": 0.1e400000}', "cannot be stored"),
        ('{"key": "k", "detla": 1}', "unknown field"),
        ('{"key": "k", "delta": NaN}', "not valid JSON"),
        ('{"key": "k", "delta": true}', "int or a Decimal"),
        ('{"key": "k", "delta": 1, "ts": "2026-11-21T10:15:00"}', "timezone-aware"),
        ('{"events": [{"key": "k", "delta": 1}]}', "needs its id"),
        ("[1, 2]", "expected a JSON object"),
        ('{"key": "k", "delta": 1, "deltas": {"x": 1}}', "at most one of delta and deltas"),
        ('{"key": "k", "gauges": {"p": 3}}', "gauges must be an object"),
        ('{"key": "k", "gauges": {"p": {"latest": "x"}}}', "needs the event's ts"),
        ('{"key": "k", "gauges": {"p": {"max": "3"}}}', "int or a Decimal"),
        ('{"key": "k", "distinct": {"viewers": ["u1"]}}', "member of 'viewers' must be a non-empty string"),
        ('{"key": "k", "distinct": {}}', "1 to 100 sets"),
    ],
)
def test_a_bad_line_refuses_the_whole_input_before_anything_is_sent(
    moto_aws: str, tmp_path: Path, line: str, reason: str
) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    lines = tmp_path / "events.jsonl"
    lines.write_text('{"key": "good", "delta": 1}\n' + line + "\n")
    result = run("--file", str(lines), "--queue-url", url)
    assert result.exit_code == 2
    assert f"{lines}:2" in result.output
    assert reason in result.output
    assert queue_bodies(moto_aws, url) == []


def test_generated_load_with_duplicates_sums_to_the_expected_totals(moto_aws: str, tmp_path: Path) -> None:
    # GIVEN a stream WHEN 3,000 skewed events are published with 20% of the messages re-sent
    stream, _ = create_stream(client("kinesis", moto_aws), shards=2)
    expected_path = tmp_path / "expected.json"
    result = run(
        "--generate", "3000", "--keys", "40", "--duplicate-rate", "0.2", "--seed", "5",
        "--stream-name", stream, "--max-message-bytes", "4096", "--expected-out", str(expected_path),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "duplicates re-sent" in result.output
    # THEN the stream holds duplicates (same ids), and the distinct messages add up exactly to the totals
    messages = messages_in(stream_bodies(moto_aws, stream))
    assert len(messages) > len({m.message_id for m in messages})
    expected = json.loads(expected_path.read_text(), parse_float=Decimal)
    assert totals(messages) == expected
    hottest = max(expected.values(), key=lambda counters: counters["count"])["count"]
    assert hottest > 3000 / 40 * 3  # Zipf skew: the hottest key has many times its fair share


def test_stack_outputs_choose_the_target(moto_aws: str) -> None:
    # GIVEN stacks exposing the template's output names (created through moto's CloudFormation)
    cloudformation = client("cloudformation", moto_aws)
    sqs_stack, both_stack = unique("tally-sqs"), unique("tally-both")
    queue = {"Q": {"Type": "AWS::SQS::Queue"}}
    stream = {"S": {"Type": "AWS::Kinesis::Stream", "Properties": {"ShardCount": 1}}}
    outputs = {"EventsQueueUrl": {"Value": {"Ref": "Q"}}}
    cloudformation.create_stack(StackName=sqs_stack, TemplateBody=json.dumps({"Resources": queue, "Outputs": outputs}))
    cloudformation.create_stack(
        StackName=both_stack,
        TemplateBody=json.dumps(
            {"Resources": queue | stream, "Outputs": outputs | {"EventStreamName": {"Value": {"Ref": "S"}}}}
        ),
    )
    # WHEN publishing by stack name THEN the stack's queue receives the event
    assert run("k", "--stack", sqs_stack).exit_code == 0
    (output,) = cloudformation.describe_stacks(StackName=sqs_stack)["Stacks"][0]["Outputs"]
    assert len(queue_bodies(moto_aws, output["OutputValue"])) == 1
    # ... and a stack with both sources needs --to
    ambiguous = run("k", "--stack", both_stack)
    assert ambiguous.exit_code == 1
    assert "--to" in ambiguous.output
    assert run("k", "--stack", both_stack, "--to", "kinesis").exit_code == 0
    missing = run("k", "--stack", unique("no-such-stack"))
    assert missing.exit_code == 1
    assert "does not exist" in missing.output


def test_failures_exit_non_zero_and_are_kept_for_a_resend_with_the_same_ids(moto_aws: str, tmp_path: Path) -> None:
    # GIVEN a queue URL that does not exist
    missing = f"{moto_aws}/123456789012/{unique('missing')}"
    failed = tmp_path / "failed.jsonl"
    # WHEN publishing to it THEN the command fails and keeps the exact messages
    result = run("--event", "key=a,count=1", "--event", "key=b,count=2,id=order-1", "--queue-url", missing,
                 "--failed-out", str(failed))  # fmt: skip
    assert result.exit_code == 1
    assert "failed" in result.output
    kept = failed.read_bytes().splitlines()
    assert len(kept) == 2
    # WHEN they are published again from that file to a working queue THEN the ids are the same
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    assert run("--file", str(failed), "--queue-url", url).exit_code == 0
    assert sorted(m.message_id for m in messages_in(queue_bodies(moto_aws, url))) == sorted(
        m.message_id for m in messages_in(kept)
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--queue-url", "http://x"),
        ("k", "--file", "-", "--queue-url", "http://x"),
        ("k",),
        ("k", "--queue-url", "http://x", "--stream-name", "s"),
        ("k", "--queue-url", "http://x", "--duplicate-rate", "0.1"),
        ("k", "not-a-number", "--queue-url", "http://x"),
    ],
)
def test_usage_errors(moto_aws: str, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize(
    ("args", "delta"),
    [
        (("stock:x", "-5", "--counter", "stock"), -5),
        (("--counter", "stock", "stock:x", "-2.5"), Decimal("-2.5")),
        (("stock:x", "-1e3", "--counter", "stock"), Decimal("-1E+3")),
        (("--counter", "stock", "--", "stock:x", "-5"), -5),
    ],
    ids=["before-an-option", "after-options", "exponent", "after-double-dash"],
)
def test_a_negative_delta_is_read_as_the_delta_not_as_an_option(
    moto_aws: str, args: tuple[str, ...], delta: Decimal
) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run(*args, "--queue-url", url) if "--" not in args else run("--queue-url", url, *args)
    assert result.exit_code == 0, result.output
    (message,) = messages_in(queue_bodies(moto_aws, url))
    assert [(e.key, dict(e.deltas)) for e in message.events] == [("stock:x", {"stock": delta})]


def test_a_mistyped_option_is_still_an_error_naming_it(moto_aws: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run("stock:x", "-5", "--countr", "stock", "--queue-url", url)
    assert result.exit_code == 2
    assert "No such option '--countr'. Did you mean '--counter'?" in result.output
    assert queue_bodies(moto_aws, url) == []


@pytest.mark.parametrize(
    "spec",
    ["key=shop:1, revenue=3", "key=shop:1 ,revenue=3", " key = shop:1 , revenue = 3 "],
    ids=["after-comma", "before-comma", "everywhere"],
)
def test_spaces_around_the_names_and_values_of_an_event_spec_are_not_part_of_them(moto_aws: str, spec: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run("--event", spec, "--queue-url", url)
    assert result.exit_code == 0, result.output
    (message,) = messages_in(queue_bodies(moto_aws, url))
    assert [(e.key, dict(e.deltas)) for e in message.events] == [("shop:1", {"revenue": 3})]


@pytest.mark.parametrize(
    "args",
    [
        ("--event", '{"key": "shop:1", "deltas": {" revenue": 3}}'),
        ("--event", '{"key": "shop:1 ", "delta": 1}'),
        (" shop:1", "2"),
        ("shop:1", "2", "--counter", "revenue "),
    ],
    ids=["json-counter", "json-key", "argument-key", "counter-option"],
)
def test_a_name_with_surrounding_spaces_is_refused_before_anything_is_sent(
    moto_aws: str, args: tuple[str, ...]
) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run(*args, "--queue-url", url)
    assert result.exit_code == 2, result.output
    assert "space" in result.output
    assert queue_bodies(moto_aws, url) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--event", "key=a,x=1,id=order-1"), "1 (single)"),
        (("--event", "key=a,x=1", "--event", "key=b,x=2"), "1 (packed)"),
        (("--event", "key=a,x=1", "--event", "key=b,x=2", "--event", "key=c,x=1,id=order-2"), "2 (1 packed, 1 single)"),
        (("--event", "key=a,x=1", "--event", "key=b,x=2", "--no-pack"), "2 (single)"),
    ],
    ids=["own-id", "packed", "both", "no-pack"],
)
def test_the_summary_says_how_the_messages_were_sent(moto_aws: str, args: tuple[str, ...], said: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run(*args, "--queue-url", url)
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.output.splitlines() if "messages sent" in line]
    assert said in row


def test_the_target_is_printed_whole_on_one_line_in_a_narrow_terminal(
    moto_aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("a-queue-with-a-rather-long-name"))["QueueUrl"]
    monkeypatch.setenv("COLUMNS", "60")
    result = run("k", "--queue-url", url)
    assert result.exit_code == 0, result.output
    assert any(url in line for line in result.output.splitlines()), result.output


def test_a_publish_nothing_answers_says_why_in_full_and_asks_whether_the_local_stack_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a local endpoint nothing listens on (a stopped local stack)
    closed = "http://127.0.0.1:9"
    for name, value in {"AWS_ENDPOINT_URL": closed, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
                        "AWS_REGION": "us-east-1", "COLUMNS": "200"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    queue = f"{closed}/123456789012/tally-local-EventsQueue-with-a-name-long-enough-to-be-cut"
    # WHEN an event is published to its queue
    result = run("k", "--queue-url", queue)
    # THEN it fails, with the whole reason, and the hint tally's other commands give
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert 'Could not connect to the endpoint URL: "http://127.0.0.1:9/' in text
    assert "is the local stack running" in text


def test_a_duplicate_rate_that_re_sends_nothing_says_so(moto_aws: str) -> None:
    url = client("sqs", moto_aws).create_queue(QueueName=unique("q"))["QueueUrl"]
    result = run("--generate", "100", "--duplicate-rate", "0.05", "--seed", "1", "--queue-url", url)
    assert result.exit_code == 0, result.output
    assert "--duplicate-rate 0.05 of 1 message re-sends none" in " ".join(result.output.split())
