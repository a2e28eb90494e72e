"""The template fits the account a team already has. A FIFO source queue with Lambda's FIFO
limits, a queue or stream the team owns (by ARN), given-up Kinesis batches kept whole in S3, and the event
source mapping's provisioned pollers and event-count metrics. Each choice is checked as CloudFormation
would create it (conditions evaluated, ``Fn::If`` resolved), its Rules as CloudFormation evaluates them at
deploy time, its CloudFormation with cfn-lint, and its roles by the IAM contract
(``tests.support.iam.CONFIGURATIONS``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.iam import CONFIGURATIONS, EXISTING_QUEUE_ARN, EXISTING_STREAM_ARN, Stack, functions, role_grantee
from tests.template.conditions import deployed, parameter_values
from tests.template.test_template import REPO_ROOT, blocking, cfn_lint, rules_accept

FIFO = {"QueueType": "FIFO", "BatchSize": "10", "BatchingWindowSeconds": "0"}


def stack(template: dict[str, Any], transformed: dict[str, Any], **values: str) -> dict[str, Any]:
    return deployed(transformed, parameter_values(template, **values))


def mappings(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Lambda::EventSourceMapping"
    }


# --- 1. FIFO queues -------------------------------------------------------------------------------------


def test_a_fifo_deployment_makes_the_queue_and_its_dead_letter_queue_fifo(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # GIVEN QueueType=FIFO (with the FIFO limits) WHEN deployed
    resources = stack(template, transformed, **FIFO)["Resources"]
    # THEN the source queue and its redrive target are FIFO (SQS requires a FIFO queue's DLQ to be FIFO)
    assert resources["EventsQueue"]["Properties"]["FifoQueue"] is True
    assert resources["EventsDeadLetterQueue"]["Properties"]["FifoQueue"] is True
    assert "ContentBasedDeduplication" not in resources["EventsQueue"]["Properties"]  # the producer's ids
    # AND the mapping takes at most 10 messages with no batching window, reporting partial batches
    (mapping,) = mappings(resources).values()
    assert mapping["BatchSize"] == {"Ref": "BatchSize"}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # AND a standard deployment sets no FifoQueue at all (SQS refuses FifoQueue=false on create)
    standard = stack(template, transformed)["Resources"]
    assert "FifoQueue" not in standard["EventsQueue"]["Properties"]
    assert "FifoQueue" not in standard["EventsDeadLetterQueue"]["Properties"]


@pytest.mark.parametrize(
    ("overrides", "accepted"),
    [
        (FIFO, True),
        ({**FIFO, "BatchSize": "1"}, True),
        ({**FIFO, "BatchSize": "11", "BatchingWindowSeconds": "1"}, False),  # Lambda: FIFO batches <= 10
        ({**FIFO, "BatchSize": "100", "BatchingWindowSeconds": "1"}, False),
        ({**FIFO, "BatchingWindowSeconds": "1"}, False),  # FIFO event sources have no batching window
        ({**FIFO, "Source": "Both"}, False),  # a Kinesis on-failure destination cannot be a FIFO queue
        ({**FIFO, "Source": "Kinesis"}, False),
        ({"QueueType": "FIFO"}, False),  # the defaults (100 messages, 1 s window) are not FIFO's
    ],
)
def test_rules_enforce_lambdas_fifo_limits(template: dict[str, Any], overrides: dict[str, str], accepted: bool) -> None:
    assert rules_accept(template, **overrides) is accepted


# --- 2. existing sources --------------------------------------------------------------------------------


def test_an_existing_queue_is_consumed_and_not_created(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    # GIVEN the ARN of a queue the team owns WHEN deployed
    deployed_stack = stack(template, transformed, ExistingQueueArn=EXISTING_QUEUE_ARN)
    resources, outputs = deployed_stack["Resources"], deployed_stack["Outputs"]
    # THEN no queue is created, and the function's mapping reads the team's queue
    assert "EventsQueue" not in resources
    (mapping,) = mappings(resources).values()
    assert mapping["EventSourceArn"] == {"Ref": "ExistingQueueArn"}
    # AND the outputs name it (the URL built from the ARN), so tally publish/redrive find it with --stack
    assert outputs["EventsQueueArn"]["Value"] == {"Ref": "ExistingQueueArn"}
    url = Stack(transformed, parameter_values(template, ExistingQueueArn=EXISTING_QUEUE_ARN)).resolve(
        outputs["EventsQueueUrl"]["Value"]
    )
    assert url == "https://sqs.us-east-1.amazonaws.com/123456789012/owners-events"
    # AND the dead-letter queue for poison is still the stack's (the team's redrive policy is theirs)
    assert "EventsDeadLetterQueue" in resources


def test_an_existing_stream_is_consumed_and_not_created(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    values = parameter_values(template, Source="Kinesis", ExistingStreamArn=EXISTING_STREAM_ARN)
    deployed_stack = deployed(transformed, values)
    assert "EventStream" not in deployed_stack["Resources"]
    (mapping,) = mappings(deployed_stack["Resources"]).values()
    assert mapping["EventSourceArn"] == {"Ref": "ExistingStreamArn"}
    assert Stack(transformed, values).resolve(deployed_stack["Outputs"]["EventStreamName"]["Value"]) == "owners-events"


@pytest.mark.parametrize(
    ("overrides", "accepted"),
    [
        ({"ExistingQueueArn": EXISTING_QUEUE_ARN}, True),
        ({"ExistingQueueArn": EXISTING_QUEUE_ARN, "Source": "Both"}, True),
        ({"ExistingQueueArn": EXISTING_QUEUE_ARN, "Source": "Kinesis"}, False),  # nothing would consume it
        ({"ExistingStreamArn": EXISTING_STREAM_ARN, "Source": "Kinesis"}, True),
        ({"ExistingStreamArn": EXISTING_STREAM_ARN}, False),
    ],
)
def test_rules_refuse_an_existing_source_nothing_consumes(
    template: dict[str, Any], overrides: dict[str, str], accepted: bool
) -> None:
    assert rules_accept(template, **overrides) is accepted


@pytest.mark.parametrize(
    ("parameter", "value", "allowed"),
    [
        ("ExistingQueueArn", "", True),
        ("ExistingQueueArn", EXISTING_QUEUE_ARN, True),
        ("ExistingQueueArn", "arn:aws:sqs:eu-west-1:123456789012:orders.fifo", True),
        ("ExistingQueueArn", f"arn:aws:sqs:us-east-1:123456789012:{'q' * 80}", True),  # SQS's longest name
        ("ExistingQueueArn", f"arn:aws:sqs:us-east-1:123456789012:{'q' * 81}", False),
        ("ExistingQueueArn", f"arn:aws:sqs:us-east-1:123456789012:{'q' * 76}.fifo", False),
        ("ExistingQueueArn", "https://sqs.us-east-1.amazonaws.com/123456789012/q", False),  # a URL, not an ARN
        ("ExistingQueueArn", EXISTING_STREAM_ARN, False),
        ("ExistingStreamArn", EXISTING_STREAM_ARN, True),
        ("ExistingStreamArn", "owners-events", False),  # a name, not an ARN
        ("ExistingStreamArn", EXISTING_QUEUE_ARN, False),
    ],
)
def test_existing_source_parameters_take_only_an_arn_of_their_kind(
    template: dict[str, Any], parameter: str, value: str, allowed: bool
) -> None:
    # CloudFormation checks AllowedPattern at deploy time (the whole value must match)
    pattern = template["Parameters"][parameter]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is allowed


# --- 5. replayable stream failures ----------------------------------------------------------------------


def test_stream_failures_go_whole_to_an_s3_bucket_the_function_may_write(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # GIVEN StreamFailureDestination=S3 WHEN deployed
    values = parameter_values(template, **CONFIGURATIONS["Kinesis, failures to S3"])
    resources = deployed(transformed, values)["Resources"]
    bucket = resources["StreamFailureBucket"]["Properties"]
    # THEN the mapping's on-failure destination is the bucket
    (mapping,) = mappings(resources).values()
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["StreamFailureBucket", "Arn"]}
    # AND the bucket is private and encrypted, and expires batches before their records' markers could
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    (rule,) = bucket["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == {"Ref": "StreamFailureRetentionDays"}
    parameters = template["Parameters"]
    longest_stream_age_days = parameters["StreamMaximumRecordAgeSeconds"]["MaxValue"] / 86_400
    assert (
        parameters["StreamFailureRetentionDays"]["MaxValue"] + longest_stream_age_days + 1
        <= (parameters["MarkerTtlDays"]["MinValue"])
    )
    # AND Lambda, writing with the function's role, may put the object and list the bucket (IAM evaluated)
    iam_stack = Stack(transformed, values)
    (function,) = functions(iam_stack)
    role = role_grantee(iam_stack, function.role_id)
    s3_calls = [call for call in function.runtime_calls if call.action.startswith("s3:")]
    assert {call.action for call in s3_calls} == {"s3:PutObject", "s3:ListBucket"}
    assert all(role.allows(call.action, call.resource) for call in s3_calls)
    # AND the SQS destination stays the default
    default = mappings(stack(template, transformed, Source="Kinesis")["Resources"])
    assert next(iter(default.values()))["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]
    }


def test_without_the_s3_grant_the_contract_denies_lambdas_write(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # GIVEN the S3 configuration with the role's FailedBatchesToS3 statement removed
    broken = json.loads(json.dumps(transformed))
    for policy in broken["Resources"]["StreamCounterFunctionRole"]["Properties"]["Policies"]:
        statements = policy["PolicyDocument"]["Statement"]
        policy["PolicyDocument"]["Statement"] = [s for s in statements if "FailedBatchesToS3" not in json.dumps(s)]
    iam_stack = Stack(broken, parameter_values(template, **CONFIGURATIONS["Kinesis, failures to S3"]))
    (function,) = functions(iam_stack)
    role = role_grantee(iam_stack, function.role_id)
    # THEN Lambda's PutObject of the invocation record is denied (what AWS would do: the batch is lost)
    (put,) = [call for call in function.runtime_calls if call.action == "s3:PutObject"]
    assert put.resource.startswith("arn:aws:s3:::StreamFailureBucket/aws/lambda/")
    assert not role.allows(put.action, put.resource)


def test_given_up_batches_alarm_wherever_they_go(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    runbook = (REPO_ROOT / "docs" / "runbook.md").read_text()
    # GIVEN the S3 destination: the dead-letter queue's alarm does not see a batch given up to the bucket
    resources = stack(template, transformed, Source="Kinesis", StreamFailureDestination="S3")["Resources"]
    alarm = resources["StreamFailedBatchesAlarm"]["Properties"]
    # THEN an alarm watches the mapping's deliveries to its on-failure destination
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "OnFailureDestinationDeliveredEventCount")
    assert alarm["Dimensions"] == [
        {"Name": "EventSourceMappingUUID", "Value": {"Ref": "StreamCounterFunctionEventStreamBatch"}}
    ]
    # AND, whatever the destination, one watches deliveries that failed (the batch's only trace)
    for destination in ("SQS", "S3"):
        resources = stack(template, transformed, Source="Kinesis", StreamFailureDestination=destination)["Resources"]
        assert resources["StreamFailureDeliveryAlarm"]["Properties"]["MetricName"] == "DestinationDeliveryFailures"
    assert "StreamFailedBatchesAlarm" not in stack(template, transformed, Source="Kinesis")["Resources"]
    # AND the runbook says what to do for each
    assert "## StreamFailedBatchesAlarm" in runbook
    assert "## StreamFailureDeliveryAlarm" in runbook


@pytest.mark.parametrize(("source", "accepted"), [("Kinesis", True), ("Both", True), ("SQS", False)])
def test_rules_refuse_an_s3_destination_without_a_stream(template: dict[str, Any], source: str, accepted: bool) -> None:
    assert rules_accept(template, Source=source, StreamFailureDestination="S3") is accepted


# --- 6. scaling knobs -----------------------------------------------------------------------------------


def test_provisioned_pollers_only_when_asked(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    (default,) = mappings(stack(template, transformed)["Resources"]).values()
    assert "ProvisionedPollerConfig" not in default  # on-demand polling by default
    (provisioned,) = mappings(stack(template, transformed, SqsMinimumPollers="2")["Resources"]).values()
    assert provisioned["ProvisionedPollerConfig"] == {
        "MinimumPollers": {"Ref": "SqsMinimumPollers"},
        "MaximumPollers": {"Ref": "SqsMaximumPollers"},
    }
    parameters = template["Parameters"]
    # AWS: SQS provisioned mode takes 2-200 minimum and 2-10,000 maximum pollers
    assert (parameters["SqsMinimumPollers"]["MinValue"], parameters["SqsMinimumPollers"]["MaxValue"]) == (0, 200)
    assert (parameters["SqsMaximumPollers"]["MinValue"], parameters["SqsMaximumPollers"]["MaxValue"]) == (2, 10_000)
    assert rules_accept(template, SqsMinimumPollers="1") is False
    assert rules_accept(template, SqsMinimumPollers="2") is True


def test_both_mappings_emit_event_counts_and_the_dashboard_shows_them(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    resources = stack(template, transformed, Source="Both")["Resources"]
    for properties in mappings(resources).values():
        assert properties["MetricsConfig"] == {"Metrics": ["EventCount"]}
    body, variables = resources["PipelineDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    for metric in (
        "PolledEventCount",
        "FilteredOutEventCount",
        "FailedInvokeEventCount",
        "DroppedEventCount",
        "OnFailureDestinationDeliveredEventCount",
    ):
        assert f'"{metric}"' in body
    assert '"EventSourceMappingUUID", "${MappingUUID}"' in body
    assert variables["MappingUUID"] == {"Ref": "CounterFunctionEventsQueueBatch"}  # SAM's mapping of the event
    assert "CounterFunctionEventsQueueBatch" in resources


# --- every configuration, linted as deployed -------------------------------------------------------------


@pytest.mark.slow  # cfn-lint over a transformed template: seconds of CPU (make test-fast skips it)
@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_each_configuration_lints_clean_and_passes_its_rules(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    overrides = CONFIGURATIONS[name]
    assert rules_accept(template, **overrides)
    deployed_stack = deployed(transformed, parameter_values(template, **overrides))
    # Rules were evaluated above, and the Conditions are resolved: what is left is the stack as created
    deployed_stack.pop("Rules", None)
    deployed_stack.pop("Conditions", None)
    for section in ("Resources", "Outputs"):
        for item in deployed_stack[section].values():
            item.pop("Condition", None)
    for parameter, value in overrides.items():  # cfn-lint checks a Ref to a parameter with its default
        deployed_stack["Parameters"][parameter]["Default"] = value
    # Once resolved, a parameter only the conditions read (Source, QueueType, ...) is unused (W2001), and so is
    # the QueueVisibility mapping without a queue of the stack's own (W7001)
    found = [str(match) for match in blocking(cfn_lint(deployed_stack)) if match.rule.id not in {"W2001", "W7001"}]
    assert found == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"Source": "Kinesis", "StreamFailureDestination": "S3"},
        {"ExistingQueueArn": EXISTING_QUEUE_ARN},
        {"Source": "Kinesis", "ExistingStreamArn": EXISTING_STREAM_ARN},
    ],
)
def test_the_local_stack_refuses_what_it_does_not_emulate(overrides: dict[str, str]) -> None:
    # The local pollers send given-up batches to the dead-letter queue, and the local stack creates its own
    # sources: it says so instead of running something else than the deployment would
    from tally_local.stack import LocalStack  # noqa: PLC0415

    with pytest.raises(ValueError, match="does not emulate"):
        LocalStack(overrides)
    LocalStack({"Source": "SQS", **FIFO})  # FIFO it does (tests/integration/test_local_fifo.py)
