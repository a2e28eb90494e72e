"""The template reader's view of parameters, conditions, the stream, its event source and the functions.

The local stack builds everything from these, so each is checked against the template itself.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tally_local.template import (
    KinesisEventSource,
    StreamDefinition,
    condition_values,
    function_definition,
    load_template,
    queue_definitions,
    resource_created,
    stream_definitions,
    stream_event_sources,
    with_parameters,
)

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"
LOCAL_NAMES = {
    "CountersTable": "c-table",
    "MarkersTable": "m-table",
    "NotificationsTable": "n-table",
    "EventsDeadLetterQueue": "http://dlq",
    "EventsQueue": "http://q",
    "EventStream": "s",
    "ArchiveBucket": "a-bucket",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"NoSuchParameter": "1"}, "is not a parameter of template.yaml"),
        ({"Source": "Kafka"}, "is not one of"),
        ({"MaxReceiveCount": "2"}, "outside"),
        ({"BatchSize": "ten"}, "not a number"),
        ({"HotKeys": "no shard count"}, "does not match"),
    ],
)
def test_overrides_a_deployment_would_refuse_are_refused(
    template: dict[str, Any], overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        with_parameters(template, overrides)


def test_overrides_leave_the_template_itself_alone(template: dict[str, Any]) -> None:
    # WHEN a copy is made with Source=Both
    both = with_parameters(template, {"Source": "Both"})
    # THEN the copy has the new Default and the original keeps its own
    assert both["Parameters"]["Source"]["Default"] == "Both"
    assert template["Parameters"]["Source"]["Default"] == "SQS"


@pytest.mark.parametrize(
    ("source", "queue", "stream"),
    [("SQS", True, False), ("Kinesis", False, True), ("Both", True, True)],
)
def test_the_source_parameter_decides_what_is_created(
    template: dict[str, Any], source: str, queue: bool, stream: bool
) -> None:
    deployed = with_parameters(template, {"Source": source})
    assert condition_values(deployed)["UseSqs"] is queue
    assert resource_created(deployed, "EventsQueue") is queue
    assert resource_created(deployed, "CounterFunction") is queue
    assert resource_created(deployed, "EventStream") is stream
    assert resource_created(deployed, "StreamCounterFunction") is stream
    # the tables and the dead-letter queue always are
    assert all(resource_created(deployed, name) for name in ("CountersTable", "MarkersTable", "EventsDeadLetterQueue"))


def test_stream_is_on_demand_by_default_and_takes_its_shards_when_provisioned(template: dict[str, Any]) -> None:
    retention = int(template["Parameters"]["StreamRetentionHours"]["Default"])
    assert stream_definitions(template) == {
        "EventStream": StreamDefinition("EventStream", on_demand=True, shard_count=None, retention_hours=retention)
    }
    provisioned = stream_definitions(with_parameters(template, {"StreamMode": "PROVISIONED", "ShardCount": "3"}))
    assert provisioned["EventStream"].shard_count == 3
    assert provisioned["EventStream"].create_stream_kwargs("s") == {
        "StreamName": "s",
        "ShardCount": 3,
        "StreamModeDetails": {"StreamMode": "PROVISIONED"},
    }


def test_kinesis_event_source_is_read_with_the_parameters_defaults(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    events = template["Resources"]["StreamCounterFunction"]["Properties"]["Events"]
    (name,) = events
    declared = events[name]["Properties"]
    assert stream_event_sources(template) == {
        name: KinesisEventSource(
            function_logical_id="StreamCounterFunction",
            event_name=name,
            stream_logical_id="EventStream",
            starting_position=declared["StartingPosition"],
            batch_size=int(parameters["StreamBatchSize"]["Default"]),
            maximum_batching_window_seconds=int(parameters["StreamBatchingWindowSeconds"]["Default"]),
            parallelization_factor=int(parameters["ParallelizationFactor"]["Default"]),
            bisect_batch_on_function_error=declared["BisectBatchOnFunctionError"],
            maximum_retry_attempts=int(parameters["StreamMaximumRetryAttempts"]["Default"]),
            maximum_record_age_seconds=int(parameters["StreamMaximumRecordAgeSeconds"]["Default"]),
            function_response_types=tuple(declared["FunctionResponseTypes"]),
            on_failure_destination="EventsDeadLetterQueue",
        )
    }


def test_function_environment_resolves_references_to_local_names(template: dict[str, Any]) -> None:
    # WHEN the function is read with local names for the resources
    function = function_definition(template, "CounterFunction", LOCAL_NAMES)
    # THEN its handler and timeout are the template's, and !Ref Resource became the local name
    assert function.handler == "tally.handlers.sqs.handler"
    assert function.timeout_seconds == int(template["Parameters"]["FunctionTimeoutSeconds"]["Default"])
    assert function.environment["TALLY_COUNTERS_TABLE"] == "c-table"
    assert function.environment["TALLY_MARKERS_TABLE"] == "m-table"
    assert function.environment["TALLY_DLQ_URL"] == "http://dlq"
    assert function.environment["TALLY_ARCHIVE_BUCKET"] == "a-bucket"
    off = with_parameters(template, {"ArchiveEnabled": "false"})
    assert function_definition(off, "CounterFunction", LOCAL_NAMES).environment["TALLY_ARCHIVE_BUCKET"] == ""
    # AND !Ref Parameter became the parameter's value
    hot = with_parameters(template, {"HotKeys": "page:/home=8"})
    assert function_definition(hot, "CounterFunction", LOCAL_NAMES).environment["TALLY_HOT_KEYS"] == "page:/home=8"


def test_function_environment_without_a_local_resource_is_refused(template: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="no local resource for !Ref CountersTable"):
        function_definition(template, "CounterFunction", {"MarkersTable": "m", "EventsDeadLetterQueue": "d"})


def _with(template: dict[str, Any], resource: str, **properties: Any) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    changed["Resources"][resource]["Properties"].update(properties)
    return changed


def test_every_queue_property_reaches_create_queue_as_resolved(template: dict[str, Any]) -> None:
    # GIVEN the template's queues WHEN the dead-letter queue's CreateQueue request is built
    dead = queue_definitions(template)["EventsDeadLetterQueue"].create_queue_kwargs("dlq")
    # THEN every property the template declares is an attribute, none dropped for not being on a list
    declared = template["Resources"]["EventsDeadLetterQueue"]["Properties"]
    # (FifoQueue is `!If [FifoQueue, true, !Ref AWS::NoValue]`: absent, as CloudFormation leaves it, unless
    # QueueType=FIFO)
    assert set(dead["Attributes"]) == set(declared) - {"FifoQueue"}
    fifo_dead = queue_definitions(with_parameters(template, {"QueueType": "FIFO", "BatchingWindowSeconds": "0"}))
    assert fifo_dead["EventsDeadLetterQueue"].create_queue_kwargs("dlq.fifo")["Attributes"]["FifoQueue"] == "true"
    assert dead["Attributes"]["SqsManagedSseEnabled"] == "true"
    assert json.loads(dead["Attributes"]["RedriveAllowPolicy"]) == declared["RedriveAllowPolicy"]
    # AND a FIFO queue needs nothing but the template's properties: its attributes pass through
    fifo = _with(template, "EventsQueue", FifoQueue=True, ContentBasedDeduplication={"Ref": "Windows"})
    queue = queue_definitions(fifo)["EventsQueue"]
    assert queue.fifo is True
    attributes = queue.create_queue_kwargs("q.fifo", "arn:aws:sqs:us-east-1:123456789012:dlq")["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == template["Parameters"]["Windows"]["Default"]


def test_sub_and_pseudo_parameters_resolve_like_cloudformation(template: dict[str, Any]) -> None:
    # GIVEN an environment variable built with !Sub from a parameter, a pseudo parameter and a resource
    changed = copy.deepcopy(template)
    variables = changed["Globals"]["Function"]["Environment"]["Variables"]
    variables["TALLY_LABEL"] = {"Fn::Sub": "${AWS::Region}/${Windows}/${CountersTable}"}
    # WHEN the function is read with local names THEN each is substituted
    environment = function_definition(changed, "CounterFunction", LOCAL_NAMES).environment
    assert environment["TALLY_LABEL"] == "us-east-1/hour,day/c-table"


def test_an_intrinsic_the_local_reader_cannot_resolve_is_named(template: dict[str, Any]) -> None:
    changed = _with(template, "EventsQueue", VisibilityTimeout={"Fn::GetAZs": ""})
    with pytest.raises(ValueError, match=r"EventsQueue\.VisibilityTimeout: cannot resolve"):
        queue_definitions(changed)


def test_fifo_queues_from_the_template_are_created_as_fifo(template: dict[str, Any]) -> None:
    """FIFO queues need no change to the reader: FifoQueue and its companions are attributes."""
    moto = pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    fifo = _with(template, "EventsDeadLetterQueue", FifoQueue=True)
    fifo = _with(
        fifo,
        "EventsQueue",
        FifoQueue=True,
        ContentBasedDeduplication=False,
        FifoThroughputLimit="perMessageGroupId",
        DeduplicationScope="messageGroup",
    )
    queues = queue_definitions(fifo)
    with pytest.MonkeyPatch.context() as mp, moto.mock_aws():
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
            mp.delenv(name, raising=False)
        sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        dead = sqs.create_queue(**queues["EventsDeadLetterQueue"].create_queue_kwargs("dlq.fifo"))["QueueUrl"]
        dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url = sqs.create_queue(**queues["EventsQueue"].create_queue_kwargs("events.fifo", dead_arn))["QueueUrl"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["FifoThroughputLimit"] == "perMessageGroupId"
    assert attributes["DeduplicationScope"] == "messageGroup"
    assert json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"] == dead_arn
