"""Every CLI command starts quickly: ``tally --help`` and ``tally get --help`` import click and the command
modules, never the Lambda wiring (``tally.runtime``), the commit protocol (``tally.commit``), Powertools or
boto3; a command that calls AWS makes botocore's clients, never importing boto3 (with s3transfer, a fifth of a
second: more than the command's own work). Each runs in a fresh interpreter (a test process has imported
everything already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from tally.cli.main import COMMANDS, cli

HEAVY = ("aws_lambda_powertools", "tally.runtime", "tally.commit", "tally.pipeline", "boto3")
PROBE = """
import json, sys
from click.testing import CliRunner
from tally.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:])
assert result.exit_code == 0, result.output
heavy = json.loads({heavy!r})
print(json.dumps(sorted(n for n in sys.modules if any(n == h or n.startswith(h + ".") for h in heavy))))
"""


def loaded_after(*args: str) -> list[str]:
    script = PROBE.format(heavy=json.dumps(HEAVY))
    result = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout)
    return loaded


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("get", "--help"),
        ("top", "--help"),
        ("dlq", "list", "--help"),
        ("publish", "--help"),
        ("reset", "--help"),
        ("stack", "--help"),
        ("windows", "close", "--help"),
    ],
    ids=" ".join,
)
def test_help_imports_no_lambda_wiring_commit_protocol_powertools_or_boto3(args: tuple[str, ...]) -> None:
    assert loaded_after(*args) == []


REFUSED = "http://127.0.0.1:9"
"""An endpoint where nothing listens (the discard port): a client's first request is refused at once."""
CALLING_PROBE = """
import json, sys
from click.testing import CliRunner
from tally.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:])
print(json.dumps([result.exit_code, result.output, sorted(n for n in sys.modules if n in ("boto3", "s3transfer"))]))
"""


@pytest.mark.parametrize(
    "args",
    [
        ("get", "page:/x", "--table", "T"),
        ("top", "--table", "T"),
        ("dlq", "list", "--dlq-url", f"{REFUSED}/123456789012/dlq"),
    ],
    ids=" ".join,
)
def test_a_command_calling_aws_imports_no_boto3(args: tuple[str, ...]) -> None:
    # GIVEN an endpoint that refuses every connection, WHEN a command calls it
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("AWS_", "TALLY_"))}
    environment |= {
        "AWS_ENDPOINT_URL": REFUSED,
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "us-east-1",
    }
    result = subprocess.run(
        [sys.executable, "-c", CALLING_PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    exit_code, output, loaded = json.loads(result.stdout)
    # THEN its client really called (and says nothing answered there), and boto3 was never imported
    assert (exit_code, "nothing answered there" in output) == (1, True), output
    assert loaded == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The probe can fail: the Lambda wiring, imported on purpose, is seen (with Powertools and the rest)."""
    script = "import tally.runtime\n" + PROBE.format(heavy=json.dumps(HEAVY))
    result = subprocess.run(
        [sys.executable, "-c", script, "--help"], capture_output=True, text=True, check=False, timeout=120
    )
    loaded = json.loads(result.stdout)
    assert {"tally.runtime", "tally.commit", "aws_lambda_powertools", "boto3"} <= set(loaded)


def test_the_groups_help_is_each_commands_own() -> None:
    """``tally --help`` lists the commands from ``COMMANDS`` without importing them: the same words."""
    context = click.Context(cli)
    for name, lazy in COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None
        assert command.get_short_help_str(1000) == click.Command(name, help=lazy.summary).get_short_help_str(1000), name


def test_the_groups_help_imports_no_command_module() -> None:
    script = (
        "import sys\nfrom click.testing import CliRunner\nfrom tally.cli.main import cli\n"
        "result = CliRunner().invoke(cli, ['--help'])\nassert result.exit_code == 0, result.output\n"
        "assert 'Publish counter events' in result.output\n"
        "print(sorted(n for n in sys.modules if n.startswith('tally.cli.') and n not in "
        "{'tally.cli.main', 'tally.cli.output', 'tally.cli.resolve', 'tally.cli.aws'}))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
