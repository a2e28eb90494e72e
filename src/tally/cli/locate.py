"""Where a deployed (or local) stack's resources are, and how it counts: its Outputs and Parameters.

Every operator command takes ``--stack NAME`` (one ``DescribeStacks``) or the resource itself (an
option, or the environment variable the Lambda function uses), so nobody copies a table name or a queue
URL by hand. The stack's Parameters matter too: reading a hot key must sum its shard items, which only
``HotKeys`` says (as ``TALLY_HOT_KEYS`` does for the function). ``tally stack NAME --env`` prints the
same mapping as ``export`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError

from tally.runtime import CLIENT_CONFIG

if TYPE_CHECKING:
    from collections.abc import Mapping

OUTPUT_VARIABLES: Final = {
    "CountersTableName": "TALLY_COUNTERS_TABLE",
    "MarkersTableName": "TALLY_MARKERS_TABLE",
    "DeadLetterQueueUrl": "TALLY_DLQ_URL",
    "EventsQueueUrl": "TALLY_QUEUE_URL",
    "EventStreamName": "TALLY_STREAM_NAME",
    "StreamFailureBucketName": "TALLY_FAILURE_BUCKET",
}
"""Stack Output -> the environment variable tally's commands (and the function) read it from."""
PARAMETER_VARIABLES: Final = {
    "HotKeys": "TALLY_HOT_KEYS",
    "CounterDefaults": "TALLY_COUNTER_DEFAULTS",
    "CounterBounds": "TALLY_COUNTER_BOUNDS",
    "Windows": "TALLY_WINDOWS",
    "WindowRetentionDays": "TALLY_WINDOW_RETENTION",
    "MarkerTtlDays": "TALLY_MARKER_TTL_DAYS",
}
"""Stack Parameter -> the function's environment variable (template.yaml's Globals)."""

TABLES: Final = ("TALLY_COUNTERS_TABLE", "TALLY_MARKERS_TABLE")

stack_option = click.option(
    "--stack", "stack_name", envvar="TALLY_STACK", help="Find the resources in this stack's Outputs (or $TALLY_STACK)."
)


def client(service: str) -> Any:
    """A boto3 client with tally's timeouts; ``AWS_ENDPOINT_URL`` (and ``_<SERVICE>``) point it at a local endpoint."""
    return boto3.session.Session().client(service, config=CLIENT_CONFIG)  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class StackDescription:
    name: str
    outputs: dict[str, str]
    parameters: dict[str, str]

    def variables(self) -> dict[str, str]:
        """The environment variables the stack provides (only those it has)."""
        found = {variable: self.outputs[key] for key, variable in OUTPUT_VARIABLES.items() if key in self.outputs}
        found |= {
            variable: self.parameters[key] for key, variable in PARAMETER_VARIABLES.items() if key in self.parameters
        }
        return found


def describe(stack_name: str) -> StackDescription:
    """The stack's Outputs and Parameters (``DescribeStacks``); a click error if it cannot be read."""
    try:
        stacks = client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except (ClientError, BotoCoreError) as exc:
        raise click.ClickException(f"cannot read stack {stack_name!r}: {exc}") from exc
    if not stacks:
        raise click.ClickException(f"stack {stack_name!r} not found")
    stack = stacks[0]
    return StackDescription(
        stack_name,
        {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])},
        {item["ParameterKey"]: item.get("ParameterValue", "") for item in stack.get("Parameters", [])},
    )


class Locator:
    """Resolves a command's resources: an option (or its environment variable) first, else the stack."""

    def __init__(self, stack_name: str | None) -> None:
        self.stack_name = stack_name
        self._variables: dict[str, str] | None = None

    def _from_stack(self) -> dict[str, str]:
        if self._variables is None:
            self._variables = describe(self.stack_name).variables() if self.stack_name else {}
        return self._variables

    def environment(self, environ: Mapping[str, str], needed: tuple[str, ...] = TABLES) -> dict[str, str]:
        """``environ`` over the stack's variables (what is set explicitly wins); the stack is not read
        when ``environ`` already has every ``needed`` variable."""
        explicit = {name: value for name, value in environ.items() if value}
        if all(name in explicit for name in needed):
            return dict(environ)
        return {**self._from_stack(), **explicit}

    def optional(self, variable: str, given: str | None) -> str | None:
        return given or self._from_stack().get(variable)

    def required(self, variable: str, given: str | None, what: str) -> str:
        found = self.optional(variable, given)
        if found:
            return found
        if self.stack_name:
            raise click.ClickException(f"stack {self.stack_name!r} has no output for {what}")
        raise click.UsageError(f"give {what}: --stack NAME, an option, or ${variable}")
