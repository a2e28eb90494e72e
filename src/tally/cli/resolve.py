"""Where a command's resources are (tables, queues, stream, bucket) and how the stack counts (hot keys, windows).

One rule for every command, most explicit first:

1. an option on the command line (``--table``, ``--dlq-url``, ``--queue-url``, ...);
2. ``--stack NAME`` on the command line: every other resource and setting comes from that stack's Outputs
   and Parameters, and the ``TALLY_*`` variables of the environment are ignored (they may point at another
   stack: ``eval "$(tally stack A --env)"`` then ``--stack B`` must read B);
3. the environment variable the Lambda function uses (``TALLY_COUNTERS_TABLE``, ``TALLY_DLQ_URL``, ...);
4. the stack named by ``$TALLY_STACK``, read only when a variable is missing.

A stack given with ``--stack`` is always read, so one that does not exist is an error, whatever else is set.
``tally stack NAME --env`` prints the variables of step 3 (and ``TALLY_STACK``) as ``export`` lines, after an
``unset`` of every other stack variable, so a shell that switches stacks keeps nothing of the one before.

A command never combines two stacks' variables. Exports carry the stack they came from: ``TALLY_EXPORTED_FROM``
holds the stack's name and, for each variable exported, its name and a digest of its value. An environment whose
``TALLY_STACK`` is another stack, or whose stack variables are no longer those exported (one changed, added or
removed by hand since), is refused with an error naming the stack and the variable. Variables set by hand, with
no ``TALLY_EXPORTED_FROM`` (a function's environment, say), are taken as given.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

import click

from tally.cli.aws import client, failure, region

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tally.reader import CounterReader

STACK_VARIABLE: Final = "TALLY_STACK"
OUTPUT_VARIABLES: Final = {
    "CountersTableName": "TALLY_COUNTERS_TABLE",
    "MarkersTableName": "TALLY_MARKERS_TABLE",
    "DeadLetterQueueUrl": "TALLY_DLQ_URL",
    "EventsQueueUrl": "TALLY_QUEUE_URL",
    "EventStreamName": "TALLY_STREAM_NAME",
    "StreamFailureBucketName": "TALLY_FAILURE_BUCKET",
    "NotificationsTableName": "TALLY_NOTIFICATIONS_TABLE",
    "ArchiveBucketName": "TALLY_ARCHIVE_BUCKET",
}
"""Stack Output -> the environment variable tally's commands (and the function) read it from."""
PARAMETER_VARIABLES: Final = {
    "HotKeys": "TALLY_HOT_KEYS",
    "CounterDefaults": "TALLY_COUNTER_DEFAULTS",
    "CounterBounds": "TALLY_COUNTER_BOUNDS",
    "CounterThresholds": "TALLY_COUNTER_THRESHOLDS",
    "CounterViews": "TALLY_COUNTER_VIEWS",
    "Windows": "TALLY_WINDOWS",
    "WindowRetentionDays": "TALLY_WINDOW_RETENTION",
    "MarkerTtlDays": "TALLY_MARKER_TTL_DAYS",
}
"""Stack Parameter -> the function's environment variable (template.yaml's Globals). A setting may be
empty (no hot keys): set, even empty, it counts as given; a resource variable counts only when not empty."""
_OUTPUT_OF: Final = {variable: output for output, variable in OUTPUT_VARIABLES.items()}
_SETTINGS: Final = frozenset(PARAMETER_VARIABLES.values())
STACK_VARIABLES: Final = frozenset({STACK_VARIABLE, *OUTPUT_VARIABLES.values(), *PARAMETER_VARIABLES.values()})
"""Every variable a stack's exports may set."""
EXPORTED_FROM: Final = "TALLY_EXPORTED_FROM"
"""``<stack> <VARIABLE>:<digest> ...``: which stack the exported variables came from, and what they held."""

Kind = Literal["sqs", "kinesis"]
KINDS: Final = ("sqs", "kinesis")

stack_option = click.option(
    "--stack",
    "stack_name",
    help="Find every resource and setting in this stack's Outputs and Parameters, whatever TALLY_* variables"
    " are set (default: $TALLY_STACK, when a variable is missing).",
)
kind_option = click.option(
    "--to",
    "kind",
    type=click.Choice(KINDS, case_sensitive=False),
    help="Which source, when the stack (or the environment) has both a queue and a stream.",
)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:8]


