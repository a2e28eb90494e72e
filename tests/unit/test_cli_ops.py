"""``tally top``, ``tally dlq`` and ``tally stack`` for people (tables) and scripts (JSON), on moto."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally_local.template import load_template, table_definitions

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@pytest.fixture
def aws(mocked_aws: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    dynamodb, sqs = boto3.client("dynamodb"), boto3.client("sqs")
    tables = table_definitions(load_template(TEMPLATE))
    dynamodb.create_table(**tables["CountersTable"].create_table_kwargs("c"))
    dynamodb.create_table(**tables["MarkersTable"].create_table_kwargs("m"))  # dlq: which letters count
    for pk, counters in {
        "a": {"count": "5", "revenue": "0.10"},
        "b": {"count": "12"},
        "b\x1f3": {"count": "1"},
    }.items():
        item = {"pk": {"S": pk}, "sk": {"S": "all"}} | {f"c#{n}": {"N": v} for n, v in counters.items()}
        dynamodb.put_item(TableName="c", Item=item)
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    target = sqs.create_queue(QueueName="target")["QueueUrl"]
    monkeypatch.setenv("TALLY_COUNTERS_TABLE", "c")
    monkeypatch.setenv("TALLY_MARKERS_TABLE", "m")
    monkeypatch.setenv("TALLY_DLQ_URL", dlq)
    return {"sqs": sqs, "dlq": dlq, "target": target}


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_top_prints_the_largest_counters_with_shards_summed(aws: dict[str, Any]) -> None:
    result = run("top", "2")
    assert result.exit_code == 0, result.output
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines() if "│" in line]
    assert cells == [["1", "b", "count", "13"], ["2", "a", "count", "5"]]  # b: 12 on the base item + 1 on shard 3
    as_json = json.loads(run("top", "--counter", "revenue", "--json").output, parse_float=Decimal)
    assert as_json == [{"key": "a", "counter": "revenue", "value": Decimal("0.10")}]


def test_top_without_a_table_says_how_to_give_one(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_COUNTERS_TABLE")
    result = run("top")
    assert result.exit_code == 2
    assert "--stack NAME" in result.output


def test_dlq_list_shows_each_reason_and_redrive_empties_it(aws: dict[str, Any]) -> None:
    sqs = aws["sqs"]
    attributes = {
        "tally.error_code": {"DataType": "String", "StringValue": "invalid_field"},
        "tally.error_message": {"DataType": "String", "StringValue": "Object contains unknown field `detla`"},
    }
    sqs.send_message(QueueUrl=aws["dlq"], MessageBody='{"id":"x","key":"k","detla":1}', MessageAttributes=attributes)
    # WHEN listed THEN the table shows the code and the message
    listed = run("dlq", "list")
    assert listed.exit_code == 0, listed.output
    assert "invalid_field" in listed.output
    assert "unknown field" in listed.output
    assert "by reason: invalid_field 1" in listed.output
    # WHEN redriven to a queue THEN it is there, unchanged, and the dead-letter queue is empty
    redriven = run("dlq", "redrive", "--to-queue", aws["target"])
    assert redriven.exit_code == 0, redriven.output
    (message,) = sqs.receive_message(QueueUrl=aws["target"])["Messages"]
    assert message["Body"] == '{"id":"x","key":"k","detla":1}'
    assert run("dlq", "list", "--json").output == ""


def test_redrive_with_nowhere_to_send_exits_1_and_keeps_the_message(aws: dict[str, Any]) -> None:
    aws["sqs"].send_message(QueueUrl=aws["dlq"], MessageBody='{"id":"y","key":"k","delta":1}')
    result = run("dlq", "redrive")
    assert result.exit_code == 1
    assert "left in the dead-letter queue" in result.output
    assert len(run("dlq", "list", "--json").output.splitlines()) == 1


def test_stack_shows_outputs_and_the_variables_they_set(aws: dict[str, Any]) -> None:
    # GIVEN a stack with tally's outputs and a HotKeys parameter
    body = {
        "Parameters": {"HotKeys": {"Type": "String"}},
        "Resources": {
            "P": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/s1/p", "Type": "String", "Value": "v"}}
        },
        "Outputs": {"CountersTableName": {"Value": "c"}, "DeadLetterQueueUrl": {"Value": aws["dlq"]}},
    }
    boto3.client("cloudformation").create_stack(
        StackName="s1", TemplateBody=json.dumps(body), Parameters=[{"ParameterKey": "HotKeys", "ParameterValue": "b=4"}]
    )
    # THEN the table names each output's variable, and --env exports them
    table = run("stack", "s1")
    assert table.exit_code == 0, table.output
    assert "TALLY_COUNTERS_TABLE" in table.output
    *exports, stamp, unset = run("stack", "s1", "--env").output.splitlines()
    assert exports == [
        "export TALLY_COUNTERS_TABLE=c",
        f"export TALLY_DLQ_URL={aws['dlq']}",
        "export TALLY_HOT_KEYS=b=4",
        "export TALLY_STACK=s1",
    ]
    # every other stack variable is unset (a shell that held another stack's keeps none of them) ...
    assert unset.startswith("unset ")
    assert {"TALLY_QUEUE_URL", "TALLY_STREAM_NAME", "TALLY_FAILURE_BUCKET"} <= set(unset.split())
    assert not {"TALLY_COUNTERS_TABLE", "TALLY_STACK"} & set(unset.split())
    # ... and the exports say whose they are
    assert stamp.startswith("export TALLY_EXPORTED_FROM='s1 TALLY_COUNTERS_TABLE:")
    missing = run("stack", "nope")
    assert missing.exit_code == 1
    assert "stack 'nope' does not exist" in missing.output


def test_windows_close_moves_every_keys_ended_windows_once(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a key never written again, its 2020 hour and day still open on its item
    dynamodb = boto3.client("dynamodb")
    item = {"pk": {"S": "w"}, "sk": {"S": "all"}, "c#count": {"N": "3"}}
    item |= {"w#h#2020-01-01T05:00Z\x1fcount": {"N": "3"}, "w#d#2020-01-01\x1fcount": {"N": "3"}}
    dynamodb.put_item(TableName="c", Item=item)
    monkeypatch.setenv("TALLY_WINDOWS", "hour,day")
    monkeypatch.setenv("TALLY_WINDOW_RETENTION", "hour=0,day=0")
    # WHEN an operator closes the windows, twice
    first = json.loads(run("windows", "close", "--json").output)
    second = json.loads(run("windows", "close", "--json").output)
    # THEN the first run moved both windows to the day's item (the hour beside the day's total), the second
    # found nothing (4 key items: a, b, b's shard 3, w)
    assert (first["key_items_checked"], first["windows_moved"], first["window_items_written"]) == (4, 2, 1)
    assert second["windows_moved"] == 0
    stored = {i["sk"]["S"]: i for i in dynamodb.scan(TableName="c")["Items"] if i["pk"]["S"] == "w"}
    assert stored["d#2020-01-01"]["w#h#2020-01-01T05:00Z\x1fcount"] == {"N": "3"}
    assert stored["d#2020-01-01"]["c#count"] == {"N": "3"}
    assert not [name for name in stored["all"] if name.startswith("w#")]
    assert "0 ended windows of 0 key items moved" in run("windows", "close").output
