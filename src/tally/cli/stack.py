"""Find where to publish from a deployed stack's Outputs (``tally publish --stack NAME``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import BotoCoreError, ClientError

from tally.errors import ConfigurationError

if TYPE_CHECKING:
    from mypy_boto3_cloudformation.client import CloudFormationClient

QUEUE_OUTPUT = "EventsQueueUrl"
STREAM_OUTPUT = "EventStreamName"

Kind = Literal["sqs", "kinesis"]


@dataclass(frozen=True, slots=True)
class Target:
    """A queue URL or a stream name (or ARN) to publish to."""

    kind: Kind
    address: str


def stack_outputs(client: CloudFormationClient, stack_name: str) -> dict[str, str]:
    """OutputKey -> OutputValue of ``stack_name`` (DescribeStacks)."""
    try:
        stacks = client.describe_stacks(StackName=stack_name)["Stacks"]
    except (ClientError, BotoCoreError) as exc:
        raise ConfigurationError(f"cannot read stack {stack_name!r}: {exc}") from exc
    if not stacks:
        raise ConfigurationError(f"stack {stack_name!r} not found")
    return {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}


def target_from_outputs(outputs: dict[str, str], stack_name: str, kind: Kind | None) -> Target:
    """The stack's queue or stream; ``kind`` must choose when the stack has both (Source=Both)."""
    available: dict[Kind, str] = {}
    if QUEUE_OUTPUT in outputs:
        available["sqs"] = outputs[QUEUE_OUTPUT]
    if STREAM_OUTPUT in outputs:
        available["kinesis"] = outputs[STREAM_OUTPUT]
    if not available:
        raise ConfigurationError(f"stack {stack_name!r} has neither {QUEUE_OUTPUT} nor {STREAM_OUTPUT} output")
    if kind is None:
        if len(available) > 1:
            raise ConfigurationError(f"stack {stack_name!r} has a queue and a stream: choose one with --to")
        ((only, address),) = available.items()
        return Target(only, address)
    if kind not in available:
        raise ConfigurationError(f"stack {stack_name!r} has no {kind} source (its Source parameter)")
    return Target(kind, available[kind])
