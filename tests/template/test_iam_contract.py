"""The IAM contract: every call the function and the ``tally`` command make is one the template grants.

IAM is checked per call on AWS and never by DynamoDB Local or moto, so a missing grant passes every other
test and fails on every batch once deployed (``AccessDeniedException`` is not retryable). This module drives
the Lambda path (the real SQS and Kinesis handlers, on moto) and the operator's commands (``tally get``,
``top``, ``dlq list``, ``dlq redrive``, ``stack``, ``publish``, ``audit``, ``events``, ``void``) itself, records the AWS calls they make
(``tally_local.kit.calls``), and evaluates them with ``tests.support.iam`` against the roles SAM
generates and the operator's policy, for every ``Source``. ``tests/conftest.py`` runs the same evaluation
on the calls of the whole test run at its end (every call site any test reaches).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from click.testing import CliRunner
from moto import mock_aws

from tally.cli.main import cli
from tally.handlers import kinesis as kinesis_handler
from tally.handlers import read as read_handler
from tally.handlers import sqs as sqs_handler
from tally.producer import Event, KinesisPublisher, SqsPublisher
from tally.reader import CounterReader, NotificationReader
from tally.sources.sqs import records_from_event
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally_local.context import LocalLambdaContext
from tally_local.kit.calls import FUNCTION, OPERATOR, PRODUCER, READ_FUNCTION, READER, RECORDER, Call, Recording
from tally_local.kit.lambda_events import kinesis_event, on_failure_record, s3_on_failure_object
from tally_local.template import load_template, table_definitions
from tests.support.environment import MOTO_CREDENTIALS, set_environment
from tests.support.events import EVENTS_DIR, load_event, sqs_event
from tests.support.iam import MANAGED_POLICIES, SOURCES, evaluate, transformed_template

# Drives every AWS call path of the functions, the operator and the libraries on moto: about 20 s (make test-fast skips it).
pytestmark = pytest.mark.slow


if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.iam import Verdict

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
ENVIRONMENT = {
    **MOTO_CREDENTIALS,
    "POWERTOOLS_SERVICE_NAME": "tally",
    "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


@contextmanager
def moto_stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """moto with the template's tables, a dead-letter queue, a source queue and a stream; the function's
    variables set as the template sets them."""
    endpoints = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_KINESIS")
    set_environment(monkeypatch, ENVIRONMENT, without=(*endpoints, "TALLY_STACK"))
    with mock_aws():
        dynamodb, sqs, kinesis = boto3.client("dynamodb"), boto3.client("sqs"), boto3.client("kinesis")
        definitions = table_definitions(load_template(TEMPLATE))
        tables = (("CountersTable", "counters"), ("MarkersTable", "markers"), ("NotificationsTable", "notifications"))
        for logical_id, name in tables:
            dynamodb.create_table(**definitions[logical_id].create_table_kwargs(name))
        dlq = sqs.create_queue(QueueName="tally-dlq")["QueueUrl"]
        queue = sqs.create_queue(QueueName="tally-events")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        kinesis.create_stream(StreamName="tally-stream", ShardCount=1)
        stream_arn = kinesis.describe_stream_summary(StreamName="tally-stream")["StreamDescriptionSummary"]["StreamARN"]
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="tally-failures")  # StreamFailureDestination=S3
        s3.create_bucket(Bucket="tally-archive")  # ArchiveEnabled=true: every counted message, after its commit
        variables = {
            "TALLY_COUNTERS_TABLE": "counters",
            "TALLY_MARKERS_TABLE": "markers",
            "TALLY_DLQ_URL": dlq,
            "TALLY_HOT_KEYS": "hot=4",
            "TALLY_WINDOWS": "hour",
            "TALLY_NOTIFICATIONS_TABLE": "notifications",
            "TALLY_ARCHIVE_BUCKET": "tally-archive",
        }
        set_environment(monkeypatch, variables)
        sqs_handler.pipeline.cache_clear()
        kinesis_handler.pipeline.cache_clear()
        read_handler.reader.cache_clear()
        try:
            yield {
                "sqs": sqs,
                "kinesis": kinesis,
                "s3": s3,
                "cloudformation": boto3.client("cloudformation"),
                "dlq": dlq,
                "queue": queue,
                "queue_arn": queue_arn,
                "stream_arn": stream_arn,
            }
        finally:
            sqs_handler.pipeline.cache_clear()
            kinesis_handler.pipeline.cache_clear()
            read_handler.reader.cache_clear()


def _packed(message_id: str, keys: int) -> str:
    return json.dumps({"id": message_id, "events": [{"key": f"k{i}", "delta": 1} for i in range(keys)]})


def drive_the_lambda_path(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind of batch the function handles: new, redelivered, poison, and a journal batch whose
    invocation crashed after its commit, finished by the redelivery."""
    context = LocalLambdaContext()
    # Bounded counters: the bounded samples' CounterBounds, and a bounded item whose steps net to zero
    # in one transaction (checked by a ConditionCheck on the counters table).
    monkeypatch.setenv("TALLY_COUNTER_BOUNDS", "stock:bounded-*#stock>=0;quota:bounded-*#calls<=10")
    # Thresholds: a crossing recorded in the transaction that commits it (a Put on the notifications table).
    monkeypatch.setenv("TALLY_COUNTER_THRESHOLDS", "usage:notify-*#calls>=5")
    sqs_handler.pipeline.cache_clear()
    kinesis_handler.pipeline.cache_clear()
    sqs_samples = ("sqs-single.json", "sqs-packed.json", "sqs-duplicates.json", "sqs-poison.json", "sqs-counters.json")
    for name in (*sqs_samples, "sqs-distinct.json"):  # distinct members: Put on the counters table
        event = load_event(name)
        sqs_handler.handler(event, context)
        sqs_handler.handler(event, context)  # a redelivery: the marker read finds what is applied
    for name in (
        "kinesis-single.json",
        "kinesis-packed.json",
        "kinesis-poison.json",
        "kinesis-bounded.json",
        "kinesis-distinct.json",
    ):
        kinesis_handler.handler(load_event(name), context)
    sqs_handler.handler(load_event("sqs-bounded.json"), context)
    zero_net = [{"id": f"zero-{n}", "key": "stock:bounded-zero", "deltas": {"stock": d}} for n, d in ((1, 4), (2, -4))]
    sqs_handler.handler(sqs_event([json.dumps(body) for body in zero_net], first=50), context)
    crossing = [{"id": f"usage-{n}", "key": "usage:notify-1", "deltas": {"calls": 3}} for n in range(2)]
    sqs_handler.handler(sqs_event([json.dumps(body) for body in crossing], first=60), context)
    # A message with 120 keys goes through the journal (pages written before the commit): fenced (the template's
    # default, FencedApply=true: the header's commit, each item's plain UpdateItem, DONE), then chunked
    # (FencedApply=false: chunk 0 in the commit's transaction, the next in its own). Each invocation dies just after
    # its commit; the redelivery finishes the batch from its pages (read_progress), as its header's state says.

    def crash(*_: Any, **__: Any) -> None:
        raise RuntimeError("the invocation died")

    for n, (fenced_apply, apply_step) in enumerate((("true", "apply_fenced"), ("false", "add_chunk")), start=1):
        monkeypatch.setenv("TALLY_FENCED_APPLY", fenced_apply)
        sqs_handler.pipeline.cache_clear()
        journal_batch = sqs_event([_packed(f"wide-{fenced_apply}", 120)], first=70 + n)
        real_step = getattr(DynamoDBJournal, apply_step)
        monkeypatch.setattr(DynamoDBJournal, apply_step, crash)
        with pytest.raises(RuntimeError):
            sqs_handler.handler(journal_batch, context)
        monkeypatch.setattr(DynamoDBJournal, apply_step, real_step)
        assert sqs_handler.handler(journal_batch, context) == {"batchItemFailures": []}
    monkeypatch.delenv("TALLY_FENCED_APPLY")
    sqs_handler.pipeline.cache_clear()
    # A journal batch whose invocation died before its commit: once its lease has run out, the redelivery
    # aborts it and claims the messages again (each replaced marker checked against the aborted header).
    stalled = sqs_event([_packed("wide-2", 120)], first=100)
    real_write_pages = DynamoDBJournal.write_pages
    monkeypatch.setattr(DynamoDBJournal, "write_pages", crash)
    with pytest.raises(RuntimeError):
        sqs_handler.handler(stalled, context)
    monkeypatch.setattr(DynamoDBJournal, "write_pages", real_write_pages)
    two_hours_later_ms = time.time_ns() // 1_000_000 + 2 * 3_600_000
    result = sqs_handler.pipeline().process(records_from_event(stalled), two_hours_later_ms, lambda: 60_000)
    assert result.failed_record_ids == ()
    # A key written in hour 0 and again the next day: the second batch moves the ended hour and day off its
    # item.
    for n, hour in ((1, 0), (2, 24)):
        at_ms = 4_102_444_800_000 + hour * 3_600_000
        event = sqs_event([json.dumps({"id": f"moved-{n}", "key": "moved", "delta": 1})], first=200 + n, sent_ms=at_ms)
        moved = sqs_handler.pipeline().process(records_from_event(event), at_ms, lambda: 60_000)
        assert moved.figures["WindowsMoved"] == (1 if hour else 0)


