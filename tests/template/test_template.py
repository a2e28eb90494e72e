"""template.yaml: transformed offline, linted, and checked for the guarantees tally relies on.

Pipeline (no network, no credentials): SAM transform with aws-sam-translator's Python API, then
cfn-lint on the transformed CloudFormation. ``sam validate --lint`` alone would miss a misspelled
event-source property: cfn-lint 1.x no longer runs the SAM transform itself.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.arn_generator import ArnGenerator
from samtranslator.translator.transform import transform

from tally.config import DEFAULT_ARCHIVE_PREFIX
from tally.core.archive import ArchiveRecord, partition
from tally_local.template import (
    function_event_sources,
    queue_definitions,
    table_definitions,
)
from tests.artifact.build import sam_process_environment
from tests.template.conditions import deployed, parameter_values, prune

if TYPE_CHECKING:
    from collections.abc import Iterator

    from cfnlint.rules import Match

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
REGION = "us-east-1"
FAKE_CODE_URI = "s3://tally-template-tests/code.zip"

FUNCTION = "CounterFunction"
COUNTERS = "CountersTable"
MARKERS = "MarkersTable"
QUEUE = "EventsQueue"
DLQ = "EventsDeadLetterQueue"
FOURTEEN_DAYS = 14 * 24 * 3600


class StaticManagedPolicyLoader:
    """Stands in for samtranslator's ManagedPolicyLoader, which would call IAM."""

    def load(self) -> dict[str, str]:
        names = [
            "service-role/AWSLambdaBasicExecutionRole",
            "service-role/AWSLambdaSQSQueueExecutionRole",
            "service-role/AWSLambdaKinesisExecutionRole",
            "AWSXrayWriteOnlyAccess",
        ]
        return {name.rsplit("/", 1)[-1]: f"arn:aws:iam::aws:policy/{name}" for name in names}


@pytest.fixture(scope="module")
def resources(template: dict[str, Any], transformed: dict[str, Any]) -> dict[str, Any]:
    """What a stack with the default parameters (Source=SQS) contains; tests/template/test_sources.py
    checks the other sources."""
    resources: dict[str, Any] = prune(transformed, parameter_values(template))["Resources"]
    return resources


@pytest.fixture(scope="module")
def created(template: dict[str, Any], transformed: dict[str, Any]) -> dict[str, Any]:
    """``resources`` with every ``Fn::If`` resolved as CloudFormation would (a conditional statement included)."""
    resources: dict[str, Any] = deployed(transformed, parameter_values(template))["Resources"]
    return resources


