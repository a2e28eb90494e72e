"""The local stack builds what ``sam deploy`` would, from template.yaml, and stops what it started."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tally_local.template import function_event_sources, queue_definitions, resolve, table_definitions
from tests.support.local_stack import running_stack, tally, tally_json

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

COUNT_DEADLINE_S = 180
"""How long a published count may take to appear before the test gives up: a deadline against a hang, far above the
2 to 5 s it takes on a quiet machine (a 15 s limit failed under load average 17)."""

MOTO_UNREPORTED_ATTRIBUTES = {"RedriveAllowPolicy"}
"""moto 5 accepts it in CreateQueue but neither keeps nor reports it (SQS does): not checkable locally."""


def test_resources_are_those_of_the_template(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parameters = {
        "Source": "Both",
        "StreamMode": "PROVISIONED",
        "ShardCount": "3",
        "StreamRetentionHours": "48",
        "MaxReceiveCount": "7",
    }
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        template = stack.template
        dynamodb, sqs, kinesis = stack.client("dynamodb"), stack.client("sqs"), stack.client("kinesis")
        # THEN each table has the template's key schema and TTL attribute
        for logical_id, definition in table_definitions(template).items():
            described = dynamodb.describe_table(TableName=stack.physical_ids[logical_id])["Table"]
            assert described["KeySchema"] == definition.create_table_kwargs("x")["KeySchema"]
            ttl = dynamodb.describe_time_to_live(TableName=stack.physical_ids[logical_id])["TimeToLiveDescription"]
            assert ttl.get("AttributeName") == definition.ttl_attribute
        # AND the source queue redrives to the dead-letter queue after the overridden MaxReceiveCount
        queue = queue_definitions(template)["EventsQueue"]
        attributes = sqs.get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=["All"])["Attributes"]
        assert json.loads(attributes["RedrivePolicy"]) == {
            "deadLetterTargetArn": stack.arns["EventsDeadLetterQueue"],
            "maxReceiveCount": 7,
        }
        assert int(attributes["VisibilityTimeout"]) == queue.visibility_timeout_seconds
        assert int(attributes["MessageRetentionPeriod"]) == queue.message_retention_seconds
        # AND every other property the template gives a queue (resolved) is the live queue's attribute
        for logical_id in queue_definitions(template):
            live = sqs.get_queue_attributes(QueueUrl=stack.physical_ids[logical_id], AttributeNames=["All"])
            for name, value in resolve(template)["Resources"][logical_id]["Properties"].items():
                if name in MOTO_UNREPORTED_ATTRIBUTES or name in {"RedrivePolicy", "QueueName", "Tags"}:
                    continue  # RedrivePolicy: checked above; the local stack names its queues
                expected = str(value).lower() if isinstance(value, bool) else str(value)
                assert live["Attributes"].get(name) == expected, (logical_id, name)
        # AND the stream has the provisioned shards and the retention
        assert len(kinesis.list_shards(StreamName=stack.stream_name)["Shards"]) == 3
        summary = kinesis.describe_stream_summary(StreamName=stack.stream_name)["StreamDescriptionSummary"]
        assert summary["RetentionPeriodHours"] == 48
        # AND a CloudFormation stack holds the template's outputs with the local names, for --stack
        assert tally_json("stack", stack.stack_name, "--json") == stack.outputs
        assert stack.outputs["CountersTableName"] == stack.counters_table
        assert stack.outputs["EventsQueueUrl"] == stack.queue_url
        assert stack.outputs["EventStreamName"] == stack.stream_name
        exports = tally("stack", stack.stack_name, "--env")
        assert f"export TALLY_COUNTERS_TABLE={stack.counters_table}\n" in exports
        assert f"export TALLY_QUEUE_URL={stack.queue_url}\n" in exports
        # AND the event source the pollers will use is the template's
        (source,) = function_event_sources(template).values()
        assert source.maximum_concurrency == int(template["Parameters"]["MaximumConcurrency"]["Default"])


def test_only_what_the_source_parameter_creates_exists(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, {"Source": "SQS"}) as stack:
        assert stack.stream_name is None
        assert "EventStreamName" not in stack.outputs
        assert set(stack.outputs) >= {"EventsQueueUrl", "DeadLetterQueueUrl", "CountersTableName", "MarkersTableName"}


def test_commands_find_resources_and_settings_by_stack_name(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parameters = {"Source": "SQS", "HotKeys": "hot:*=4"}
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        # GIVEN no table, queue or setting in the environment, only the stack's name
        for name in (
            "TALLY_COUNTERS_TABLE",
            "TALLY_MARKERS_TABLE",
            "TALLY_DLQ_URL",
            "TALLY_QUEUE_URL",
            "TALLY_HOT_KEYS",
            "TALLY_STACK",
        ):
            monkeypatch.delenv(name)
        # AND a hot key written to its base item and to one of its shard items
        for partition, value in (("hot:a", "3"), ("hot:a\x1f2", "4")):
            stack.client("dynamodb").put_item(
                TableName=stack.counters_table,
                Item={"pk": {"S": partition}, "sk": {"S": "all"}, "c#count": {"N": value}},
            )
        # THEN tally get finds the table AND the HotKeys parameter through --stack, and sums the shards
        assert tally_json("get", "hot:a", "--stack", stack.stack_name, "--json") == {"count": 7}
        # AND tally top and tally dlq list find their resources the same way
        assert tally_json("top", "--stack", stack.stack_name, "--json") == [
            {"key": "hot:a", "counter": "count", "value": 7}
        ]
        assert tally("dlq", "list", "--stack", stack.stack_name, "--json") == ""
        # AND tally stack --env says so, parameters included
        exports = tally("stack", stack.stack_name, "--env")
        assert "export TALLY_HOT_KEYS='hot:*=4'\n" in exports


def _free_port_pair() -> int:
    """A port P with P and P + 1 free (DynamoDB and moto of ``--port P``)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port >= 65534:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


