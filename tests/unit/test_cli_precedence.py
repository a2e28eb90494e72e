"""An explicit choice always wins, in every command: ``--stack B`` (or an option) after ``eval "$(tally stack A
--env)"`` reads and writes B's resources, never A's; a stack that does not exist is an error; and the
publishing commands follow ``$TALLY_QUEUE_URL`` and ``$TALLY_STACK`` when nothing is given.

GIVEN two stacks on moto, A and B, each with its own counters table (one key ``k`` whose count says whose
it is), dead-letter queue (one letter) and source queue, and a shell holding A's exports.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally_local.template import load_template, table_definitions

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
STACKS = {"A": 1, "B": 2}
"""Stack -> the count of ``k`` in its table (and the number of key items its table holds)."""


@pytest.fixture
def stacks(monkeypatch: pytest.MonkeyPatch, mocked_aws: None) -> dict[str, dict[str, str]]:
    dynamodb, sqs = boto3.client("dynamodb"), boto3.client("sqs")
    definition = table_definitions(load_template(TEMPLATE))["CountersTable"]
    outputs: dict[str, dict[str, str]] = {}
    for stack, count in STACKS.items():
        table = f"counters-{stack}"
        dynamodb.create_table(**definition.create_table_kwargs(table))
        for index in range(count):  # key items: k, and B has one more
            item = {"pk": {"S": "k" if index == 0 else f"other{index}"}, "sk": {"S": "all"}}
            dynamodb.put_item(TableName=table, Item=item | {"c#count": {"N": str(count)}})
        dlq = sqs.create_queue(QueueName=f"dlq-{stack}")["QueueUrl"]
        sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps({"id": f"letter-{stack}", "key": "k", "delta": 1}))
        queue = sqs.create_queue(QueueName=f"events-{stack}")["QueueUrl"]
        outputs[stack] = {
            "CountersTableName": table,
            "DeadLetterQueueUrl": dlq,
            "EventsQueueUrl": queue,
        }
        if stack == "A":  # an output B does not have
            outputs[stack]["NotificationsTableName"] = "notifications-A"
        body = {
            "Parameters": {"Windows": {"Type": "String"}},
            "Resources": {
                "P": {
                    "Type": "AWS::SSM::Parameter",
                    "Properties": {"Name": f"/{stack}/p", "Type": "String", "Value": "v"},
                }
            },
            "Outputs": {key: {"Value": value} for key, value in outputs[stack].items()},
        }
        boto3.client("cloudformation").create_stack(
            StackName=stack,
            TemplateBody=json.dumps(body),
            Parameters=[{"ParameterKey": "Windows", "ParameterValue": "hour"}],
        )
    # AND a shell holding A's exports, exactly as `tally stack A --env` prints them
    for name, value in shell_after(env_of("A")).items():
        monkeypatch.setenv(name, value)
    return outputs


def env_of(stack: str) -> str:
    exports = run("stack", stack, "--env")
    assert exports.exit_code == 0, exports.output
    return str(exports.output)


def shell_after(*outputs: str, then: str = "") -> dict[str, str]:
    """The tally variables of a bash shell that evaluated each output in turn (``eval "$(tally stack X --env)"``),
    then ran ``then``."""
    script = f'for output in "$@"; do eval "$output"; done\n{then}\nenv -0'
    ran = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script, "bash", *outputs],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    variables = dict(entry.partition("=")[::2] for entry in ran.stdout.split("\0") if entry)
    return {name: value for name, value in variables.items() if name.startswith("TALLY_")}


def use_environment(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name in [name for name in os.environ if name.startswith("TALLY_")]:
        monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def count_of_k(*args: str) -> Any:
    result = run("get", "k", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["count"]


def letters(url: str) -> list[str]:
    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [json.loads(message["Body"])["id"] for message in messages.get("Messages", [])]


def bodies(url: str) -> list[dict[str, Any]]:
    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


def test_the_shell_holds_a_and_names_it(stacks: dict[str, dict[str, str]]) -> None:
    assert os.environ["TALLY_STACK"] == "A"
    assert count_of_k() == STACKS["A"]


def test_get_reads_the_stack_or_the_table_given_not_the_environments(stacks: dict[str, dict[str, str]]) -> None:
    assert count_of_k("--stack", "B") == STACKS["B"]
    assert count_of_k("--table", stacks["B"]["CountersTableName"]) == STACKS["B"]
    assert count_of_k("--stack", "B", "--table", stacks["A"]["CountersTableName"]) == STACKS["A"]  # the option wins


def test_top_reads_the_stack_or_the_table_given(stacks: dict[str, dict[str, str]]) -> None:
    for args in (("--stack", "B"), ("--table", stacks["B"]["CountersTableName"])):
        result = run("top", "1", "--json", *args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == [{"key": "k", "counter": "count", "value": STACKS["B"]}]


def test_windows_close_scans_the_stack_or_the_table_given(stacks: dict[str, dict[str, str]]) -> None:
    for args in (("--stack", "B"), ("--table", stacks["B"]["CountersTableName"])):
        result = run("windows", "close", "--json", *args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["key_items_checked"] == STACKS["B"]


def test_dlq_list_reads_the_stack_or_the_queue_given(stacks: dict[str, dict[str, str]]) -> None:
    for args in (("--stack", "B"), ("--dlq-url", stacks["B"]["DeadLetterQueueUrl"])):
        result = run("dlq", "list", "--json", *args)
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["message_id"] for line in result.output.splitlines()] != []
        assert [json.loads(json.loads(line)["body"])["id"] for line in result.output.splitlines()] == ["letter-B"]


def test_dlq_redrive_drains_the_stack_given_never_the_environments(stacks: dict[str, dict[str, str]]) -> None:
    # WHEN B's dead letters are redriven with A's TALLY_DLQ_URL exported
    result = run("dlq", "redrive", "--stack", "B", "--to-queue", stacks["B"]["EventsQueueUrl"], "--json")
    assert result.exit_code == 0, result.output
    # THEN B's dead-letter queue is drained, A's is untouched
    assert letters(stacks["B"]["DeadLetterQueueUrl"]) == []
    assert letters(stacks["A"]["DeadLetterQueueUrl"]) == ["letter-A"]
    assert [body["id"] for body in bodies(stacks["B"]["EventsQueueUrl"])] == ["letter-B"]
    assert json.loads(result.output)["left"] == []


def test_dlq_redrive_sends_to_the_stacks_source_queue(stacks: dict[str, dict[str, str]]) -> None:
    # GIVEN letters without a tally.source (SQS moved them): they go to the source queue, B's with --stack B
    result = run("dlq", "redrive", "--stack", "B")
    assert result.exit_code == 0, result.output
    assert [body["id"] for body in bodies(stacks["B"]["EventsQueueUrl"])] == ["letter-B"]
    assert bodies(stacks["A"]["EventsQueueUrl"]) == []


@pytest.mark.parametrize(
    "command",
    [("publish", "k2"), ("reset", "k2", "count", "0"), ("correct", "k2", "count", "-1")],
    ids=["publish", "reset", "correct"],
)
def test_publishing_commands_send_to_the_stack_given_else_the_environments_queue(
    stacks: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    # WHEN sent with --stack B while A's TALLY_QUEUE_URL is exported THEN it is in B's queue
    assert run(*command, "--stack", "B").exit_code == 0
    assert len(bodies(stacks["B"]["EventsQueueUrl"])) == 1
    assert bodies(stacks["A"]["EventsQueueUrl"]) == []
    # WHEN sent with nothing given THEN it goes to $TALLY_QUEUE_URL (A's)
    assert run(*command).exit_code == 0
    assert len(bodies(stacks["A"]["EventsQueueUrl"])) == 1
    # WHEN only $TALLY_STACK=B is set THEN it goes to B's queue
    use_environment(monkeypatch, {"TALLY_STACK": "B"})
    assert run(*command).exit_code == 0
    assert len(bodies(stacks["B"]["EventsQueueUrl"])) == 2


@pytest.mark.parametrize(
    "command",
    [
        ("get", "k"),
        ("top",),
        ("windows", "close"),
        ("dlq", "list"),
        ("dlq", "redrive"),
        ("publish", "k"),
        ("reset", "k", "count", "0"),
        ("correct", "k", "count", "1"),
        ("stack",),
    ],
    ids=lambda command: "-".join(command[:2]),
)
def test_a_stack_that_does_not_exist_is_an_error_whatever_the_environment_holds(
    stacks: dict[str, dict[str, str]], command: tuple[str, ...]
) -> None:
    args = [*command, "does-not-exist"] if command == ("stack",) else [*command, "--stack", "does-not-exist"]
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "stack 'does-not-exist' does not exist" in result.output
    assert letters(stacks["A"]["DeadLetterQueueUrl"]) == ["letter-A"]  # nothing of A's was touched
    assert bodies(stacks["A"]["EventsQueueUrl"]) == []


def test_publish_reset_and_correct_print_json_when_asked(stacks: dict[str, dict[str, str]]) -> None:
    published = run("publish", "k2", "3", "--json")
    assert published.exit_code == 0, published.output
    summary = json.loads(published.stdout)  # the progress bar goes to stderr
    assert summary["target"] == {"kind": "sqs", "address": stacks["A"]["EventsQueueUrl"]}
    assert (summary["events"], summary["messages_sent"], summary["failed"]["messages"]) == (1, 1, 0)
    for command in (("reset", "k2", "count", "0", "--id", "r-1"), ("correct", "k2", "count", "-1", "--id", "c-1")):
        result = run(*command, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {
            "id": command[5],
            "sent": True,
            "target": stacks["A"]["EventsQueueUrl"],
            "failures": [],
        }


# --- switching stacks: the environment never holds two stacks' variables ----------------------------------------


def test_the_env_of_another_stack_leaves_none_of_the_first_stacks_variables(stacks: dict[str, dict[str, str]]) -> None:
    # WHEN a shell evaluates A's exports, then B's
    variables = shell_after(env_of("A"), env_of("B"))
    # THEN it holds B's variables only: A's notifications table (B has none) is gone
    assert variables["TALLY_STACK"] == "B"
    assert "TALLY_NOTIFICATIONS_TABLE" not in variables
    assert variables["TALLY_COUNTERS_TABLE"] == stacks["B"]["CountersTableName"]
    assert variables == shell_after(env_of("B"))  # as in a shell that never held A's


@pytest.mark.parametrize(
    "command",
    [("get", "k"), ("top",), ("dlq", "list"), ("dlq", "redrive"), ("publish", "k"), ("notifications", "list")],
    ids="-".join,
)
def test_a_command_refuses_an_environment_that_names_one_stack_and_holds_anothers(
    stacks: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    # GIVEN A's exports, then TALLY_STACK=B set by hand
    use_environment(monkeypatch, shell_after(env_of("A"), then="export TALLY_STACK=B"))
    # WHEN a command runs THEN it refuses, naming both stacks, and touched nothing of A's
    result = run(*command)
    assert result.exit_code == 1, result.output
    assert "'A'" in result.output
    assert "'B'" in result.output
    assert letters(stacks["A"]["DeadLetterQueueUrl"]) == ["letter-A"]
    assert bodies(stacks["A"]["EventsQueueUrl"]) == []


@pytest.mark.parametrize(
    ("then", "named"),
    [
        ("export TALLY_QUEUE_URL=elsewhere", "TALLY_QUEUE_URL"),
        ("export TALLY_NOTIFICATIONS_TABLE=notifications-A", "TALLY_NOTIFICATIONS_TABLE"),
        ("unset TALLY_DLQ_URL", "TALLY_DLQ_URL"),
    ],
    ids=["changed", "added", "removed"],
)
def test_a_command_refuses_a_variable_changed_since_the_stack_exported_them(
    stacks: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, then: str, named: str
) -> None:
    # GIVEN B's exports, then one tally variable changed by hand
    use_environment(monkeypatch, shell_after(env_of("B"), then=then))
    # WHEN a command reads the environment THEN it refuses, naming the variable and the stack
    result = run("get", "k")
    assert result.exit_code == 1, result.output
    assert named in result.output
    assert "'B'" in result.output
    # AND an explicit stack still works: the environment is not read
    assert count_of_k("--stack", "B") == STACKS["B"]


def test_variables_set_by_hand_are_taken_as_given(
    stacks: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the variables a function's environment would hold, set by hand: no stack exported them
    use_environment(monkeypatch, {"TALLY_COUNTERS_TABLE": stacks["B"]["CountersTableName"]})
    assert count_of_k() == STACKS["B"]