@pytest.fixture(scope="module")
def parameters(template: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = template["Parameters"]
    return params


# --- pipeline ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _region_only_environment() -> Iterator[None]:
    """A region for the translator (it builds ARNs), nothing else from the caller's AWS setup."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_REGION", REGION)
        mp.delenv("AWS_PROFILE", raising=False)
        mp.setattr(ArnGenerator, "BOTO_SESSION_REGION_NAME", REGION)
        yield


def sam_transform(template: dict[str, Any]) -> dict[str, Any]:
    """SAM -> CloudFormation, offline. CodeUri must be an S3 URI: the translator never packages."""
    fragment = copy.deepcopy(template)
    for resource in fragment["Resources"].values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = FAKE_CODE_URI
    with _region_only_environment():
        output: dict[str, Any] = transform(fragment, {}, StaticManagedPolicyLoader())
    return output


def cfn_lint(transformed: dict[str, Any]) -> list[Match]:
    # imported here: cfn-lint takes a second of CPU to import, which every xdist worker paid collecting this module
    from cfnlint.api import ManualArgs, lint  # noqa: PLC0415

    return list(lint(json.dumps(transformed), config=ManualArgs(regions=[REGION], include_checks=["I"])))


def blocking(matches: list[Match]) -> list[Match]:
    """Errors and warnings fail the build; informational matches are only printed."""
    return [match for match in matches if match.rule.id[0] in {"E", "W"}]


def pipeline_problems(template: dict[str, Any]) -> list[str]:
    try:
        output = sam_transform(template)
    except InvalidDocumentException as exc:
        return [getattr(cause, "message", str(cause)) for cause in exc.causes]
    return [str(match) for match in blocking(cfn_lint(output))]


@pytest.mark.slow  # cfn-lint over a transformed template: seconds of CPU (make test-fast skips it)
def test_transformed_template_passes_cfn_lint(transformed: dict[str, Any]) -> None:
    # GIVEN the transformed template WHEN linted THEN no error or warning is reported
    matches = cfn_lint(transformed)
    for match in matches:
        print(f"cfn-lint: {match}")
    assert blocking(matches) == []


@pytest.mark.slow  # cfn-lint over a transformed template: seconds of CPU (make test-fast skips it)
@pytest.mark.parametrize(
    ("path", "misspelled"),
    [
        # caught by the SAM transform (event sources are SAM, not CloudFormation, properties)
        ((FUNCTION, "Properties", "Events", "EventsQueueBatch", "Properties", "BatchSize"), "BatchSze"),
        # caught by cfn-lint on the transformed output
        ((QUEUE, "Properties", "VisibilityTimeout"), "VisibiltyTimeout"),
        ((COUNTERS, "Properties", "PointInTimeRecoverySpecification"), "PointInTimeRecoverySpec"),
    ],
)
def test_pipeline_catches_misspelled_property(template: dict[str, Any], path: tuple[str, ...], misspelled: str) -> None:
    # GIVEN a copy of the template with one property name misspelled
    broken = copy.deepcopy(template)
    *parents, correct = path
    node = broken["Resources"]
    for key in parents:
        node = node[key]
    node[misspelled] = node.pop(correct)
    # WHEN it goes through transform + lint THEN the misspelling is reported
    problems = pipeline_problems(broken)
    print(problems)
    assert any(misspelled in problem for problem in problems), problems


def _sam_executable() -> str | None:
    configured = os.environ.get("TALLY_SAM_BIN")
    if configured:
        return str(Path(configured).resolve())  # relative to where pytest was started
    return shutil.which("sam")


@pytest.mark.slow  # the SAM CLI in a subprocess, from its own venv (make test-fast skips it)
@pytest.mark.skipif(
    _sam_executable() is None,
    reason="SAM CLI not found: set TALLY_SAM_BIN or put `sam` on PATH (it lives in its own venv, "
    "e.g. python3 -m venv .venv-sam && .venv-sam/bin/pip install aws-sam-cli)",
)
def test_sam_validate_lint() -> None:
    sam = _sam_executable()
    assert sam is not None
    env = sam_process_environment(os.environ)
    result = subprocess.run(
        [sam, "validate", "--lint", "--template", str(TEMPLATE_PATH)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "is a valid SAM Template" in output


# --- guarantees ---------------------------------------------------------------------------------------


def _int_param_bounds(parameters: dict[str, Any], name: str) -> tuple[int, int | None]:
    parameter = parameters[name]
    return int(parameter["MinValue"]), (int(parameter["MaxValue"]) if "MaxValue" in parameter else None)


def test_every_parameter_is_described(parameters: dict[str, Any]) -> None:
    assert all(parameter.get("Description") for parameter in parameters.values())


def test_event_source_reports_batch_item_failures(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    resources = deployed(transformed, parameter_values(template))["Resources"]
    mappings = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert len(mappings) == 1
    properties = mappings[0]["Properties"]
    assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert properties["EventSourceArn"] == {"Fn::GetAtt": [QUEUE, "Arn"]}
    assert properties["BatchSize"] == {"Ref": "BatchSize"}
    assert properties["MaximumBatchingWindowInSeconds"] == {"Ref": "BatchingWindowSeconds"}
    assert properties["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "MaximumConcurrency"}}


def test_batch_size_and_concurrency_bounds(parameters: dict[str, Any]) -> None:
    assert _int_param_bounds(parameters, "BatchSize") == (1, 10_000)
    assert _int_param_bounds(parameters, "MaximumConcurrency") == (2, 1000)
    assert parameters["MaximumConcurrency"]["Default"] == 5
    window_min, window_max = _int_param_bounds(parameters, "BatchingWindowSeconds")
    assert window_min >= 0
    assert window_max is not None
    assert window_max <= 300


def _evaluate_rule_function(node: Any, values: dict[str, str]) -> Any:
    """The few CloudFormation rule functions the template uses, evaluated on string values."""
    if isinstance(node, dict):
        ((name, args),) = node.items()
        if name == "Ref":
            return values[args]
        if name == "Fn::Not":
            return not _evaluate_rule_function(args[0], values)
        if name == "Fn::Equals":
            left, right = (_evaluate_rule_function(arg, values) for arg in args)
            return str(left) == str(right)
        if name == "Fn::Contains":
            haystack, needle = (_evaluate_rule_function(arg, values) for arg in args)
            return str(needle) in [str(item) for item in haystack]
        raise AssertionError(f"rule function {name} not understood by this test")
    return node


@pytest.mark.parametrize(
    ("batch_size", "window", "accepted"),
    [("100", "0", False), ("11", "0", False), ("100", "1", True), ("10", "0", True), ("1", "0", True)],
)
def test_rules_require_batching_window_above_ten(
    template: dict[str, Any], batch_size: str, window: str, accepted: bool
) -> None:
    assert rules_accept(template, BatchSize=batch_size, BatchingWindowSeconds=window) is accepted


def rules_accept(template: dict[str, Any], **overrides: str) -> bool:
    """Whether every Rule of the template holds for the defaults with ``overrides`` (as at deploy time)."""
    values = parameter_values(template, **overrides)
    return all(
        not _evaluate_rule_function(rule.get("RuleCondition", True), values)
        or all(_evaluate_rule_function(a["Assert"], values) for a in rule["Assertions"])
        for rule in template["Rules"].values()
    )


def test_defaults_satisfy_batching_window_rule(parameters: dict[str, Any]) -> None:
    assert parameters["BatchSize"]["Default"] <= 10 or parameters["BatchingWindowSeconds"]["Default"] >= 1


def test_redrive_to_dead_letter_queue(template: dict[str, Any], parameters: dict[str, Any]) -> None:
    redrive = template["Resources"][QUEUE]["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [DLQ, "Arn"]}
    assert redrive["maxReceiveCount"] == {"Ref": "MaxReceiveCount"}
    assert _int_param_bounds(parameters, "MaxReceiveCount")[0] >= 5
    assert parameters["MaxReceiveCount"]["Default"] >= 5


def test_dead_letter_queue_keeps_messages_fourteen_days(template: dict[str, Any]) -> None:
    dlq = template["Resources"][DLQ]["Properties"]
    assert dlq["MessageRetentionPeriod"] == FOURTEEN_DAYS
    assert "RedrivePolicy" not in dlq
    assert dlq["RedriveAllowPolicy"]["redrivePermission"] in {"allowAll", "byQueue"}


def test_visibility_timeout_covers_six_function_timeouts_for_every_allowed_timeout(
    template: dict[str, Any], resources: dict[str, Any], parameters: dict[str, Any]
) -> None:
    timeout = parameters["FunctionTimeoutSeconds"]
    _, max_window = _int_param_bounds(parameters, "BatchingWindowSeconds")
    assert max_window is not None
    rows = template["Mappings"]["QueueVisibility"]
    assert sorted(int(key) for key in rows) == sorted(int(value) for value in timeout["AllowedValues"])
    assert timeout["Default"] in timeout["AllowedValues"]
    for seconds in timeout["AllowedValues"]:
        visibility = rows[str(seconds)]["VisibilityTimeout"]
        assert visibility >= 6 * int(seconds) + max_window, seconds
        assert visibility <= 43_200  # SQS maximum
    # the queue and the function both read the same parameter
    assert template["Resources"][QUEUE]["Properties"]["VisibilityTimeout"] == {
        "Fn::FindInMap": ["QueueVisibility", {"Ref": "FunctionTimeoutSeconds"}, "VisibilityTimeout"]
    }
    assert resources[FUNCTION]["Properties"]["Timeout"] == {"Ref": "FunctionTimeoutSeconds"}


def test_queues_encrypted(resources: dict[str, Any]) -> None:
    queues = {k: r for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue"}
    assert set(queues) == {QUEUE, DLQ, "NotificationsDeadLetterQueue"}
    assert all(q["Properties"]["SqsManagedSseEnabled"] is True for q in queues.values())


def test_tables_encrypted_with_point_in_time_recovery(resources: dict[str, Any]) -> None:
    tables = {k: r for k, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"}
    assert set(tables) == {COUNTERS, MARKERS, "NotificationsTable"}
    for table in tables.values():
        properties = table["Properties"]
        assert properties["SSESpecification"]["SSEEnabled"] is True
        assert properties["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert properties["BillingMode"] == "PAY_PER_REQUEST"


def test_counters_table_is_protected(resources: dict[str, Any]) -> None:
    counters = resources[COUNTERS]
    assert counters["Properties"]["DeletionProtectionEnabled"] is True
    assert counters["DeletionPolicy"] == "Retain"
    assert counters["UpdateReplacePolicy"] == "Retain"


def test_markers_expire_by_ttl(resources: dict[str, Any], parameters: dict[str, Any]) -> None:
    assert resources[MARKERS]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "expires_at",
        "Enabled": True,
    }
    # A marker must outlive the longest path back for a message: source retention + DLQ redrive.
    _, source_retention_max = _int_param_bounds(parameters, "QueueRetentionSeconds")
    assert source_retention_max is not None
    longest_days = (source_retention_max + FOURTEEN_DAYS) / 86_400
    assert _int_param_bounds(parameters, "MarkerTtlDays")[0] >= longest_days


def test_function_runtime_and_architecture(resources: dict[str, Any]) -> None:
    properties = resources[FUNCTION]["Properties"]
    match = re.fullmatch(r"python3\.(\d+)", properties["Runtime"])
    assert match is not None
    assert int(match.group(1)) >= 13
    assert properties["Architectures"] == ["arm64"]
    assert properties["TracingConfig"] == {"Mode": "Active"}
    assert properties["Handler"] == "tally.handlers.sqs.handler"


def test_handler_exists_under_code_uri(template: dict[str, Any]) -> None:
    # Parsed, not imported: the handler's runtime dependencies need not be installed here.
    properties = template["Resources"][FUNCTION]["Properties"]
    module, _, function = properties["Handler"].rpartition(".")
    source = REPO_ROOT / properties["CodeUri"] / (module.replace(".", "/") + ".py")
    assert source.is_file(), source
    tree = ast.parse(source.read_text(encoding="utf-8"))
    assert any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Assign)
        and (
            getattr(node, "name", None) == function
            or any(isinstance(t, ast.Name) and t.id == function for t in getattr(node, "targets", []))
        )
        for node in tree.body
    ), f"{source} defines no top-level {function}"


def test_function_logs_to_its_own_log_group_with_retention(resources: dict[str, Any]) -> None:
    properties = resources[FUNCTION]["Properties"]
    assert properties["LoggingConfig"]["LogGroup"] == {"Ref": "CounterFunctionLogGroup"}
    log_group = resources["CounterFunctionLogGroup"]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_no_function_level_dead_letter_queue(resources: dict[str, Any]) -> None:
    # Function DLQs and on-failure destinations serve asynchronous invokes only.
    assert "DeadLetterConfig" not in resources[FUNCTION]["Properties"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"]


def _policy_statements(resources: dict[str, Any]) -> list[dict[str, Any]]:
    """The functions' statements (the notifications pipe's role is held to its own in test_notifications.py)."""
    statements: list[dict[str, Any]] = []
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::IAM::Role" and logical_id != "NotificationsPipeRole":
            for policy in resource["Properties"].get("Policies", []):
                statements.extend(policy["PolicyDocument"]["Statement"])
        if resource["Type"] == "AWS::IAM::Policy":
            statements.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_iam_statements_are_least_privilege(created: dict[str, Any]) -> None:
    statements = _policy_statements(created)
    assert statements
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert "NotAction" not in statement
        assert "NotResource" not in statement
        for action in _as_list(statement["Action"]):
            assert "*" not in action, action
            assert action != "dynamodb:Scan"
            assert not action.startswith("dynamodb:Delete"), action
        for resource in _as_list(statement["Resource"]):
            # a reference to one resource of this stack, never a literal (and never "*")
            assert isinstance(resource, dict), resource
            assert set(resource) <= {"Fn::GetAtt", "Ref", "Fn::Sub"}, resource


COUNTING_FUNCTION_GRANTS = {
    json.dumps({"Fn::GetAtt": [MARKERS, "Arn"]}): {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",  # the marker pre-read, a committed batch's pages
        "dynamodb:BatchWriteItem",  # the journal's pages
    },
    json.dumps({"Fn::GetAtt": [COUNTERS, "Arn"]}): {
        "dynamodb:UpdateItem",  # the ADDs
        "dynamodb:ConditionCheckItem",  # a bounded counter whose steps net to zero
        "dynamodb:BatchGetItem",  # a journal batch's later chunks checked against stored values
        "dynamodb:PutItem",  # distinct-count member items
    },
    json.dumps({"Fn::GetAtt": [DLQ, "Arn"]}): {"sqs:SendMessage"},
    json.dumps({"Fn::GetAtt": ["NotificationsTable", "Arn"]}): {"dynamodb:PutItem"},  # a threshold crossing
    json.dumps({"Fn::Sub": "${ArchiveBucket.Arn}/events/*"}): {"s3:PutObject"},  # the archive, after each commit
}
"""What the counting function's role may do, by resource (the SQS and the Kinesis function alike: one code)."""


