"""What the CLI says when something is missing or fails: what failed, where, and what to try; never a
traceback; the region from ``AWS_REGION``; choices in any case; tables whole when piped; exact JSON."""

from __future__ import annotations

import json
import os
import re
import socket
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from click.testing import CliRunner
from moto import mock_aws

from tally.cli.main import cli
from tests.support.environment import set_environment
from tests.support.moto_function import counters_on_moto

if TYPE_CHECKING:
    from pathlib import Path

AWS_VARIABLES = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_CLOUDFORMATION",
)


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No region anywhere (no variable, an empty AWS config file), dummy credentials, no TALLY_* variable."""
    for name in [*AWS_VARIABLES, *(variable for variable in os.environ if variable.startswith("TALLY_"))]:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "config").write_text("", encoding="utf-8")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_no_region_is_a_clean_error_naming_the_variables(bare: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a table and no region anywhere WHEN read
    monkeypatch.setenv("TALLY_COUNTERS_TABLE", "x")
    result = run("get", "k")
    # THEN a usage error says what to set (no NoRegionError traceback)
    assert result.exit_code == 2, result.output
    assert "AWS_REGION" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def test_aws_region_is_honoured_as_samconfig_says(bare: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN only AWS_REGION (what Lambda and samconfig.toml set), and the table in that region
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("TALLY_COUNTERS_TABLE", "counters")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        key_schema = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
        attributes = [{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk")]
        client.create_table(
            TableName="counters", KeySchema=key_schema, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST"
        )
        client.put_item(TableName="counters", Item={"pk": {"S": "k"}, "sk": {"S": "all"}, "c#count": {"N": "7"}})
        # AND a conflicting AWS_DEFAULT_REGION: AWS_REGION wins, as in the AWS CLI v2 and the other SDKs
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        result = run("get", "k", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"count": 7}


def test_a_failed_read_says_what_failed_where_and_hints_at_the_local_stack(
    bare: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the exports of a local stack that is no longer running
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    variables = {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "TALLY_COUNTERS_TABLE": "counters",
    }
    set_environment(monkeypatch, variables)
    # WHEN read
    result = run("get", "k")
    # THEN it says a read failed, at which endpoint, and what to check; not "outcome unknown" (a write's words)
    assert result.exit_code == 1, result.output
    assert "cannot read 'k' from table 'counters' at " + endpoint in result.output
    assert "local stack running" in result.output
    assert "outcome unknown" not in result.output


@pytest.mark.parametrize(
    "args",
    [("get", "k"), ("top",), ("windows", "close")],
    ids=" ".join,
)
def test_a_missing_table_names_the_options_that_exist(bare: None, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "--table" in result.output
    assert "$TALLY_COUNTERS_TABLE" in result.output
    assert "--table" in run(*args[:2] if args[0] == "windows" else args[:1], "--help").output


def test_choices_take_any_case(bare: None) -> None:
    assert run("plan", "--events-per-second", "1", "--keys", "1", "--source", "kinesis", "--json").exit_code == 0
    assert run("plan", "--events-per-second", "1", "--keys", "1", "--source", "KINESIS", "--json").exit_code == 0
    # --to of the publishing commands: Kinesis as the template writes it; no target given, so a usage error
    # about the target, not about the choice
    result = run("publish", "k", "--to", "Kinesis")
    assert "give a target" in result.output, result.output


@pytest.mark.slow  # tally plan searches the batch settings
def test_plan_json_has_no_float_noise() -> None:
    result = run("plan", "--events-per-second", "1000", "--keys", "10000", "--json")
    assert result.exit_code == 0, result.output
    numbers = re.findall(r"(?<![\w\"])-?\d+\.\d+(?:[eE][-+]?\d+)?", result.output)
    assert numbers
    noisy = [n for n in numbers if len(Decimal(n).normalize().as_tuple().digits) > 10]
    assert noisy == []
    assert "0.30000000000000004" not in result.output


def test_a_table_printed_to_a_pipe_is_never_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a counter whose name is much wider than 80 columns (as an ARN or a queue URL is)
    long_name = "revenue_" + "x" * 150
    monkeypatch.delenv("COLUMNS", raising=False)
    with counters_on_moto(monkeypatch, [{"pk": {"S": "k"}, "sk": {"S": "all"}, f"c#{long_name}": {"N": "1"}}]):
        # WHEN printed as a table to a pipe (CliRunner's output is not a terminal)
        result = run("get", "k")
    # THEN the whole name is on one line
    assert result.exit_code == 0, result.output
    assert any(long_name in line for line in result.output.splitlines()), result.output
