"""The local stack: AWS's DynamoDB emulator and a moto server, with the resources of ``template.yaml``.

``LocalStack`` starts DynamoDB Local (``tally_local.dynamodb_local``) and one moto server on 127.0.0.1
for SQS, Kinesis and CloudFormation (``tally_local.moto_server``: one request at a time, as moto's
models are not thread-safe), then creates what ``sam deploy`` would, read from the template
with ``tally_local.template`` (so local never drifts from the deployment): the tables with the
template's key schemas and TTL, the dead-letter queue, the source queue with the template's redrive
policy, and the stream, for the resources the template's Conditions create with the given parameter
overrides (``Source=Both`` creates the queue and the stream). It also registers a CloudFormation stack
on the moto server whose Outputs are the template's Outputs with the local names, so ``tally stack``,
``--stack`` and every tool that finds resources by stack name work locally exactly as against AWS.

What it hands back, ``LocalResources``, lives below it in ``tally_local.resources``, so the event source
mappings (``tally_local.mappings``), which this module's ``main`` starts, need not import this module.
This module must not run event sources itself or know a resource's item schema.

Either endpoint may be given instead of started (tests share one per session). Whatever it starts it
stops in ``stop`` (``finally`` of the ``with`` block), also on Ctrl-C; ``handle_termination`` turns
SIGTERM into the same clean exit. ``tally-local`` (``python -m tally_local.stack``) runs the stack with its event source
pollers until Ctrl-C and prints the variables that point ``tally`` at it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import secrets
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from tally.cli.resolve import export_lines
from tally.config import COUNTERS_TABLE, Settings
from tally.errors import ConfigurationError
from tally_local.dynamodb_local import SHORT_LIVED_JVM_OPTIONS, DynamoDBLocal, DynamoDBLocalError
from tally_local.mappings import EventSourceMappings
from tally_local.moto_server import SerialMotoServer
from tally_local.pipe import LocalNotificationsPipe
from tally_local.relay import TcpRelay, interface_address
from tally_local.resources import LocalResources
from tally_local.template import (
    KINESIS_DEFAULT_RETENTION_HOURS,
    ParameterError,
    condition_values,
    function_definition,
    load_template,
    queue_definitions,
    resolve,
    resource_created,
    stream_definitions,
    table_definitions,
    with_parameters,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from types import FrameType, TracebackType


logger = logging.getLogger(__name__)

TEMPLATE: Final = Path(__file__).resolve().parents[2] / "template.yaml"
_MARKER_RESOURCE: Final = "LocalStackMarker"
_MOTO_CLOUDFORMATION: Final = "moto.cloudformation.parsing"


_NOT_EMULATED: Final = {
    "StreamFailuresToS3": "StreamFailureDestination=S3 (its pollers send given-up batches to the dead-letter queue)",
    "HasExistingQueue": "ExistingQueueArn (it creates the template's own queue)",
    "HasExistingStream": "ExistingStreamArn (it creates the template's own stream)",
}
"""Conditions of choices the local stack refuses rather than run as something else."""


class LocalStack:
    """Starts the endpoints it was not given, creates the template's resources, stops what it started."""

    def __init__(
        self,
        parameters: Mapping[str, str] | None = None,
        *,
        template_path: Path = TEMPLATE,
        dynamodb_endpoint: str | None = None,
        aws_endpoint: str | None = None,
        stack_name: str | None = None,
        port: int = 0,
    ) -> None:
        """``port``: 0 for any free ports; else DynamoDB answers on ``port`` and moto on ``port + 1``, so the
        endpoints (and the queue URLs, which hold moto's) stay the same across restarts."""
        self.template = with_parameters(load_template(template_path), parameters or {})
        unsupported = sorted(name for name in _NOT_EMULATED if condition_values(self.template).get(name))
        if unsupported:
            raise ParameterError(f"the local stack does not emulate {', '.join(_NOT_EMULATED[n] for n in unsupported)}")
        _check_settings(self.template)
        self.stack_name = stack_name or f"tally-local-{secrets.token_hex(3)}"
        self._dynamodb_endpoint = dynamodb_endpoint
        self._aws_endpoint = aws_endpoint
        self._port = port
        self._stack = contextlib.ExitStack()
        self._dynamodb: DynamoDBLocal | None = None
        """The DynamoDB Local this stack started (None: it uses a shared endpoint, or is not started)."""
        self.resources: LocalResources | None = None

    def start(self) -> LocalResources:
        try:
            aws_endpoint = self._aws_endpoint or self._start_moto()
            # moto imports its CloudFormation engine (every service's models, seconds) on the first
            # CreateStack: do it while DynamoDB Local's JVM boots.
            warm_up = threading.Thread(target=importlib.import_module, args=(_MOTO_CLOUDFORMATION,), daemon=True)
            warm_up.start()
            dynamodb_endpoint = self._dynamodb_endpoint or self._start_dynamodb()
            warm_up.join()
            self.resources = _create_resources(self.template, self.stack_name, dynamodb_endpoint, aws_endpoint)
        except BaseException:
            self._stack.close()
            raise
        return self.resources

    def stop(self) -> None:
        """Stop the endpoints this stack started (resources on shared endpoints are left to their owner)."""
        self.resources = None
        self._dynamodb = None
        self._stack.close()

    def __enter__(self) -> LocalResources:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _start_moto(self) -> str:
        server = self._stack.enter_context(SerialMotoServer(port=self._port + 1 if self._port else 0))
        return server.endpoint_url

    def check(self) -> None:
        """Raise ``DynamoDBLocalError`` if the DynamoDB Local this stack started is no longer running: every table
        is gone with it, and a stack left up would answer every request with a refused connection."""
        if self._dynamodb is not None and not self._dynamodb.running:
            raise DynamoDBLocalError(f"DynamoDB Local stopped under the stack: {self._dynamodb.exit_report()}")

    def _start_dynamodb(self) -> str:
        self._dynamodb = self._stack.enter_context(DynamoDBLocal(jvm_options=SHORT_LIVED_JVM_OPTIONS))
        endpoint = self._dynamodb.endpoint_url
        if not self._port:
            return endpoint
        # DynamoDB Local takes a free port of its own; the fixed one is a relay in front of it.
        return self._stack.enter_context(TcpRelay(endpoint, port=self._port)).endpoint_url