def granted(resources: dict[str, Any]) -> dict[str, set[str]]:
    """The actions the functions' statements allow, by resource (as JSON)."""
    actions: dict[str, set[str]] = {}
    for statement in _policy_statements(resources):
        for resource in _as_list(statement["Resource"]):
            actions.setdefault(json.dumps(resource), set()).update(_as_list(statement["Action"]))
    return actions


def test_iam_grants_exactly_what_the_function_needs(created: dict[str, Any]) -> None:
    assert granted(created) == COUNTING_FUNCTION_GRANTS


def test_managed_policies_are_only_the_ones_sam_adds(resources: dict[str, Any]) -> None:
    # SAM attaches these for logging, Tracing: Active and the SQS event source; anything more
    # would widen the role and must be a deliberate change to this list.
    role = resources[f"{FUNCTION}Role"]["Properties"]
    arns = {arn if isinstance(arn, str) else json.dumps(arn) for arn in role["ManagedPolicyArns"]}
    assert {arn.rsplit("/", 1)[-1] for arn in arns} == {
        "AWSLambdaBasicExecutionRole",
        "AWSXrayWriteOnlyAccess",
        "AWSLambdaSQSQueueExecutionRole",
    }


def test_environment_references_stack_resources(resources: dict[str, Any], parameters: dict[str, Any]) -> None:
    variables = resources[FUNCTION]["Properties"]["Environment"]["Variables"]
    assert variables["TALLY_COUNTERS_TABLE"] == {"Ref": COUNTERS}
    assert variables["TALLY_MARKERS_TABLE"] == {"Ref": MARKERS}
    assert variables["TALLY_DLQ_URL"] == {"Ref": DLQ}
    assert variables["TALLY_MARKER_TTL_DAYS"] == {"Ref": "MarkerTtlDays"}
    assert parameters["MarkerTtlDays"]["Default"] == 35
    assert _int_param_bounds(parameters, "MarkerTtlDays")[0] >= 30
    assert variables["POWERTOOLS_SERVICE_NAME"] == "tally"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Tally"
    assert variables["POWERTOOLS_LOG_LEVEL"] == "INFO"


