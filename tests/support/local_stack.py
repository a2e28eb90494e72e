"""The local stack on the session's endpoints, and ``tally`` commands pointed at it, for end-to-end tests."""

from __future__ import annotations

import json
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from click.testing import CliRunner

from tally.cli.main import cli
from tally_local.mappings import EventSourceMappings
from tally_local.stack import LocalStack
from tests.support.environment import set_environment

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    import pytest

    from tally_local.dynamodb_local import DynamoDBLocal
    from tally_local.resources import LocalResources

SHORT_WINDOWS: Final = {"BatchingWindowSeconds": "1", "StreamBatchingWindowSeconds": "1"}
"""The template's batching windows (20 s, chosen for cost: docs/explanation/costs.md) would hold every
partly filled local batch for 20 s; the end-to-end tests exercise delivery, not cost, so they
run with 1 s unless a test sets its own."""


@contextmanager
def running_stack(
    dynamodb_local: DynamoDBLocal,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    parameters: Mapping[str, str],
) -> Iterator[LocalResources]:
    """A local stack (its own tables, queues, stream and CloudFormation stack) on the shared endpoints,
    with the environment ``tally`` commands read set to it."""
    with LocalStack(
        {**SHORT_WINDOWS, **parameters}, dynamodb_endpoint=dynamodb_local.endpoint_url, aws_endpoint=moto_endpoint
    ) as resources:
        services = ("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_CLOUDFORMATION")
        set_environment(monkeypatch, resources.cli_environment(), without=services)
        yield resources


@contextmanager
def pollers(
    resources: LocalResources,
    log_dir: Path,
    *,
    environment: Mapping[str, str] | None = None,
    handlers: Mapping[str, str] | None = None,
) -> Iterator[EventSourceMappings]:
    with EventSourceMappings(resources, log_dir=log_dir, environment=environment, handlers=handlers) as mappings:
        yield mappings


def tally(*args: str) -> str:
    """Run a ``tally`` command in-process; its output (it must succeed)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def tally_json(*args: str) -> Any:
    return json.loads(tally(*args), parse_float=Decimal)


def tally_lines(*args: str) -> list[Any]:
    return [json.loads(line, parse_float=Decimal) for line in tally(*args).splitlines() if line]