def _check_settings(template: dict[str, Any]) -> None:
    """The functions' settings as the template gives them, read as a function reads them at start
    (``tally.config``): a parameter its own pattern lets through (``CounterBounds=stock:*#stock>=1e``) but the
    function could not run with is refused here, before anything starts, not in every invocation."""
    functions = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("Type") == "AWS::Serverless::Function" and resource_created(template, logical_id)
    ]
    placeholders = {logical_id: logical_id for logical_id in template["Resources"]}
    for logical_id in functions:
        environment = function_definition(template, logical_id, placeholders).environment
        if not any(name == COUNTERS_TABLE for name in environment):
            continue  # the read function: no counting settings
        try:
            Settings.from_env(environment, require_dlq=False)
        except ConfigurationError as exc:
            raise ParameterError(str(exc)) from exc


def _create_resources(
    template: dict[str, Any], stack_name: str, dynamodb_endpoint: str, aws_endpoint: str
) -> LocalResources:
    physical: dict[str, str] = {}
    arns: dict[str, str] = {}
    resources = LocalResources(stack_name, template, dynamodb_endpoint, aws_endpoint, physical, arns, {})
    dynamodb = resources.client("dynamodb")
    for logical_id, table in table_definitions(template).items():
        if not resource_created(template, logical_id):
            continue
        name = f"{stack_name}-{logical_id}"
        dynamodb.create_table(**table.create_table_kwargs(name))
        ttl = table.update_time_to_live_kwargs(name)
        if ttl is not None:
            dynamodb.update_time_to_live(**ttl)
        physical[logical_id] = name
        arns[logical_id] = dynamodb.describe_table(TableName=name)["Table"]["TableArn"]
    sqs = resources.client("sqs")
    queues = queue_definitions(template)
    # Redrive targets first: a queue's RedrivePolicy needs its dead-letter queue's ARN.
    for logical_id in sorted(queues, key=lambda name: queues[name].dead_letter_target is not None):
        queue = queues[logical_id]
        if not resource_created(template, logical_id):
            continue
        suffix = ".fifo" if queue.fifo else ""
        target = arns[queue.dead_letter_target] if queue.dead_letter_target else None
        url = sqs.create_queue(**queue.create_queue_kwargs(f"{stack_name}-{logical_id}{suffix}", target))["QueueUrl"]
        physical[logical_id] = url
        arns[logical_id] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    kinesis = resources.client("kinesis")
    for logical_id, stream in stream_definitions(template).items():
        if not resource_created(template, logical_id):
            continue
        name = f"{stack_name}-{logical_id}"
        kinesis.create_stream(**stream.create_stream_kwargs(name))
        kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        if stream.retention_hours != KINESIS_DEFAULT_RETENTION_HOURS:
            kinesis.increase_stream_retention_period(StreamName=name, RetentionPeriodHours=stream.retention_hours)
        physical[logical_id] = name
        arns[logical_id] = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    s3 = resources.client("s3")
    for logical_id, resource in template["Resources"].items():
        # The archive bucket (ArchiveEnabled): the functions archive every counted message to moto's S3, as on AWS.
        # Its Glue table has no local stand-in (Athena is not emulated); tally audit reads the objects themselves.
        if resource.get("Type") != "AWS::S3::Bucket" or not resource_created(template, logical_id):
            continue
        name = f"{stack_name}-{logical_id}".lower()
        s3.create_bucket(Bucket=name)
        physical[logical_id] = name
        arns[logical_id] = f"arn:aws:s3:::{name}"
    functions = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("Type") == "AWS::Serverless::Function" and resource_created(template, logical_id)
    ]
    physical.update({logical_id: f"tally-local-{logical_id}" for logical_id in functions})
    settings = {
        name: value
        for name, value in function_definition(template, functions[0], physical).environment.items()
        if name.startswith("TALLY_")
    }
    outputs = _outputs(template, physical, arns)
    _register_stack(resources.client("cloudformation"), stack_name, template, outputs)
    logger.info("local stack %s: %s", stack_name, outputs)
    return LocalResources(stack_name, template, dynamodb_endpoint, aws_endpoint, physical, arns, outputs, settings)