def drive_the_operator_commands(aws: dict[str, Any]) -> None:
    """Each ``tally`` command an operator runs, on every path that calls AWS."""
    runner = CliRunner()

    def run(*args: str) -> None:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output

    sqs, kinesis = aws["sqs"], aws["kinesis"]
    sqs.purge_queue(QueueUrl=aws["dlq"])  # the Lambda drive's poison names sources that do not exist here
    run("get", "page:/home", "--json")  # BatchGetItem
    run("get", "hot", "--json")  # a hot key: BatchGetItem over its 16 shards
    run("get", "page:/home", "--window", "hour", "--json")  # Query
    run("notifications", "list", "--json")  # Scan of the notifications table
    run("top", "5")  # Scan
    # A key never written again, its 2020 hour still open on its item: moved by `tally windows close`.
    ended = {
        "pk": {"S": "old"},
        "sk": {"S": "all"},
        "c#count": {"N": "1"},
        "w#h#2020-01-01T00:00Z\x1fcount": {"N": "1"},
    }
    boto3.client("dynamodb").put_item(TableName="counters", Item=ended)
    run("windows", "close")  # Scan, TransactWriteItems (Update)
    # A stack whose Outputs name the resources, as the deployed template's do.
    outputs = {
        "CountersTableName": "counters",
        "MarkersTableName": "markers",
        "DeadLetterQueueUrl": aws["dlq"],
        "EventsQueueUrl": aws["queue"],
        "EventStreamName": "tally-stream",
        "StreamFailureBucketName": "tally-failures",
    }
    body = {
        "Resources": {
            "P": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/t/p", "Type": "String", "Value": "v"}}
        },
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    aws["cloudformation"].create_stack(StackName="tally-ops", TemplateBody=json.dumps(body))
    run("stack", "tally-ops")  # DescribeStacks
    run("get", "page:/home", "--stack", "tally-ops")
    run("publish", "page:/home", "2", "--stack", "tally-ops", "--to", "sqs")  # SendMessageBatch
    run("publish", "page:/home", "3", "--stack", "tally-ops", "--to", "kinesis")  # PutRecords
    # Dead letters of each kind: poison from the queue, poison from the stream, one SQS moved, and the
    # metadata of a Kinesis batch Lambda gave up on.
    put = [
        kinesis.put_record(
            StreamName="tally-stream", Data=f'{{"id":"e{i}","key":"k","delta":1}}'.encode(), PartitionKey=f"p{i}"
        )
        for i in range(3)
    ]
    attributes = {
        "tally.error_code": {"DataType": "String", "StringValue": "invalid_field"},
        "tally.source": {"DataType": "String", "StringValue": aws["queue_arn"]},
    }
    sqs.send_message(QueueUrl=aws["dlq"], MessageBody='{"id":"x","key":"k","detla":1}', MessageAttributes=attributes)
    attributes = {**attributes, "tally.source": {"DataType": "String", "StringValue": aws["stream_arn"]}}
    sqs.send_message(QueueUrl=aws["dlq"], MessageBody='{"id":"y","key":"k","detla":1}', MessageAttributes=attributes)
    sqs.send_message(QueueUrl=aws["dlq"], MessageBody='{"id":"z","key":"k","delta":1}')
    info = {
        "shardId": put[0]["ShardId"],
        "startSequenceNumber": put[0]["SequenceNumber"],
        "endSequenceNumber": put[2]["SequenceNumber"],
        "batchSize": 3,
        "streamArn": aws["stream_arn"],
    }
    sqs.send_message(
        QueueUrl=aws["dlq"],
        MessageBody=json.dumps({"requestContext": {"condition": "RecordAgeExceeded"}, "KinesisBatchInfo": info}),
    )
    # A given-up batch, whole, in the S3 failure bucket (StreamFailureDestination=S3), as Lambda writes it.
    (shard,) = kinesis.list_shards(StreamName="tally-stream")["Shards"]
    iterator = kinesis.get_shard_iterator(
        StreamName="tally-stream", ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator)["Records"][:2]
    now = datetime.now(UTC)
    metadata = on_failure_record(
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:stream",
        condition="RetryAttemptsExhausted",
        invoke_count=11,
        shard_id=shard["ShardId"],
        stream_arn=aws["stream_arn"],
        records=records,
        function_error_kind="Unhandled",
        now=now,
    )
    event = kinesis_event(records, aws["stream_arn"], shard["ShardId"], "us-east-1")
    key, body = s3_on_failure_object(
        mapping_uuid="mapping", record=metadata, event_records=event["Records"], now=now, object_id="o-1"
    )
    aws["s3"].put_object(Bucket="tally-failures", Key=key, Body=json.dumps(body).encode())
    run("dlq", "list", "--failure-bucket", "tally-failures")  # ReceiveMessage, ChangeMessageVisibilityBatch, S3
    run("dlq", "redrive", "--stack", "tally-ops")  # GetQueueUrl, SendMessage, PutRecord, GetShardIterator, ...
    # The archive the Lambda drive wrote: audited (ListObjectsV2, GetObject in parallel, the table's Scan,
    # BatchGetItem and Query; the hand-put key "old" drifts: exit status 1, and the dead-letter queue is read),
    # a key's history, and a void aimed but not sent (--dry-run: its publish is tally publish's SendMessageBatch).
    audited = runner.invoke(cli, ["audit", "--settle", "0", "--attempts", "1", "--json"], catch_exceptions=False)
    assert audited.exit_code == 1, audited.output
    assert json.loads(audited.stdout)["findings"][0]["key"] == "old"
    history = runner.invoke(cli, ["events", "page:/home", "--json"], catch_exceptions=False)
    assert history.exit_code == 0, history.output
    voided = runner.invoke(cli, ["void", json.loads(history.stdout.splitlines()[0])["id"], "--dry-run", "--json"])
    assert voided.exit_code == 0, voided.output


def drive_an_application(aws: dict[str, Any]) -> None:
    """What an application does with ProducerPolicy and ReaderPolicy: publish with the producer library, read
    with the reader library, and call the read endpoint (its function's own calls)."""
    SqsPublisher(aws["sqs"], aws["queue"]).publish([Event.count("app:page"), Event.count("hot")])  # SendMessageBatch
    KinesisPublisher(aws["kinesis"], stream_name="tally-stream").publish([Event.count("app:page")])  # PutRecords
    reader = CounterReader.from_environment(client=boto3.client("dynamodb"))
    reader.get_many(["page:/home", "hot"])  # BatchGetItem
    reader.series("page:/home", "hour")  # Query
    reader.top(3)  # Scan
    assert NotificationReader.from_environment(
        client=boto3.client("dynamodb")
    ).list()  # Scan (the Lambda drive's crossing)
    context = LocalLambdaContext()
    for name in ("read-get.json", "read-series.json"):  # BatchGetItem, Query (as the endpoint's role)
        assert read_handler.handler(json.loads((EVENTS_DIR / "read" / name).read_text()), context)["statusCode"] == 200


@pytest.fixture(scope="module")
def recorded() -> Recording:
    """The calls of the Lambda path, the operator's commands and an application, as the session's recorder saw them."""
    with pytest.MonkeyPatch.context() as monkeypatch, moto_stack(monkeypatch) as aws, RECORDER.capture() as calls:
        drive_the_lambda_path(aws, monkeypatch)
        drive_the_operator_commands(aws)
        drive_an_application(aws)
    return Recording.of(calls, RECORDER.tables)


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    return transformed_template()


def _operations(calls: Any, role: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for call in calls:
        if call.role != role:
            continue
        found.add((call.operation, call.site.split(" ")[-1]))
        found |= {(f"{call.operation}.{t.item_action}", t.item_action) for t in call.targets if t.item_action}
    return found


# What the drive must have recorded (by operation and calling function), so that an empty or partial
# recording fails here rather than passing the evaluation below.
LAMBDA_CALLS = {
    ("TransactWriteItems", "write"),  # direct transactions (store.dynamodb)
    ("TransactWriteItems", "_transact"),  # the journal's steps
    ("TransactWriteItems", "_send"),  # distinct-count members and their counts (store.distinct)
    ("TransactWriteItems", "_commit"),  # ended windows moved off key items (store.windows)
    ("TransactWriteItems.Put", "Put"),
    ("TransactWriteItems.Update", "Update"),
    ("TransactWriteItems.ConditionCheck", "ConditionCheck"),
    ("BatchGetItem", "batch_get"),  # marker pre-read, journal progress and range check (store.schema)
    ("BatchWriteItem", "_put_all"),  # journal pages, and a spill's pages with its header (store.journal)
    ("GetItem", "read"),
    ("SendMessageBatch", "send"),
}
OPERATOR_CALLS = {
    ("BatchGetItem", "batch_get"),  # tally get (tally.reader; store.schema, shared with the journal)
    ("Query", "query_pages"),  # tally get --window and --by, tally audit (tally.reader)
    ("Scan", "scan_all_time_items"),  # tally top (tally.reader), tally windows close (store.windows)
    ("Scan", "scan_notifications"),  # tally notifications list (tally.reader.notifications)
    ("TransactWriteItems", "_commit"),
    ("TransactWriteItems.Update", "Update"),
    ("DescribeStacks", "describe"),  # --stack, $TALLY_STACK, tally stack (tally.cli.resolve, the one reader)
    ("SendMessageBatch", "send_batch"),  # tally publish
    ("PutRecords", "send_batch"),
    ("ReceiveMessage", "_receive"),
    ("ChangeMessageVisibilityBatch", "_release"),
    ("DeleteMessage", "_redrive_one"),
    ("GetQueueUrl", "_queue_url"),
    ("SendMessage", "_resend"),
    ("PutRecord", "_resend"),
    ("GetShardIterator", "_replay"),
    ("GetRecords", "_replay"),
    ("PutRecords", "_put_chunk"),
    ("ListObjectsV2", "_failure_keys"),  # the S3 failure bucket (StreamFailureDestination=S3)
    ("GetObject", "_read_object"),
    ("DeleteObject", "_redrive_bucket"),
    ("ListObjectsV2", "archive_keys"),  # tally audit, events, void: the archive (tally.audit.objects)
    ("ListObjectsV2", "written_since"),  # tally audit's second listing (StartAfter)
    ("GetObject", "object_body"),
}


PRODUCER_CALLS = {("SendMessageBatch", "send_batch"), ("PutRecords", "send_batch")}
READER_CALLS = {
    ("BatchGetItem", "batch_get"),
    ("Query", "query_pages"),
    ("Scan", "scan_all_time_items"),
    ("Scan", "scan_notifications"),
}
READ_FUNCTION_CALLS = {("BatchGetItem", "batch_get"), ("Query", "query_pages")}
# Granted on purpose though the library never calls it: producers that are not tally.producer (the AWS CLI's
# `kinesis put-record`, an SDK's single put) publish with the same policy.
UNUSED_BY_DESIGN = {("ProducerPolicy", "PutToTheStream: kinesis:PutRecord on")}


def test_the_drive_records_every_call_the_paths_make(recorded: Recording) -> None:
    # GIVEN the Lambda path, the operator's commands and an application, driven WHEN their calls are recorded
    calls = list(recorded.calls)
    # THEN each call the code is known to make is there, attributed to who makes it
    assert _operations(calls, FUNCTION) >= LAMBDA_CALLS, sorted(_operations(calls, FUNCTION))
    assert _operations(calls, OPERATOR) >= OPERATOR_CALLS, sorted(_operations(calls, OPERATOR))
    assert _operations(calls, PRODUCER) >= PRODUCER_CALLS, sorted(_operations(calls, PRODUCER))
    assert _operations(calls, READER) >= READER_CALLS, sorted(_operations(calls, READER))
    assert _operations(calls, READ_FUNCTION) >= READ_FUNCTION_CALLS, sorted(_operations(calls, READ_FUNCTION))
    # AND the tests' own set-up (creating tables, sending dead letters) is nobody's
    assert all(call.role == "" for call in calls if call.operation in {"CreateTable", "CreateQueue", "CreateStack"})


def test_a_test_driving_an_adapter_directly_is_neither_the_function_nor_the_operator() -> None:
    # GIVEN a test reading a marker through the store itself (no handler, pipeline or CLI on the stack)
    with pytest.MonkeyPatch.context() as monkeypatch, moto_stack(monkeypatch), RECORDER.capture() as calls:
        store = DynamoDBCounterStore(boto3.client("dynamodb"), "counters", "markers", 86_400)
        store.read_marker("m-1")
    # THEN its GetItem is recorded with its call site, but held against nobody's policy
    (call,) = [call for call in calls if call.operation == "GetItem"]
    assert call.site.startswith("tally/store/dynamodb.py:")
    assert call.role == ""


def test_an_empty_recording_fails_the_check() -> None:
    assert not _operations([], FUNCTION) >= LAMBDA_CALLS
    assert not _operations([], OPERATOR) >= OPERATOR_CALLS


def _report(verdicts: list[Verdict]) -> str:
    return "\n".join(line for verdict in verdicts for line in verdict.lines())


@pytest.mark.parametrize("source", SOURCES)
def test_every_role_allows_every_call_its_code_and_lambda_make(
    recorded: Recording, transformed: dict[str, Any], source: str
) -> None:
    # GIVEN the stack for this Source WHEN each function role and the operator's policy are asked for
    # the recorded calls (and Lambda's own calls with each role)
    verdicts = evaluate(transformed, recorded, source)
    print(f"\nIAM contract, Source={source}:\n{_report(verdicts)}")
    # THEN nothing is denied, every call could be mapped, and nothing is granted that is never used
    assert [v.grantee for v in verdicts][-3:] == ["OperatorPolicy", "ProducerPolicy", "ReaderPolicy"]
    assert "ReadFunctionRole" in [v.grantee for v in verdicts]
    assert all(v.asked for v in verdicts), _report(verdicts)
    assert [(v.grantee, r) for v in verdicts for r in v.denied] == [], _report(verdicts)
    assert [p for v in verdicts for p in v.problems] == [], _report(verdicts)
    unused = [
        (v.grantee, u)
        for v in verdicts
        for u in v.unused
        if not any(v.grantee == g and u.startswith(prefix) for g, prefix in UNUSED_BY_DESIGN)
    ]
    assert unused == [], _report(verdicts)


def test_a_missing_grant_is_named_with_its_call_site(transformed: dict[str, Any]) -> None:
    # GIVEN a recorded BatchWriteItem of the journal on the markers table, and the role without that grant
    call = Call.from_json(
        {
            "role": FUNCTION,
            "site": "tally/store/journal.py:133 write_pages",
            "service": "dynamodb",
            "operation": "BatchWriteItem",
            "targets": [["table", "markers", "PutRequest", ["expires_at", "id", "page"], ""]],
        }
    )
    recording = Recording.of([call], {"markers": ("id",)})
    broken = json.loads(json.dumps(transformed))
    for resource in broken["Resources"].values():
        if resource["Type"] == "AWS::IAM::Role":
            for policy in resource["Properties"].get("Policies", []):
                for statement in policy["PolicyDocument"]["Statement"]:
                    if "Action" not in statement:  # a conditional statement ({"Fn::If": ...}): not this grant
                        continue
                    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                    statement["Action"] = [a for a in actions if a != "dynamodb:BatchWriteItem"] or ["dynamodb:GetItem"]
    # WHEN evaluated THEN the denial names the action, the table's ARN and the call site
    verdicts = evaluate(broken, recording, "SQS")
    (denied,) = verdicts[0].denied
    assert denied.action == "dynamodb:BatchWriteItem"
    assert denied.resource.endswith(":table/MarkersTable")
    assert "tally/store/journal.py:133 write_pages" in denied.origin


def test_a_call_the_mapping_does_not_know_is_a_problem_not_a_pass(transformed: dict[str, Any]) -> None:
    call = Call.from_json(
        {
            "role": FUNCTION,
            "site": "tally/commit/applier.py:1 x",
            "service": "dynamodb",
            "operation": "ExecuteStatement",
            "targets": [],
        }
    )
    (verdict, *_) = evaluate(transformed, Recording.of([call], {}), "SQS")
    assert any("ExecuteStatement" in problem for problem in verdict.problems)


def test_the_vendored_managed_policies_are_the_ones_moto_ships() -> None:
    # The documents SAM's managed policies are evaluated with were copied from moto's copy of AWS's; a newer
    # moto with a changed document means AWS changed it: copy it again (tests/template/data/).
    from moto.iam.aws_managed_policies import aws_managed_policies_data  # noqa: PLC0415

    shipped = json.loads(aws_managed_policies_data)
    vendored = json.loads(MANAGED_POLICIES.read_text(encoding="utf-8"))["policies"]
    assert {name: policy["Document"] for name, policy in vendored.items()} == {
        name: shipped[name]["Document"] for name in vendored
    }


def test_the_reader_and_producer_policies_are_held_to_their_calls(
    recorded: Recording, transformed: dict[str, Any]
) -> None:
    # GIVEN ReaderPolicy without Query, and ProducerPolicy granting one action more on the queue
    broken = json.loads(json.dumps(transformed))
    reader = broken["Resources"]["ReaderPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    reader["Action"] = [a for a in reader["Action"] if a != "dynamodb:Query"]
    queue = broken["Resources"]["ProducerPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]["Fn::If"][1]
    queue["Action"] = [*queue["Action"], "sqs:DeleteMessage"]
    # WHEN evaluated against the recorded application calls
    verdicts = {v.grantee: v for v in evaluate(broken, recorded, "SQS")}
    # THEN the series read is denied, named with its call site, and the extra grant is reported unused
    (denied,) = verdicts["ReaderPolicy"].denied
    assert (denied.action, denied.resource.endswith(":table/CountersTable")) == ("dynamodb:Query", True)
    assert "tally/store/requests.py" in denied.origin  # the one Query loop, as batch_get is the one BatchGetItem loop
    assert any("sqs:DeleteMessage" in u for u in verdicts["ProducerPolicy"].unused)
