"""The notifications path in template.yaml: the table, its stream, the pipe to EventBridge and its role.

The pipe runs on AWS only (no emulator here has EventBridge Pipes: docs/aws-fidelity.md), so what it does is
held here to what the code writes: its input template reads exactly the attributes ``tally.store.notifications``
puts on an item, its filter keeps only new items, and its role reaches this one stream, bus and queue.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest

from tally.core.thresholds import Crossing, Direction
from tally.store.notifications import notification_item
from tests.template.conditions import parameter_values, prune
from tests.template.test_template import _as_list

PIPE = "NotificationsPipe"
ROLE = "NotificationsPipeRole"


@pytest.fixture(scope="module")
def resources(template: dict[str, Any], transformed: dict[str, Any]) -> dict[str, Any]:
    """What a stack with the default parameters contains (the notifications path exists for every Source)."""
    deployed: dict[str, Any] = prune(transformed, parameter_values(template))["Resources"]
    return deployed


BUS_ARN = {"Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/${NotificationBusName}"}


def test_the_table_streams_new_images_to_the_pipe(resources: dict[str, Any]) -> None:
    table = resources["NotificationsTable"]["Properties"]
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    pipe = resources[PIPE]["Properties"]
    assert pipe["Source"] == {"Fn::GetAtt": ["NotificationsTable", "StreamArn"]}
    assert pipe["Target"] == BUS_ARN
    # only new items are announced: a re-written one (MODIFY) never again, a TTL deletion (REMOVE) never
    assert [json.loads(f["Pattern"]) for f in pipe["SourceParameters"]["FilterCriteria"]["Filters"]] == [
        {"eventName": ["INSERT"]}
    ]


def test_the_pipe_retries_until_just_before_the_stream_forgets_then_dead_letters(resources: dict[str, Any]) -> None:
    stream = resources[PIPE]["Properties"]["SourceParameters"]["DynamoDBStreamParameters"]
    assert stream["StartingPosition"] == "TRIM_HORIZON"  # a pipe created after the first crossings still has them
    assert stream["MaximumRetryAttempts"] == -1
    assert 0 < stream["MaximumRecordAgeInSeconds"] < 24 * 3600  # DynamoDB Streams keep a record 24 h
    assert stream["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["NotificationsDeadLetterQueue", "Arn"]}}
    assert stream["BatchSize"] <= 10  # PutEvents takes 10 entries
    assert stream["MaximumBatchingWindowInSeconds"] == 0
    alarm = resources["NotificationsDeadLetterAlarm"]["Properties"]
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["NotificationsDeadLetterQueue", "QueueName"]}}
    ]


def test_the_input_template_reads_every_attribute_the_store_writes(template: dict[str, Any]) -> None:
    # GIVEN the item the store writes for one crossing, and the pipe's input template
    parameters = template["Resources"][PIPE]["Properties"]["TargetParameters"]
    crossing = Crossing("0" * 32, "stock:1", "stock", 10, Direction.FALLING, "m-1", Decimal(5), Decimal(5), 1)
    item = notification_item(crossing, 2)
    # WHEN its placeholders are read
    placeholders = re.findall(r"<\$\.dynamodb\.NewImage\.([a-z_]+)\.([SN])>", parameters["InputTemplate"])
    # THEN each is an attribute the store writes, with its type; every attribute but the TTL is in the detail
    assert {name: kind for name, kind in placeholders} == {
        name: next(iter(value)) for name, value in item.items() if name != "expires_at"
    }
    # AND the detail is valid JSON once filled in (numbers as exact strings)
    filled = re.sub(
        r"<\$\.dynamodb\.NewImage\.([a-z_]+)\.([SN])>", lambda m: item[m[1]][m[2]], parameters["InputTemplate"]
    )
    detail = json.loads(filled)
    assert detail["notification_id"] == "0" * 32
    assert (detail["level"], detail["direction"], detail["value"]) == ("10", "falling", "5")
    assert parameters["EventBridgeEventBusParameters"] == {"Source": "tally", "DetailType": "tally.threshold-crossed"}


def test_the_pipe_role_reaches_this_stream_this_bus_and_this_queue_only(resources: dict[str, Any]) -> None:
    role = resources[ROLE]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pipes.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
        }
    ]
    granted: dict[str, set[str]] = {}
    for policy in role["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            for resource in _as_list(statement["Resource"]):
                granted.setdefault(json.dumps(resource), set()).update(_as_list(statement["Action"]))
    assert granted == {
        json.dumps({"Fn::GetAtt": ["NotificationsTable", "StreamArn"]}): {
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
        },
        # ListStreams has no resource type in IAM: "*" is the only way to grant it (it names streams, reads none)
        json.dumps("*"): {"dynamodb:ListStreams"},
        json.dumps(BUS_ARN): {"events:PutEvents"},
        json.dumps({"Fn::GetAtt": ["NotificationsDeadLetterQueue", "Arn"]}): {"sqs:SendMessage"},
    }


def test_the_functions_record_crossings_in_the_table_the_pipe_reads(resources: dict[str, Any]) -> None:
    template_text = json.dumps(resources)
    assert '"TALLY_NOTIFICATIONS_TABLE": {"Ref": "NotificationsTable"}' in template_text
    assert '"TALLY_COUNTER_THRESHOLDS": {"Ref": "CounterThresholds"}' in template_text