def _outputs(template: dict[str, Any], physical: Mapping[str, str], arns: Mapping[str, str]) -> dict[str, str]:
    """The template's Outputs (those its Conditions create) with local values: ``!Ref`` and ``!GetAtt .Arn`` of
    the resources the local stack has; outputs of resources it does not emulate (alarms, dashboards) are left out."""
    conditions = condition_values(template)
    references = {**physical, **{f"{logical_id}.Arn": arn for logical_id, arn in arns.items()}}
    outputs: dict[str, str] = {}
    for key, output in resolve(template, references).get("Outputs", {}).items():
        if "Condition" in output and not conditions[output["Condition"]]:
            continue
        if not isinstance(output.get("Value"), str):
            logger.info("output %s has no local value: %r", key, output.get("Value"))
            continue
        outputs[key] = output["Value"]
    return outputs


def _register_stack(cloudformation: Any, stack_name: str, template: dict[str, Any], outputs: Mapping[str, str]) -> None:
    """A stack on the moto server holding the Outputs, and the Parameters it was "deployed" with, so tools
    that look a stack up (``--stack``: resources, and settings such as ``HotKeys``) work locally."""
    values = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    body = {
        "Description": "tally local stack: Outputs and Parameters only (the resources live in DynamoDB Local and moto)",
        "Parameters": {name: {"Type": "String"} for name in values},
        "Resources": {
            _MARKER_RESOURCE: {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": f"/{stack_name}/local", "Type": "String", "Value": "tally local stack"},
            }
        },
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(body),
        Parameters=[{"ParameterKey": name, "ParameterValue": value} for name, value in values.items()],
    )


