"""In the template: the producer and reader policies, and the optional read endpoint.

The policies' grants are checked against the calls the libraries really make by the IAM contract
(tests/template/test_iam_contract.py); here: what exists for each ``ReadEndpoint``, that the endpoint is
IAM-authenticated and never public, that its role is read-only, and that each variant transforms and lints.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.template.conditions import parameter_values, prune
from tests.template.test_template import _as_list, blocking, cfn_lint, sam_transform

COUNTERS_ARN = {"Fn::GetAtt": ["CountersTable", "Arn"]}


def stack(template: dict[str, Any], transformed: dict[str, Any], **values: str) -> dict[str, Any]:
    return prune(transformed, parameter_values(template, **values))


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def resolved_statements(resources: dict[str, Any], policy_id: str, conditions: dict[str, bool]) -> list[dict[str, Any]]:
    """The statements of a managed policy with its ``Fn::If`` resolved for ``conditions``."""
    found = []
    for written in statements(resources[policy_id]):
        statement = written
        if "Fn::If" in written:
            condition, when_true, when_false = written["Fn::If"]
            statement = when_true if conditions[condition] else when_false
        if statement != {"Ref": "AWS::NoValue"}:
            found.append(statement)
    return found


def test_without_the_endpoint_there_is_no_function_url(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    # GIVEN the defaults (ReadEndpoint=None)
    deployed = stack(template, transformed)
    types = {resource["Type"] for resource in deployed["Resources"].values()}
    # THEN no read function, no URL, no endpoint output; the two policies and their outputs exist
    assert "ReadFunction" not in deployed["Resources"]
    assert "AWS::Lambda::Url" not in types
    assert {"ProducerPolicyArn", "ReaderPolicyArn"} <= set(deployed["Outputs"])
    assert "ReadEndpointUrl" not in deployed["Outputs"]
    reader = resolved_statements(deployed["Resources"], "ReaderPolicy", {"HasReadEndpoint": False})
    assert [(s["Sid"], sorted(s["Action"]), s["Resource"]) for s in reader] == [
        ("ReadCounters", ["dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"], COUNTERS_ARN),
        ("ReadNotifications", ["dynamodb:Scan"], {"Fn::GetAtt": ["NotificationsTable", "Arn"]}),
    ]


def test_the_endpoint_is_a_function_url_with_iam_auth_never_public(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # GIVEN ReadEndpoint=FunctionUrl
    resources = stack(template, transformed, ReadEndpoint="FunctionUrl")["Resources"]
    (url,) = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Url"]
    # THEN the URL authenticates with IAM, and no permission lets anyone else invoke the function
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": "ReadFunction"}
    permissions = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Permission"]
    assert [p for p in permissions if p.get("Principal") == "*" or p.get("FunctionUrlAuthType") == "NONE"] == []
    # AND the handler is the read endpoint's, with a short timeout and its own log group
    function = resources["ReadFunction"]["Properties"]
    assert function["Handler"] == "tally.handlers.read.handler"
    assert function["Timeout"] == 10
    assert function["LoggingConfig"]["LogGroup"] == {"Ref": "ReadFunctionLogGroup"}
    # AND the output is the URL
    outputs = stack(template, transformed, ReadEndpoint="FunctionUrl")["Outputs"]
    assert outputs["ReadEndpointUrl"]["Value"] == {"Fn::GetAtt": ["ReadFunctionUrl", "FunctionUrl"]}


def test_the_endpoint_role_only_reads_the_counters(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    resources = stack(template, transformed, ReadEndpoint="FunctionUrl")["Resources"]
    role = resources["ReadFunctionRole"]["Properties"]
    granted = [
        (sorted(_as_list(s["Action"])), s["Resource"])
        for policy in role["Policies"]
        for s in policy["PolicyDocument"]["Statement"]
    ]
    assert granted == [(["dynamodb:BatchGetItem", "dynamodb:Query"], COUNTERS_ARN)]
    managed = {json.dumps(arn).rsplit("/", 1)[-1].strip('"') for arn in role["ManagedPolicyArns"]}
    assert managed == {"AWSLambdaBasicExecutionRole", "AWSXrayWriteOnlyAccess"}
    # AND the reader policy lets an application call it (both actions, since October 2025)
    reader = resolved_statements(resources, "ReaderPolicy", {"HasReadEndpoint": True})
    invoke = [s for s in reader if s["Sid"] == "InvokeTheReadEndpoint"]
    assert [(sorted(s["Action"]), s["Resource"]) for s in invoke] == [
        (["lambda:InvokeFunction", "lambda:InvokeFunctionUrl"], {"Fn::GetAtt": ["ReadFunction", "Arn"]})
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("SQS", [("SendToTheQueue", ["sqs:SendMessage"])]),
        ("Kinesis", [("PutToTheStream", ["kinesis:PutRecord", "kinesis:PutRecords"])]),
        (
            "Both",
            [("SendToTheQueue", ["sqs:SendMessage"]), ("PutToTheStream", ["kinesis:PutRecord", "kinesis:PutRecords"])],
        ),
    ],
)
def test_the_producer_policy_names_only_the_stacks_source(
    template: dict[str, Any], transformed: dict[str, Any], source: str, expected: list[tuple[str, list[str]]]
) -> None:
    resources = stack(template, transformed, Source=source)["Resources"]
    conditions = {"UseSqs": source in {"SQS", "Both"}, "UseKinesis": source in {"Kinesis", "Both"}}
    found = resolved_statements(resources, "ProducerPolicy", conditions)
    assert [(s["Sid"], sorted(s["Action"])) for s in found] == expected
    # the stack's own queue or stream, or the one given by ARN (existing sources)
    resource_of = {
        "SendToTheQueue": ("HasExistingQueue", "ExistingQueueArn", "EventsQueue"),
        "PutToTheStream": ("HasExistingStream", "ExistingStreamArn", "EventStream"),
    }
    assert all(
        s["Resource"] == {"Fn::If": [condition, {"Ref": parameter}, {"Fn::GetAtt": [resource, "Arn"]}]}
        for s in found
        for condition, parameter, resource in [resource_of[s["Sid"]]]
    )


@pytest.mark.slow  # cfn-lint over a transformed template: seconds of CPU (make test-fast skips it)
@pytest.mark.parametrize("source", ["SQS", "Both"])
def test_the_endpoint_variant_transforms_and_lints_clean(template: dict[str, Any], source: str) -> None:
    chosen = copy.deepcopy(template)
    chosen["Parameters"]["Source"]["Default"] = source
    chosen["Parameters"]["ReadEndpoint"]["Default"] = "FunctionUrl"
    matches = cfn_lint(sam_transform(chosen))
    assert blocking(matches) == [], [str(m) for m in matches]