def export_lines(stack: str, variables: Mapping[str, str]) -> list[str]:
    """Shell lines that point ``tally`` at ``stack`` alone: ``export`` each of ``variables`` (values quoted; others
    than stack variables, such as endpoints, too), then ``TALLY_EXPORTED_FROM``, which says whose they are, then
    ``unset`` every stack variable it does not set (in any order: none of them is exported)."""
    exported = {STACK_VARIABLE: stack, **variables}
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(exported.items())]
    stamp = [f"{name}:{_digest(value)}" for name, value in sorted(exported.items()) if name in STACK_VARIABLES]
    lines.append(f"export {EXPORTED_FROM}={shlex.quote(' '.join([stack, *stamp]))}")
    absent = sorted(STACK_VARIABLES - exported.keys())
    if absent:
        lines.append("unset " + " ".join(absent))
    return lines


def mixed_stacks(environ: Mapping[str, str]) -> str | None:
    """Why the environment's stack variables are not what one stack exported, or None: they are, or no stack
    exported them (no ``TALLY_EXPORTED_FROM``: set by hand, taken as given)."""
    stamp = environ.get(EXPORTED_FROM)
    if not stamp:
        return None
    stack, *entries = stamp.split()
    exported = dict(entry.rpartition(":")[::2] for entry in entries)
    named = environ.get(STACK_VARIABLE)
    if named and named != stack:
        return (
            f"${STACK_VARIABLE} is {named!r}, but the other TALLY_* variables were exported for stack {stack!r}: "
            f'eval "$(tally stack {shlex.quote(named)} --env)" to use {named!r}, or give --stack'
        )
    switch = f'eval "$(tally stack {shlex.quote(stack)} --env)" again, or give --stack'
    for name in sorted(STACK_VARIABLES):
        if name in environ and name not in exported:
            return f"${name} is set, but stack {stack!r}'s exports do not set it (another stack's?): {switch}"
        if name in exported and name not in environ:
            return f"${name} was unset after stack {stack!r}'s exports set it: {switch}"
        if name in exported and _digest(environ[name]) != exported[name]:
            return f"${name} is not the value stack {stack!r}'s exports gave it: {switch}"
    return None


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
    """The stack's Outputs and Parameters (one ``DescribeStacks``); a clear error when it does not exist."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in exc.response.get("Error", {}).get("Message", ""):
            stacks = []
        else:
            raise failure(f"read stack {stack_name!r}", "cloudformation", exc) from exc
    except BotoCoreError as exc:
        raise failure(f"read stack {stack_name!r}", "cloudformation", exc) from exc
    if not stacks:
        raise click.ClickException(f"stack {stack_name!r} does not exist (region {region() or 'of the profile'})")
    stack = stacks[0]
    return StackDescription(
        stack_name,
        {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])},
        {item["ParameterKey"]: item.get("ParameterValue", "") for item in stack.get("Parameters", [])},
    )


@dataclass(frozen=True, slots=True)
class Target:
    """A queue URL or a stream name (or ARN) to publish to."""

    kind: Kind
    address: str


@dataclass
class Resolver:
    """A command's resources and settings by the module's rule; ``given_stack`` is ``--stack`` (or ``None``)."""

    given_stack: str | None
    environ: Mapping[str, str]
    describe: Callable[[str], StackDescription] = describe
    _stack: StackDescription | None = field(default=None, init=False, repr=False)
    _checked: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.given_stack:
            self._stack = self.describe(self.given_stack)  # a stack named on the command line must exist

    def _environment(self) -> Mapping[str, str]:
        """The environment, once it is known to hold one stack's variables at most."""
        if not self._checked:
            problem = mixed_stacks(self.environ)
            if problem is not None:
                raise click.ClickException(problem)
            self._checked = True
        return self.environ

    @property
    def stack_name(self) -> str | None:
        """``--stack``, else ``$TALLY_STACK``."""
        return self.given_stack or self._environment().get(STACK_VARIABLE) or None

    def _stack_variables(self) -> dict[str, str]:
        if self._stack is None:
            name = self.stack_name
            if not name:
                return {}
            self._stack = self.describe(name)
        return self._stack.variables()

    def _from_environment(self, variable: str) -> str | None:
        value = self._environment().get(variable)
        if value is None or (not value and variable not in _SETTINGS):
            return None
        return value

    def value(self, variable: str, option: str | None = None) -> str | None:
        """``option``, else the given stack's, else the environment's, else ``$TALLY_STACK``'s value."""
        if option:
            return option
        if self.given_stack:
            return self._stack_variables().get(variable)
        found = self._from_environment(variable)
        if found is not None:
            return found
        return self._stack_variables().get(variable)

    def required(self, variable: str, option: str | None, what: str, option_name: str) -> str:
        """As ``value``; an error naming every way to give it when nothing does."""
        found = self.value(variable, option)
        if found:
            return found
        if self.stack_name:
            output = _OUTPUT_OF.get(variable, variable)
            raise click.ClickException(f"stack {self.stack_name!r} has no {output} output ({what})")
        raise click.UsageError(f"give {what}: {option_name}, --stack NAME, ${variable} or ${STACK_VARIABLE}")

    def settings(self, variables: tuple[str, ...]) -> dict[str, str]:
        """The ``variables`` that have a value (hot keys, windows, ...), for ``CounterReader.from_environment``."""
        found = {variable: self.value(variable) for variable in variables}
        return {variable: value for variable, value in found.items() if value is not None}

    def publish_target(self, queue_url: str | None, stream_name: str | None, kind: str | None) -> Target:
        """Where ``tally publish`` (and ``reset``, ``correct``) send: an option, else the given stack's queue
        or stream, else ``$TALLY_QUEUE_URL`` / ``$TALLY_STREAM_NAME``, else ``$TALLY_STACK``'s."""
        if queue_url:
            return Target("sqs", queue_url)
        if stream_name:
            return Target("kinesis", stream_name)
        if self.given_stack:
            available, where = self._targets(self._stack_variables()), f"stack {self.given_stack!r}"
        else:
            available = self._targets(self._environment())
            where = " and ".join(f"${TARGET_VARIABLES[source]}" for source in available)
            if self.stack_name and (not available or (kind is not None and kind.lower() not in available)):
                available = self._targets(self._stack_variables())
                where = f"stack {self.stack_name!r} (${STACK_VARIABLE})"
        if not available:
            if self.stack_name:
                raise click.ClickException(f"{where} has neither an EventsQueueUrl nor an EventStreamName output")
            raise click.UsageError(
                "give a target: --queue-url, --stream-name, --stack NAME, $TALLY_QUEUE_URL, $TALLY_STREAM_NAME or"
                f" ${STACK_VARIABLE}"
            )
        if kind is None:
            if len(available) > 1:
                raise click.ClickException(f"{where} has a queue and a stream: choose one with --to sqs|kinesis")
            ((only, address),) = available.items()
            return Target(only, address)
        chosen: Kind = "sqs" if kind.lower() == "sqs" else "kinesis"
        if chosen not in available:
            raise click.ClickException(f"{where} has no {chosen} source (the stack's Source parameter)")
        return Target(chosen, available[chosen])

    @staticmethod
    def _targets(variables: Mapping[str, str]) -> dict[Kind, str]:
        return {kind: variables[name] for kind, name in TARGET_VARIABLES.items() if variables.get(name)}


READ_SETTINGS: Final = (
    "TALLY_COUNTERS_TABLE",
    "TALLY_HOT_KEYS",
    "TALLY_WINDOWS",
    "TALLY_WINDOW_RETENTION",
    "TALLY_COUNTER_VIEWS",
)
"""What a read needs: the counters table, and how the stack counts (never the markers)."""


def counter_reader(resolver: Resolver, table_name: str | None) -> CounterReader:
    """The counters table (``--table``, the stack's or the environment's), with the stack's hot keys, windows and
    views."""
    from tally.errors import ConfigurationError
    from tally.reader import CounterReader

    table = resolver.required("TALLY_COUNTERS_TABLE", table_name, "the counters table", "--table")
    environment = resolver.settings(READ_SETTINGS) | {"TALLY_COUNTERS_TABLE": table}
    try:
        return CounterReader.from_environment(environment, client=client("dynamodb"))
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc


TARGET_VARIABLES: Final[dict[Kind, str]] = {"sqs": "TALLY_QUEUE_URL", "kinesis": "TALLY_STREAM_NAME"}