@contextlib.contextmanager
def handle_termination() -> Iterator[None]:
    """Within the block, SIGTERM ends the program like Ctrl-C: ``KeyboardInterrupt``, so every
    ``finally`` and ``with`` block stops what it started. Only in the main thread (signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


LOCAL_DEFAULTS: Final = {"Source": "Both", "BatchingWindowSeconds": "1", "StreamBatchingWindowSeconds": "1"}
"""What the local stack deploys unless told otherwise: both sources, and batching windows of 1 s (the
template's 20 s are chosen for cost at steady traffic; locally they would hold a first count back 20 s)."""
DEFAULT_NAME: Final = "tally-local"
DOCKER_BRIDGE: Final = "docker0"
ENDPOINT_VARIABLES: Final = (
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_KINESIS",
    "AWS_ENDPOINT_URL_S3",
)
"""The endpoints template.yaml declares (empty) for every function, so ``sam local invoke --env-vars`` can set them
(S3: the archive's bucket on the stack's moto server)."""


def sam_env_vars(resources: LocalResources, dynamodb_endpoint: str, aws_endpoint: str) -> dict[str, dict[str, str]]:
    """The ``sam local invoke --env-vars`` document: per function, the environment the template gives it with
    the local names, and the endpoints a function container reaches the stack at."""
    functions = [name for name in resources.physical_ids if name.endswith("Function")]
    endpoints = dict(zip(ENDPOINT_VARIABLES, (dynamodb_endpoint, *[aws_endpoint] * 3), strict=True))
    return {
        name: {**function_definition(resources.template, name, resources.physical_ids).environment, **endpoints}
        for name in functions
    }


def sam_invoke_command(env_file: Path, function: str, event: str) -> str:
    """The ``sam local invoke`` line for the env-vars file (local credentials: nothing can reach an account)."""
    credentials = " ".join(f"{name}=local" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    return (
        f"{credentials} AWS_REGION=us-east-1 sam local invoke {function} -e {shlex.quote(event)} "
        f"--env-vars {shlex.quote(str(env_file))}"
    )


def shell_lines(resources: LocalResources) -> list[str]:
    """The lines that point a shell at the stack: its exports (``tally stack NAME --env``'s, with the endpoints
    and local credentials), and an ``unset`` of any other stack's variable."""
    return export_lines(resources.stack_name, resources.cli_environment())


def banner(resources: LocalResources, state_dir: Path, sam_line: str | None) -> list[str]:
    """What the stack prints once up: the exports, then commands that work as printed in a shell that ran them."""
    lines = shell_lines(resources)
    lines.append(f"(also in {state_dir / 'env'}: `. {state_dir / 'env'}` in another shell)")
    key = "page:/home"
    to = ["--to", "sqs"] if resources.queue_url is not None and resources.stream_name is not None else []
    publish = shlex.join(["tally", "publish", key, "--stack", resources.stack_name, *to])
    lines += ["then:", f"  {publish}", f"  {shlex.join(['tally', 'get', key])}", "  tally top", "  tally dlq list"]
    if resources.queue_url is not None:
        # AWS CLI v1 ignores AWS_ENDPOINT_URL for SQS: the endpoint is given on the command line.
        body = json.dumps({"id": "aws-cli-1", "key": key, "delta": 1})
        aws = ["aws", "sqs", "send-message", "--endpoint-url", resources.aws_endpoint]
        lines.append("  " + shlex.join([*aws, "--queue-url", resources.queue_url, "--message-body", body]))
    if sam_line is not None:
        lines += ["sam local invoke (after sam build; docs/how-to/sam-local-invoke.md):", f"  {sam_line}"]
    return lines


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


@click.command()
@click.option(
    "--param",
    "parameters",
    multiple=True,
    metavar="NAME=VALUE",
    help="A template parameter override, repeatable (defaults: Source=Both, BatchingWindowSeconds=1, "
    "StreamBatchingWindowSeconds=1).",
)
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path), help="Keep the functions' logs here.")
@click.option(
    "--name",
    default=DEFAULT_NAME,
    show_default=True,
    help="Stack name: tables, queues and stream are named after it, so a restart keeps their names.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65534),
    default=0,
    show_default=True,
    help="DynamoDB on PORT and SQS, Kinesis, CloudFormation on PORT+1, so exports survive a restart "
    "(0: any free ports).",
)
@click.option(
    "--container-host",
    default="auto",
    show_default=True,
    help="Address function containers of sam local invoke reach the stack at: relays listen there "
    f"('auto': the {DOCKER_BRIDGE} address if Docker's bridge exists; 'none': no relays).",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".tally-local"),
    show_default=True,
    help="Where the exports (env) and the sam local invoke environment (sam-env.json) are written, while the stack"
    " runs (removed when it stops).",
)
def main(  # click passes every option by name
    *, parameters: tuple[str, ...], logs: Path | None, name: str, port: int, container_host: str, state_dir: Path
) -> None:
    """Run the local stack and its event source pollers until Ctrl-C; print the exports that point tally at it."""
    overrides = dict(LOCAL_DEFAULTS)
    for parameter in parameters:
        key, separator, value = parameter.partition("=")
        if not separator:
            raise click.ClickException(f"--param {parameter!r}: expected NAME=VALUE")
        overrides[key] = value
    try:  # the template's checks, before anything starts: one line naming what is allowed
        local = LocalStack(overrides, stack_name=name, port=port)
    except ParameterError as exc:
        raise click.ClickException(f"--param {exc}") from exc
    bridge = interface_address(DOCKER_BRIDGE) if container_host == "auto" else None
    relay_host = bridge if container_host == "auto" else (None if container_host == "none" else container_host)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with handle_termination(), contextlib.ExitStack() as stack:
            log_dir = logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tally-local-logs-")))
            resources = stack.enter_context(local)
            mappings = stack.enter_context(EventSourceMappings(resources, log_dir=log_dir))
            stack.enter_context(LocalNotificationsPipe(resources))  # threshold crossings -> moto's EventBridge
            state_dir.mkdir(parents=True, exist_ok=True)
            # What this run writes there lives as long as it does: an earlier stack's files (its ports, its
            # relays) are removed now, this one's when it stops, so none is ever taken for a running stack's.
            written = [state_dir / "env", state_dir / "sam-env.json"]
            for path in written:
                path.unlink(missing_ok=True)
            stack.callback(_remove, written)
            written[0].write_text("".join(f"{line}\n" for line in shell_lines(resources)), encoding="utf-8")
            sam_line = None
            if relay_host is not None:
                # On the bridge address, the same port numbers as on loopback when --port fixes them.
                relays = [
                    stack.enter_context(TcpRelay(endpoint, host=relay_host, port=port + offset if port else 0))
                    for offset, endpoint in enumerate((resources.dynamodb_endpoint, resources.aws_endpoint))
                ]
                env_file = (state_dir / "sam-env.json").resolve()
                document = sam_env_vars(resources, relays[0].endpoint_url, relays[1].endpoint_url)
                env_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
                function = "CounterFunction" if "CounterFunction" in document else next(iter(document))
                event = "events/sqs-single.json" if function == "CounterFunction" else "events/kinesis-single.json"
                sam_line = sam_invoke_command(env_file, function, event)
            click.echo(f"local stack {resources.stack_name} is up ({len(mappings.pollers)} pollers); in another shell:")
            for line in banner(resources, state_dir, sam_line):
                click.echo(line)
            if relay_host is None:
                click.echo(f"sam local invoke: no {DOCKER_BRIDGE} here (Docker not running); see --container-host")
            click.echo(f"function logs: {log_dir}")
            click.echo("press Ctrl-C to stop", nl=True)
            sys.stdout.flush()
            while True:
                mappings.check()
                local.check()
                time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("stopped")
    except DynamoDBLocalError as exc:
        raise click.ClickException(str(exc)) from exc


if __name__ == "__main__":
    main()