def test_no_fixed_physical_names(resources: dict[str, Any]) -> None:
    # A literal name blocks replacement updates and a second stack in the same account.
    name_properties = {"TableName", "QueueName", "FunctionName", "LogGroupName", "RoleName", "AlarmName"}
    for logical_id, resource in resources.items():
        properties = resource.get("Properties", {})
        literal_names = {name for name in name_properties & set(properties) if isinstance(properties[name], str)}
        assert not literal_names, (logical_id, literal_names)


def test_dead_letter_queue_alarm(resources: dict[str, Any]) -> None:
    alarm = resources["DeadLetterQueueAlarm"]["Properties"]
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [DLQ, "QueueName"]}}]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 0


def test_outputs(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    outputs = deployed(transformed, parameter_values(template))["Outputs"]
    assert set(outputs) == {
        "EventsQueueUrl",
        "EventsQueueArn",
        "DeadLetterQueueUrl",
        "DeadLetterQueueArn",
        "CountersTableName",
        "MarkersTableName",
        "CounterFunctionName",
        "DashboardName",
        "OperatorPolicyArn",
        "ProducerPolicyArn",
        "ReaderPolicyArn",
        "NotificationsTableName",
        "NotificationsDeadLetterQueueUrl",
        "NotificationBusArn",
        "ArchiveBucketName",
        "ArchiveDatabaseName",
    }
    assert outputs["EventsQueueUrl"]["Value"] == {"Ref": QUEUE}
    assert outputs["ArchiveBucketName"]["Value"] == {"Ref": "ArchiveBucket"}
    assert outputs["DeadLetterQueueArn"]["Value"] == {"Fn::GetAtt": [DLQ, "Arn"]}
    assert outputs["CountersTableName"]["Value"] == {"Ref": COUNTERS}
    assert outputs["MarkersTableName"]["Value"] == {"Ref": MARKERS}
    assert outputs["CounterFunctionName"]["Value"] == {"Ref": FUNCTION}
    assert outputs["OperatorPolicyArn"]["Value"] == {"Ref": "OperatorPolicy"}


def _samconfig() -> dict[str, Any]:
    with (REPO_ROOT / "samconfig.toml").open("rb") as handle:
        return tomllib.load(handle)


def test_samconfig_environments() -> None:
    config = _samconfig()
    assert config["default"]["global"]["parameters"]["stack_name"] == "tally"
    assert config["prod"]["global"]["parameters"]["stack_name"] == "tally-prod"
    for environment in ("default", "prod"):
        deploy = config[environment]["deploy"]["parameters"]
        assert deploy["resolve_s3"] is True
        assert deploy["confirm_changeset"] is True
        assert deploy["capabilities"] == "CAPABILITY_IAM"
        assert "region" not in deploy  # taken from the caller's profile
        assert config[environment]["validate"]["parameters"]["lint"] is True


@pytest.mark.parametrize("environment", ["default", "trial", "prod"])
def test_samconfig_overrides_satisfy_parameter_constraints(parameters: dict[str, Any], environment: str) -> None:
    overrides = _samconfig()[environment]["deploy"]["parameters"]["parameter_overrides"]
    values = dict(item.split("=", 1) for item in overrides.split())
    # A --parameter-overrides replaces the line whole: each environment says its Source itself.
    assert values["Source"] in parameters["Source"]["AllowedValues"]
    if environment == "prod":
        assert int(values["MaximumConcurrency"]) > parameters["MaximumConcurrency"]["Default"]
    for name, value in values.items():
        parameter = parameters[name]
        if "AllowedValues" in parameter:
            assert value in [str(allowed) for allowed in parameter["AllowedValues"]], name
        if "MinValue" in parameter:
            assert int(value) >= parameter["MinValue"], name
        if "MaxValue" in parameter:
            assert int(value) <= parameter["MaxValue"], name


def test_parameter_groups_hold_every_parameter_once_in_the_order_guided_deploy_asks(template: dict[str, Any]) -> None:
    """sam deploy --guided asks the parameters in template order and shows no descriptions: the order of
    the console's groups, with the choices worth making first, must be the order of Parameters."""
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert grouped == list(template["Parameters"])
    assert groups[0]["Parameters"][:2] == ["Source", "AlarmEmail"]
    assert all(group["Label"]["default"] for group in groups)


def test_endpoint_variables_are_declared_empty_for_sam_local_invoke(template: dict[str, Any]) -> None:
    """sam local invoke --env-vars overrides declared variables only; empty is unset to boto3 on AWS."""
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    for service in ("DYNAMODB", "SQS", "KINESIS"):
        assert variables[f"AWS_ENDPOINT_URL_{service}"] == ""


# --- tally_local.template -------------------------------------------------------------------------------


def test_table_kwargs_match_template_key_schema(template: dict[str, Any]) -> None:
    tables = table_definitions(template)
    assert set(tables) == {COUNTERS, MARKERS, "NotificationsTable"}
    for logical_id, table in tables.items():
        declared = template["Resources"][logical_id]["Properties"]
        kwargs = table.create_table_kwargs("local-name")
        assert kwargs == {
            "TableName": "local-name",
            "KeySchema": declared["KeySchema"],
            "AttributeDefinitions": declared["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST",
            **(
                {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}}
                if "Stream" in str(declared)
                else {}
            ),
        }
    # The notifications table's stream is what the pipe reads (DynamoDB Local has streams too)
    assert tables["NotificationsTable"].stream_view_type == "NEW_IMAGE"
    assert [(k.attribute_name, k.key_type) for k in tables[COUNTERS].key_schema] == [
        ("pk", "HASH"),
        ("sk", "RANGE"),
    ]
    assert tables[COUNTERS].ttl_attribute == "expires_at"  # fine time windows expire
    assert tables[MARKERS].ttl_attribute == "expires_at"
    assert tables[MARKERS].update_time_to_live_kwargs("m") == {
        "TableName": "m",
        "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
    }


def test_queue_definitions_resolve_parameter_defaults(template: dict[str, Any], parameters: dict[str, Any]) -> None:
    queues = queue_definitions(template)
    assert set(queues) == {QUEUE, DLQ, "NotificationsDeadLetterQueue"}
    events = queues[QUEUE]
    default_timeout = str(parameters["FunctionTimeoutSeconds"]["Default"])
    assert events.fifo is False
    assert (
        events.visibility_timeout_seconds
        == template["Mappings"]["QueueVisibility"][default_timeout]["VisibilityTimeout"]
    )
    assert events.visibility_timeout_seconds >= 6 * int(default_timeout)
    assert events.message_retention_seconds == parameters["QueueRetentionSeconds"]["Default"]
    assert events.dead_letter_target == DLQ
    assert events.max_receive_count == parameters["MaxReceiveCount"]["Default"]
    dead = queues[DLQ]
    assert dead.message_retention_seconds == FOURTEEN_DAYS
    assert dead.dead_letter_target is None
    assert dead.max_receive_count is None


def test_queue_kwargs_need_the_dead_letter_arn_exactly_when_redriven(template: dict[str, Any]) -> None:
    queues = queue_definitions(template)
    with pytest.raises(ValueError, match="dead_letter_target_arn"):
        queues[QUEUE].create_queue_kwargs("events")
    with pytest.raises(ValueError, match="dead_letter_target_arn"):
        queues[DLQ].create_queue_kwargs("dlq", "arn:aws:sqs:us-east-1:000000000000:x")
    kwargs = queues[QUEUE].create_queue_kwargs("events", "arn:aws:sqs:us-east-1:000000000000:dlq")
    assert json.loads(kwargs["Attributes"]["RedrivePolicy"]) == {
        "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq",
        "maxReceiveCount": "5",
    }


def test_event_source_defaults(template: dict[str, Any], parameters: dict[str, Any]) -> None:
    sources = function_event_sources(template)
    assert list(sources) == ["EventsQueueBatch"]
    source = sources["EventsQueueBatch"]
    assert source.function_logical_id == FUNCTION
    assert source.queue_logical_id == QUEUE
    # the cost-chosen defaults (docs/explanation/costs.md: near the floor for 150+ messages a second)
    assert source.batch_size == parameters["BatchSize"]["Default"] == 10_000
    assert source.maximum_batching_window_seconds == parameters["BatchingWindowSeconds"]["Default"] == 20
    assert source.function_response_types == ("ReportBatchItemFailures",)
    assert source.maximum_concurrency == 5


def test_local_definitions_create_real_resources(template: dict[str, Any]) -> None:
    """The kwargs are valid boto3 requests: create everything on moto, in dependency order."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
        mp.delenv("AWS_ENDPOINT_URL_SQS", raising=False)
        with moto.mock_aws():
            dynamodb = boto3.client("dynamodb", region_name=REGION)
            for logical_id, table in table_definitions(template).items():
                table.create(dynamodb, logical_id)
            described = dynamodb.describe_table(TableName=COUNTERS)["Table"]
            assert described["KeySchema"] == template["Resources"][COUNTERS]["Properties"]["KeySchema"]

            sqs = boto3.client("sqs", region_name=REGION)
            queues = queue_definitions(template)
            arns: dict[str, str] = {}
            for logical_id in sorted(queues, key=lambda q: queues[q].dead_letter_target is not None):
                queue = queues[logical_id]
                target = arns[queue.dead_letter_target] if queue.dead_letter_target else None
                url = sqs.create_queue(**queue.create_queue_kwargs(logical_id, target))["QueueUrl"]
                attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
                arns[logical_id] = attributes["QueueArn"]
                assert attributes["VisibilityTimeout"] == str(queue.visibility_timeout_seconds)
            assert set(arns) == {QUEUE, DLQ, "NotificationsDeadLetterQueue"}


def _with_property(template: dict[str, Any], resource: str, name: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    changed["Resources"][resource]["Properties"][name] = value
    return changed


@pytest.mark.parametrize(
    ("change", "reader", "message"),
    [
        ((QUEUE, "VisibilityTimeout", {"Fn::Sub": "${X}"}), queue_definitions, "cannot resolve"),
        ((QUEUE, "MessageRetentionPeriod", {"Ref": COUNTERS}), queue_definitions, "not a template Parameter"),
        ((QUEUE, "VisibilityTimeout", "soon"), queue_definitions, "expected an integer"),
        ((QUEUE, "RedrivePolicy", '{"maxReceiveCount": 5}'), queue_definitions, "expected a mapping"),
        ((COUNTERS, "GlobalSecondaryIndexes", []), table_definitions, "not supported locally"),
        ((COUNTERS, "KeySchema", {"Ref": "Keys"}), table_definitions, "non-empty literal list"),
    ],
)
def test_local_reader_rejects_shapes_it_does_not_understand(
    template: dict[str, Any], change: tuple[str, str, Any], reader: Any, message: str
) -> None:
    resource, name, value = change
    with pytest.raises(ValueError, match=message):
        reader(_with_property(template, resource, name, value))


def test_parameter_without_default_is_rejected(template: dict[str, Any]) -> None:
    changed = copy.deepcopy(template)
    del changed["Parameters"]["BatchSize"]["Default"]
    with pytest.raises(ValueError, match="has no Default"):
        function_event_sources(changed)


def test_windows_and_hot_keys_are_deployment_parameters(resources: dict[str, Any], parameters: dict[str, Any]) -> None:
    # GIVEN the template WHEN its function environment and counters table are read
    env = resources["CounterFunction"]["Properties"].get("Environment") or {}
    variables = env.get("Variables") or {}
    template_text = TEMPLATE_PATH.read_text()
    # THEN windows, their retention and hot keys come from Parameters, and window items can expire
    for name, parameter in (
        ("TALLY_WINDOWS", "Windows"),
        ("TALLY_WINDOW_RETENTION", "WindowRetentionDays"),
        ("TALLY_HOT_KEYS", "HotKeys"),
    ):
        assert f"{name}: !Ref {parameter}" in template_text or variables.get(name) == {"Ref": parameter}
        assert parameter in parameters
    ttl = resources["CountersTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}


def test_alarms_for_what_needs_a_person_notify_the_alarm_topic(resources: dict[str, Any]) -> None:
    # GIVEN the default (SQS) stack WHEN its alarms are listed
    alarms = {name: r["Properties"] for name, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    # THEN dead letters, function errors and throttles, DynamoDB throttling and conflicts are watched
    assert {
        "DeadLetterQueueAlarm",
        "FunctionErrorsAlarm",
        "FunctionThrottlesAlarm",
        "DynamoDBThrottlingAlarm",
        "DynamoDBConflictAlarm",
    } <= set(alarms)
    for name, alarm in alarms.items():
        assert "AlarmActions" in alarm, name
        assert alarm["AlarmDescription"], name
    # AND the runbook says what to do for each of them
    runbook = (REPO_ROOT / "docs" / "runbook.md").read_text()
    for name in alarms:
        assert name in runbook or name.removeprefix("Stream") in runbook, name


def test_the_archive_bucket_is_private_encrypted_retained_and_moves_to_cheaper_storage(
    template: dict[str, Any], created: dict[str, Any]
) -> None:
    bucket = created["ArchiveBucket"]
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    properties = bucket["Properties"]
    (rule,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    assert all(properties["PublicAccessBlockConfiguration"].values())
    assert len(properties["PublicAccessBlockConfiguration"]) == 4
    (lifecycle,) = properties["LifecycleConfiguration"]["Rules"]
    assert lifecycle["Prefix"] == DEFAULT_ARCHIVE_PREFIX
    assert lifecycle["Transitions"] == [
        {"StorageClass": "GLACIER_IR", "TransitionInDays": {"Ref": "ArchiveTransitionDays"}}
    ]
    assert template["Parameters"]["ArchiveEnabled"]["Default"] == "true"


def test_the_archive_table_reads_the_layout_the_writer_writes(created: dict[str, Any]) -> None:
    # GIVEN the Glue table over the archive WHEN its projection and columns are read
    table = created["ArchiveTable"]["Properties"]["TableInput"]
    parameters = table["Parameters"]
    # THEN its partitions are the writer's (tally.core.archive.partition: dt=YYYY-MM-DD/hour=HH), under its prefix
    location = parameters["storage.location.template"]["Fn::Sub"]
    assert location == f"s3://${{ArchiveBucket}}/{DEFAULT_ARCHIVE_PREFIX}dt=${{!dt}}/hour=${{!hour}}/"
    assert partition(0) == "dt=1970-01-01/hour=00"
    assert (parameters["projection.dt.format"], parameters["projection.hour.digits"]) == ("yyyy-MM-dd", "2")
    # AND its columns are the record's fields, in the JSON SerDe AWS recommends
    columns = [column["Name"] for column in table["StorageDescriptor"]["Columns"]]
    assert columns == list(ArchiveRecord.__struct_fields__)
    assert table["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"] == "org.apache.hive.hcatalog.data.JsonSerDe"


def test_the_archive_off_creates_no_bucket_and_tells_the_function(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    off = deployed(transformed, parameter_values(template, ArchiveEnabled="false"))
    assert not {"ArchiveBucket", "ArchiveDatabase", "ArchiveTable"} & set(off["Resources"])
    assert off["Resources"][FUNCTION]["Properties"]["Environment"]["Variables"]["TALLY_ARCHIVE_BUCKET"] == ""
    assert "ArchiveBucketName" not in off["Outputs"]
