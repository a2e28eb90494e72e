"""template.yaml's ``Source`` parameter: each choice creates exactly its resources, and the Kinesis
path carries the guarantees exactly-once counting relies on (finite retries, bisection, an on-failure
destination, encryption, least privilege)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.template.conditions import deployed, evaluate_conditions, parameter_values
from tests.template.test_template import (
    COUNTING_FUNCTION_GRANTS,
    REPO_ROOT,
    _as_list,
    _policy_statements,
    blocking,
    cfn_lint,
    granted,
    sam_transform,
)

SQS_ONLY = {"EventsQueue", "CounterFunction", "CounterFunctionRole", "CounterFunctionLogGroup"}
KINESIS_ONLY = {
    "EventStream",
    "StreamCounterFunction",
    "StreamCounterFunctionRole",
    "StreamCounterFunctionLogGroup",
    "StreamIteratorAgeAlarm",
}
ALWAYS = {
    "CountersTable",
    "MarkersTable",
    "NotificationsTable",
    "EventsDeadLetterQueue",
    "DeadLetterQueueAlarm",
    "OperatorPolicy",
}
ALWAYS |= {"ProducerPolicy", "ReaderPolicy"}  # tests/template/test_read_access.py
ALWAYS |= {"ArchiveBucket", "ArchiveDatabase", "ArchiveTable"}  # ArchiveEnabled=true by default
SOURCES = {"SQS": SQS_ONLY, "Kinesis": KINESIS_ONLY, "Both": SQS_ONLY | KINESIS_ONLY}
OUTPUTS = {
    "SQS": {"EventsQueueUrl", "EventsQueueArn", "CounterFunctionName"},
    "Kinesis": {"EventStreamName", "EventStreamArn", "StreamCounterFunctionName"},
}
OUTPUTS["Both"] = OUTPUTS["SQS"] | OUTPUTS["Kinesis"]
COMMON_OUTPUTS = {
    "DeadLetterQueueUrl",
    "DeadLetterQueueArn",
    "CountersTableName",
    "MarkersTableName",
    "NotificationsTableName",
    "NotificationsDeadLetterQueueUrl",
    "NotificationBusArn",
    "DashboardName",
    "OperatorPolicyArn",
    "ProducerPolicyArn",
    "ReaderPolicyArn",
    "ArchiveBucketName",
    "ArchiveDatabaseName",
}
STREAM_FUNCTION = "StreamCounterFunction"


def variant(template: dict[str, Any], transformed: dict[str, Any], source: str, **values: str) -> dict[str, Any]:
    """The stack CloudFormation would create (conditions evaluated, ``Fn::If`` resolved)."""
    return deployed(transformed, parameter_values(template, Source=source, **values))


def kinesis_stack(template: dict[str, Any], transformed: dict[str, Any], **values: str) -> dict[str, Any]:
    resources: dict[str, Any] = variant(template, transformed, "Kinesis", **values)["Resources"]
    return resources


def _stream_mapping(resources: dict[str, Any]) -> dict[str, Any]:
    (mapping,) = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    properties: dict[str, Any] = mapping["Properties"]
    return properties


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_each_source_creates_only_its_resources(
    template: dict[str, Any], transformed: dict[str, Any], source: str
) -> None:
    # GIVEN the template WHEN deployed with Source=<source>
    stack = variant(template, transformed, source)
    logical_ids = set(stack["Resources"])
    # THEN the chosen source's resources exist and the other's do not; shared resources always do
    assert ALWAYS | SOURCES[source] <= logical_ids
    assert not (SQS_ONLY | KINESIS_ONLY) - SOURCES[source] & logical_ids
    mappings = [r["Properties"] for r in stack["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    sources = {json.dumps(m["EventSourceArn"]) for m in mappings}
    expected = {
        "SQS": [{"Fn::GetAtt": ["EventsQueue", "Arn"]}],
        "Kinesis": [{"Fn::GetAtt": ["EventStream", "Arn"]}],
        "Both": [{"Fn::GetAtt": ["EventsQueue", "Arn"]}, {"Fn::GetAtt": ["EventStream", "Arn"]}],
    }[source]
    assert sources == {json.dumps(arn) for arn in expected}
    assert set(stack["Outputs"]) == COMMON_OUTPUTS | OUTPUTS[source]


@pytest.mark.slow  # cfn-lint over a transformed template: seconds of CPU (make test-fast skips it)
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_each_source_transforms_and_lints_clean(template: dict[str, Any], source: str) -> None:
    chosen = copy.deepcopy(template)
    chosen["Parameters"]["Source"]["Default"] = source
    matches = cfn_lint(sam_transform(chosen))
    assert blocking(matches) == [], [str(m) for m in matches]


def test_source_parameter(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["Source"]
    assert parameter["AllowedValues"] == ["SQS", "Kinesis", "Both"]
    assert parameter["Default"] == "SQS"


def test_kinesis_event_source_reports_failures_bisects_and_gives_up_in_bounded_time(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    properties = _stream_mapping(kinesis_stack(template, transformed))
    parameters = template["Parameters"]
    assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert properties["BisectBatchOnFunctionError"] is True
    assert properties["StartingPosition"] == "TRIM_HORIZON"
    assert properties["BatchSize"] == {"Ref": "StreamBatchSize"}
    assert properties["MaximumBatchingWindowInSeconds"] == {"Ref": "StreamBatchingWindowSeconds"}
    assert properties["ParallelizationFactor"] == {"Ref": "ParallelizationFactor"}
    assert (parameters["ParallelizationFactor"]["MinValue"], parameters["ParallelizationFactor"]["MaxValue"]) == (1, 10)
    # Bounded in time: the retries may be unlimited (-1, the default: a crash's lease must not spend a count,
    # tests/template/test_liveness.py), the record's age never is (-1, infinite, is below every allowed value).
    assert properties["MaximumRetryAttempts"] == {"Ref": "StreamMaximumRetryAttempts"}
    assert parameters["StreamMaximumRetryAttempts"]["MinValue"] >= -1
    assert parameters["StreamMaximumRetryAttempts"]["MaxValue"] <= 10_000
    assert properties["MaximumRecordAgeInSeconds"] == {"Ref": "StreamMaximumRecordAgeSeconds"}
    assert parameters["StreamMaximumRecordAgeSeconds"]["MinValue"] >= 60
    assert parameters["StreamMaximumRecordAgeSeconds"]["MaxValue"] <= 604_800


def test_kinesis_on_failure_destination_is_the_dead_letter_queue(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    resources = kinesis_stack(template, transformed)
    destination = _stream_mapping(resources)["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
    # the function's role may send there (Lambda delivers the on-failure record with that role)
    sends = [
        s
        for s in _policy_statements(resources)
        if "sqs:SendMessage" in _as_list(s["Action"]) and s["Resource"] == destination
    ]
    assert sends


def test_stream_is_encrypted_on_demand_by_default_with_shards_only_when_provisioned(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    stream = kinesis_stack(template, transformed)["EventStream"]["Properties"]
    assert stream["StreamEncryption"] == {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"}
    assert stream["StreamModeDetails"] == {"StreamMode": {"Ref": "StreamMode"}}
    assert template["Parameters"]["StreamMode"]["Default"] == "ON_DEMAND"
    assert template["Parameters"]["StreamMode"]["AllowedValues"] == ["ON_DEMAND", "PROVISIONED"]
    assert "ShardCount" not in stream  # on demand: no shard count
    provisioned_stream = kinesis_stack(template, transformed, StreamMode="PROVISIONED")["EventStream"]["Properties"]
    assert provisioned_stream["ShardCount"] == {"Ref": "ShardCount"}
    assert stream["RetentionPeriodHours"] == {"Ref": "StreamRetentionHours"}
    for mode, provisioned in (("ON_DEMAND", False), ("PROVISIONED", True)):
        values = parameter_values(template, Source="Kinesis", StreamMode=mode)
        assert evaluate_conditions(template, values)["ProvisionedStream"] is provisioned


def test_markers_outlive_every_way_a_kinesis_record_comes_back(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    # Replayed from the stream (at most its retention), or dead-lettered and re-published (14 days).
    longest_days = parameters["StreamRetentionHours"]["MaxValue"] / 24 + 14
    assert parameters["MarkerTtlDays"]["MinValue"] >= longest_days
    # By default a record Lambda gave up on is still in the stream, to be replayed.
    assert parameters["StreamMaximumRecordAgeSeconds"]["Default"] < parameters["StreamRetentionHours"]["Default"] * 3600


def test_stream_function_iam_is_least_privilege(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    resources = kinesis_stack(template, transformed)
    for statement in _policy_statements(resources):
        assert statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"]):
            assert "*" not in action
            assert action != "dynamodb:Scan"
            assert not action.startswith("dynamodb:Delete")
        for resource in _as_list(statement["Resource"]):
            assert isinstance(resource, dict), resource
    assert granted(resources) == COUNTING_FUNCTION_GRANTS
    role = resources[f"{STREAM_FUNCTION}Role"]["Properties"]
    assert {arn.rsplit("/", 1)[-1] for arn in role["ManagedPolicyArns"]} == {
        "AWSLambdaBasicExecutionRole",
        "AWSXrayWriteOnlyAccess",
        "AWSLambdaKinesisExecutionRole",
    }


def test_both_functions_share_code_configuration_and_environment(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    resources = variant(template, transformed, "Both")["Resources"]
    sqs, kinesis = resources["CounterFunction"]["Properties"], resources[STREAM_FUNCTION]["Properties"]
    for name in ("Runtime", "Architectures", "MemorySize", "Timeout", "TracingConfig", "Environment"):
        assert sqs[name] == kinesis[name], name
    assert kinesis["Handler"] == "tally.handlers.kinesis.handler"
    assert kinesis["LoggingConfig"]["LogGroup"] == {"Ref": "StreamCounterFunctionLogGroup"}
    raw = template["Resources"]
    assert raw["CounterFunction"]["Properties"]["CodeUri"] == raw[STREAM_FUNCTION]["Properties"]["CodeUri"]
    source = REPO_ROOT / raw[STREAM_FUNCTION]["Properties"]["CodeUri"] / "tally/handlers/kinesis.py"
    assert "def handler(" in source.read_text(encoding="utf-8")


def test_iterator_age_alarm_watches_the_stream_function(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    alarm = kinesis_stack(template, transformed)["StreamIteratorAgeAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "IteratorAge")
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": STREAM_FUNCTION}}]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