def _start_stack(*args: str) -> tuple[subprocess.Popen[str], str]:
    """``python -m tally_local.stack ARGS`` until its banner ends; the process and the banner."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tally_local.stack", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    deadline = time.monotonic() + 180
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "press Ctrl-C" in line or not line:
            break
    return process, "".join(lines)


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _shell(command: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in a shell that sourced the stack's env file, with this venv's ``tally`` on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("AWS_", "TALLY_"))}
    return subprocess.run(
        ["bash", "-c", f". {state_dir / 'env'} && {command}"],
        env={**environment, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.dynamodb_local  # the program starts both itself, in a subprocess
@pytest.mark.moto
def test_python_m_tally_local_stack_prints_commands_that_work_and_keeps_its_names_across_restarts(
    tmp_path: Path,
) -> None:
    # GIVEN the local stack run as a program with a fixed name and port, with its default parameters
    port, state_dir = _free_port_pair(), tmp_path / "state"
    args = ("--name", "tally-test-fixed", "--port", str(port), "--state-dir", str(state_dir))
    state_dir.mkdir()
    (state_dir / "sam-env.json").write_text('{"CounterFunction": {"left": "by a stack stopped long ago"}}')
    process, output = _start_stack(*args, "--container-host", "none")
    try:
        # THEN no file of an earlier stack is left to be taken for this one's (no relays: no sam-env.json)
        assert not (state_dir / "sam-env.json").exists()
        # THEN it printed the variables that point tally at it, on the ports asked for
        assert f"export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:{port}\n" in output, output
        assert f"export AWS_ENDPOINT_URL=http://127.0.0.1:{port + 1}\n" in output, output
        assert "export TALLY_COUNTERS_TABLE=tally-test-fixed-CountersTable\n" in output, output
        exports = (state_dir / "env").read_text(encoding="utf-8")
        # AND every command after "then:" works as printed (Source=Both: publish says which source)
        commands = [line.strip() for line in output.split("then:\n", 1)[1].splitlines() if line.startswith("  ")]
        commands = [command for command in commands if not command.startswith("AWS_ACCESS_KEY_ID=")]
        assert any(command.startswith("tally publish ") for command in commands), output
        published = time.monotonic()
        for command in commands:
            if command.startswith("aws ") and shutil.which("aws") is None:
                continue  # the AWS CLI is not installed here
            result = _shell(command, state_dir)
            assert result.returncode == 0, (command, result.stdout, result.stderr)
        # AND the count appears (the local batching windows of 1 s, not the template's 20 s, are held by
        # tests/unit/test_local_sam_env.py; the deadline here only ends a run that would wait forever, so a loaded
        # machine's slowness cannot fail it)
        expected = 2 if shutil.which("aws") else 1
        while True:
            result = _shell("tally get page:/home --json", state_dir)
            if result.returncode == 0 and json.loads(result.stdout or "{}").get("count") == expected:
                break
            assert time.monotonic() - published < COUNT_DEADLINE_S, result
            time.sleep(0.5)
    finally:
        assert _stop(process) == 0
    # AND once stopped, it leaves no exports that point at nothing
    assert not (state_dir / "env").exists()
    # WHEN it is started again with the same name and port THEN the exports are the same
    process, output = _start_stack(*args, "--container-host", "none")
    try:
        assert "press Ctrl-C" in output, output
        assert (state_dir / "env").read_text(encoding="utf-8") == exports
    finally:
        assert _stop(process) == 0


@pytest.mark.dynamodb_local  # the program starts both itself, in a subprocess
@pytest.mark.moto
def test_the_program_stops_and_says_why_when_its_dynamodb_local_dies(tmp_path: Path) -> None:
    # GIVEN the local stack run as a program
    process, output = _start_stack("--state-dir", str(tmp_path / "state"), "--container-host", "none")
    try:
        assert "press Ctrl-C" in output, output
        jvms = [
            child
            for child in psutil.Process(process.pid).children(recursive=True)
            if any("DynamoDBLocal" in word for word in child.cmdline())
        ]
        assert len(jvms) == 1, jvms
        # WHEN its DynamoDB Local dies under it (every table gone with it)
        jvms[0].kill()
        # THEN the program stops, non-zero, saying which endpoint stopped and how, instead of leaving a stack whose
        # every request is refused
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 1, rest
        assert "DynamoDB Local stopped under the stack: exit code -9" in rest, rest
        assert not (tmp_path / "state" / "env").exists()
    finally:
        if process.poll() is None:
            _stop(process)
