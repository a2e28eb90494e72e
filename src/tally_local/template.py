"""Read ``template.yaml`` so local stand-ins are built from the deployed definitions.

Local DynamoDB tables, local SQS queues and streams, the functions' environments and the local event
source settings all come from the SAM template, never from a second copy of the key schema or the queue
attributes: if the template changes, local tooling and tests follow.

What libraries do here: ``cfn-flip`` parses the YAML with its short-form tags (``!Ref``, ``!GetAtt``...);
aws-sam-translator's ``IntrinsicsResolver`` (the SAM transform's own) resolves ``Ref`` to parameters and
pseudo parameters, ``Fn::Sub`` and, in a second pass as the transform does, ``Fn::FindInMap``.

What stays here, and why: the resolver has no condition functions, so ``Conditions`` are evaluated by a
dozen lines below, and ``Fn::If`` is one more ``Action`` plugged into the resolver; ``AWS::NoValue``
removes its key, as CloudFormation does; ``Ref`` to a resource and ``!GetAtt X.Arn`` resolve only to
local names a caller gives (the stack knows them; CloudFormation would). ``with_parameters`` checks an
override against ``AllowedValues``, ``MinValue``/``MaxValue`` and ``AllowedPattern`` as CloudFormation
does on deploy. The typed views (tables, queues, streams, event sources, functions) read the resolved
template; a value left unresolved raises :class:`ValueError` naming the resource and property. Queues
take every property the template gives as a ``CreateQueue`` attribute (a ``FifoQueue`` needs nothing
here). This module reads; it must not create resources or know tally's item schema.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfn_flip import load_yaml
from samtranslator.intrinsics.actions import Action, FindInMapAction, GetAttAction, RefAction, SubAction
from samtranslator.intrinsics.resolver import IntrinsicsResolver

from tally_local.resources import LOCAL_ACCOUNT, LOCAL_REGION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mypy_boto3_dynamodb import DynamoDBClient

TABLE_TYPE = "AWS::DynamoDB::Table"
QUEUE_TYPE = "AWS::SQS::Queue"
STREAM_TYPE = "AWS::Kinesis::Stream"
FUNCTION_TYPE = "AWS::Serverless::Function"
DEFAULT_FUNCTION = "CounterFunction"
DEFAULT_STREAM_FUNCTION = "StreamCounterFunction"

# SQS defaults that apply when the template leaves a property out.
SQS_DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 30
SQS_DEFAULT_MESSAGE_RETENTION_SECONDS = 345_600
# Lambda SQS event-source defaults.
ESM_DEFAULT_BATCH_SIZE = 10
ESM_DEFAULT_BATCHING_WINDOW_SECONDS = 0
# Lambda Kinesis event-source defaults (-1: retry / keep records until they expire from the stream).
KINESIS_ESM_DEFAULT_BATCH_SIZE = 100
KINESIS_ESM_DEFAULT_RETRY_ATTEMPTS = -1
KINESIS_ESM_DEFAULT_RECORD_AGE_SECONDS = -1
# Kinesis and SAM defaults.
KINESIS_DEFAULT_RETENTION_HOURS = 24
SAM_DEFAULT_TIMEOUT_SECONDS = 3

# DynamoDB Local ignores these; they matter only in AWS and are checked by tests/template.
_TABLE_PROPERTIES_IGNORED_LOCALLY = frozenset(
    {
        "BillingMode",
        "SSESpecification",
        "PointInTimeRecoverySpecification",
        "DeletionProtectionEnabled",
        "TimeToLiveSpecification",
        "Tags",
    }
)
# Queue properties that are not CreateQueue attributes: the local stack names its queues; tags are not kept.
_QUEUE_PROPERTIES_NOT_ATTRIBUTES = frozenset({"QueueName", "Tags"})
_PSEUDO_PARAMETERS = {
    "AWS::Region": LOCAL_REGION,
    "AWS::AccountId": LOCAL_ACCOUNT,
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
}
_NO_VALUE = object()
"""What ``!Ref AWS::NoValue`` resolves to before its key (or list item) is dropped."""


@dataclass(frozen=True, slots=True)
class KeyElement:
    """One element of a table's key schema."""

    attribute_name: str
    key_type: str  # "HASH" or "RANGE"


@dataclass(frozen=True, slots=True)
class AttributeDefinition:
    """A key attribute's name and scalar type ("S", "N" or "B")."""

    attribute_name: str
    attribute_type: str


@dataclass(frozen=True, slots=True)
class TableDefinition:
    """What a local DynamoDB needs to create a table exactly like the template's."""

    logical_id: str
    key_schema: tuple[KeyElement, ...]
    attribute_definitions: tuple[AttributeDefinition, ...]
    ttl_attribute: str | None
    stream_view_type: str | None = None
    """The table's stream (``StreamSpecification``), which DynamoDB Local supports too; None: no stream."""

    def create_table_kwargs(self, table_name: str) -> dict[str, Any]:
        """Keyword arguments for boto3 ``create_table`` (SSE and PITR left out: local ignores them)."""
        return {
            "TableName": table_name,
            "KeySchema": [{"AttributeName": key.attribute_name, "KeyType": key.key_type} for key in self.key_schema],
            "AttributeDefinitions": [
                {"AttributeName": attr.attribute_name, "AttributeType": attr.attribute_type}
                for attr in self.attribute_definitions
            ],
            "BillingMode": "PAY_PER_REQUEST",
            **(
                {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": self.stream_view_type}}
                if self.stream_view_type
                else {}
            ),
        }

    def update_time_to_live_kwargs(self, table_name: str) -> dict[str, Any] | None:
        """Keyword arguments for boto3 ``update_time_to_live``, or None when the table has no TTL."""
        if self.ttl_attribute is None:
            return None
        return {
            "TableName": table_name,
            "TimeToLiveSpecification": {"AttributeName": self.ttl_attribute, "Enabled": True},
        }

    def create(self, client: DynamoDBClient, table_name: str, *, ttl: bool = True) -> None:
        """Create the table as declared on ``client``'s endpoint, wait until it exists, then turn on its TTL
        unless ``ttl`` is False.

        (DynamoDB Local creates a table ACTIVE at once: the waiter's first check returns immediately.) With TTL
        on, DynamoDB Local deletes expired items within seconds (about 20 every 10 s), where AWS takes up to
        days: tests that model TTL by sweeping themselves (``tally_local.chaos.ttl``) create their tables
        without it, so that nothing else deletes an expired item while they look at it.
        """
        client.create_table(**self.create_table_kwargs(table_name))
        client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        ttl_kwargs = self.update_time_to_live_kwargs(table_name)
        if ttl and ttl_kwargs is not None:
            client.update_time_to_live(**ttl_kwargs)


@dataclass(frozen=True, slots=True)
class QueueDefinition:
    """What a local SQS endpoint needs to create a queue like the template's."""

    logical_id: str
    fifo: bool
    visibility_timeout_seconds: int
    message_retention_seconds: int
    dead_letter_target: str | None  # logical id of the redrive target queue
    max_receive_count: int | None
    properties: dict[str, Any] = field(default_factory=dict, compare=False)
    """Every property the template gives the queue, resolved (the redrive target's ARN excepted)."""

    def create_queue_kwargs(self, queue_name: str, dead_letter_target_arn: str | None = None) -> dict[str, Any]:
        """Keyword arguments for boto3 ``create_queue``: each property a queue attribute, as CloudFormation sets it.

        ``dead_letter_target_arn`` is the local ARN of :attr:`dead_letter_target` (create that queue
        first); it is required exactly when the template gives this queue a redrive policy.
        """
        if self.fifo and not queue_name.endswith(".fifo"):
            raise ValueError(f"{self.logical_id}: a FIFO queue name must end in '.fifo', got {queue_name!r}")
        if (self.dead_letter_target is None) != (dead_letter_target_arn is None):
            raise ValueError(
                f"{self.logical_id}: dead_letter_target_arn must be given exactly when the template "
                f"declares a redrive target (template target: {self.dead_letter_target!r})"
            )
        attributes = {
            name: _attribute(value)
            for name, value in self.properties.items()
            if name not in _QUEUE_PROPERTIES_NOT_ATTRIBUTES
        }
        if dead_letter_target_arn is not None:
            attributes["RedrivePolicy"] = json.dumps(
                {**self.properties["RedrivePolicy"], "deadLetterTargetArn": dead_letter_target_arn}
            )
        return {"QueueName": queue_name, "Attributes": attributes}


@dataclass(frozen=True, slots=True)
class SqsEventSource:
    """One ``Type: SQS`` event of a function, with parameters resolved to their defaults."""

    function_logical_id: str
    event_name: str
    queue_logical_id: str
    batch_size: int
    maximum_batching_window_seconds: int
    function_response_types: tuple[str, ...]
    maximum_concurrency: int | None


@dataclass(frozen=True, slots=True)
class StreamDefinition:
    """What a local Kinesis endpoint needs to create a stream like the template's (encryption ignored)."""

    logical_id: str
    on_demand: bool
    shard_count: int | None
    """Shards of a provisioned stream; None on demand (the service decides; moto starts with 4)."""
    retention_hours: int

    def create_stream_kwargs(self, stream_name: str) -> dict[str, Any]:
        """Keyword arguments for boto3 ``create_stream``."""
        if self.on_demand:
            return {"StreamName": stream_name, "StreamModeDetails": {"StreamMode": "ON_DEMAND"}}
        return {
            "StreamName": stream_name,
            "ShardCount": self.shard_count,
            "StreamModeDetails": {"StreamMode": "PROVISIONED"},
        }


@dataclass(frozen=True, slots=True)
class KinesisEventSource:
    """One ``Type: Kinesis`` event of a function, with parameters resolved to their defaults."""

    function_logical_id: str
    event_name: str
    stream_logical_id: str
    starting_position: str
    batch_size: int
    maximum_batching_window_seconds: int
    parallelization_factor: int
    bisect_batch_on_function_error: bool
    maximum_retry_attempts: int
    """-1: retry until the record expires from the stream."""
    maximum_record_age_seconds: int
    """-1: no limit but the stream's retention."""
    function_response_types: tuple[str, ...]
    on_failure_destination: str | None
    """Logical id of the queue that receives a given-up batch's metadata."""


@dataclass(frozen=True, slots=True)
class FunctionDefinition:
    """What a local runtime needs to run a function like Lambda would: its handler, timeout and environment."""

    logical_id: str
    handler: str
    timeout_seconds: int
    environment: dict[str, str]


# --- the template, its parameters and conditions ------------------------------------------------------


def load_template(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template (YAML or JSON, short-form tags included) into plain dicts, a fresh
    copy each call (callers may change it)."""
    status = path.stat()
    plain = json.loads(_template_as_json(str(path.resolve()), status.st_mtime_ns, status.st_size))
    if not isinstance(plain, dict) or not isinstance(plain.get("Resources"), dict):
        raise ValueError(f"{path}: not a CloudFormation template (no Resources mapping)")
    return plain


@functools.lru_cache(maxsize=8)
def _template_as_json(path: str, mtime_ns: int, size: int) -> str:
    """The template at ``path`` as JSON text, parsed once per version of the file (its modification time and
    size are part of the key): the YAML parser is pure Python, 80-100 ms of CPU for template.yaml, and the test
    suite loads the template for hundreds of tests, where ``json.loads`` of the cached text takes under 1 ms.

    cfn_flip returns ODicts; the JSON text gives plain dicts and lists, and dumping fails loudly on anything
    that is not JSON-shaped (dates, binary), which a CloudFormation template never has."""
    del mtime_ns, size  # the cache key only
    return json.dumps(load_yaml(Path(path).read_text(encoding="utf-8")))


def with_parameters(template: dict[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``template`` deployed with ``overrides`` (as ``sam deploy --parameter-overrides``).

    Each override becomes its parameter's ``Default``, so every reader here sees it; it is checked
    against the parameter's ``AllowedValues``, ``MinValue``/``MaxValue`` and ``AllowedPattern`` first,
    as CloudFormation would, so a local stack never runs with a value a deployment would refuse.
    """
    copied = copy.deepcopy(template)
    parameters = _mapping(copied.get("Parameters", {}), "Parameters")
    for name, value in overrides.items():
        if name not in parameters:
            close = difflib.get_close_matches(name, list(parameters), n=1)
            hint = f": did you mean {close[0]}?" if close else " (docs/reference/template.md lists them)"
            raise ParameterError(f"{name} is not a parameter of template.yaml{hint}")
        parameter = _mapping(parameters[name], f"Parameters.{name}")
        _check_parameter(name, parameter, str(value))
        parameter["Default"] = str(value)
    return copied


class ParameterError(ValueError):
    """A parameter override the template (or CloudFormation) would refuse: the message says what is allowed."""


def _check_parameter(name: str, parameter: dict[str, Any], value: str) -> None:
    allowed = parameter.get("AllowedValues")
    if isinstance(allowed, list) and value not in {str(item) for item in allowed}:
        raise ParameterError(f"{name}={value!r} is not one of {', '.join(str(item) for item in allowed)}")
    pattern = parameter.get("AllowedPattern")
    if isinstance(pattern, str) and not re.fullmatch(pattern, value):
        described = parameter.get("ConstraintDescription")
        raise ParameterError(f"{name}={value!r} does not match {pattern}" + (f": {described}" if described else ""))
    if parameter.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            raise ParameterError(f"{name}={value!r} is not a number") from None
        low, high = parameter.get("MinValue"), parameter.get("MaxValue")
        if (low is not None and number < float(low)) or (high is not None and number > float(high)):
            raise ParameterError(f"{name}={value!r} is outside [{low}, {high}]")


def _parameter_values(template: dict[str, Any]) -> dict[str, Any]:
    """Pseudo parameters and every parameter's Default, as the strings CloudFormation passes."""
    parameters = _mapping(template.get("Parameters", {}), "Parameters")
    values: dict[str, Any] = {**_PSEUDO_PARAMETERS, "AWS::NoValue": _NO_VALUE}
    for name, spec in parameters.items():
        if isinstance(spec, dict) and "Default" in spec:
            values[name] = _attribute(spec["Default"])
    return values


def condition_values(template: dict[str, Any]) -> dict[str, bool]:
    """Every entry of ``Conditions``, evaluated with the parameters' Defaults (see ``with_parameters``)."""
    conditions = _mapping(template.get("Conditions", {}), "Conditions")
    refs = IntrinsicsResolver(_parameter_values(template))
    resolved: dict[str, bool] = {}

    def condition(name: object) -> bool:
        if not isinstance(name, str) or name not in conditions:
            raise ValueError(f"Condition {name!r} is not defined")
        if name not in resolved:
            resolved[name] = bool(evaluate(refs.resolve_parameter_refs(copy.deepcopy(conditions[name])), name))
        return resolved[name]

    def evaluate(node: object, where: str) -> object:
        if not isinstance(node, dict):
            return node
        if len(node) != 1:
            raise ValueError(f"Conditions.{where}: expected one condition function, got {node!r}")
        ((function, args),) = node.items()
        if function == "Condition":
            return condition(args)
        if function == "Fn::Equals" and isinstance(args, list) and len(args) == 2:
            left, right = (evaluate(arg, where) for arg in args)
            return _attribute(left) == _attribute(right)
        if function == "Fn::Not" and isinstance(args, list) and len(args) == 1:
            return not evaluate(args[0], where)
        if function in {"Fn::And", "Fn::Or"} and isinstance(args, list):
            values = [bool(evaluate(arg, where)) for arg in args]
            return all(values) if function == "Fn::And" else any(values)
        raise ValueError(f"Conditions.{where}: cannot evaluate {node!r} locally")

    return {name: condition(name) for name in conditions}


def resource_created(template: dict[str, Any], logical_id: str) -> bool:
    """Whether a stack of this template (with its Defaults) creates the resource: its Condition holds."""
    resource = _mapping(_mapping(template.get("Resources"), "Resources").get(logical_id), logical_id)
    name = resource.get("Condition")
    return name is None or condition_values(template)[str(name)]


def resolve(template: dict[str, Any], references: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A copy of ``template`` with what a deployment with its Defaults resolves, resolved.

    ``references`` gives local values for ``!Ref LogicalId`` (key ``LogicalId``) and ``!GetAtt
    LogicalId.Arn`` (key ``LogicalId.Arn``); without one, either is left as it is. Every resource and
    output is kept, whatever its Condition (see :func:`resource_created`).
    """
    values = {**_parameter_values(template), **(references or {})}
    intrinsics: dict[str, Action] = {}
    resolver = IntrinsicsResolver(values, intrinsics)
    conditions = condition_values(template)
    intrinsics.update(  # after the resolver: two of them resolve what they choose with it
        {
            "Ref": RefAction(),
            "Fn::Sub": _Sub(resolver.resolve_parameter_refs),
            "Fn::GetAtt": _GetAtt(),
            "Fn::If": _If(conditions, resolver.resolve_parameter_refs),
        }
    )
    resolved = resolver.resolve_parameter_refs(copy.deepcopy(template))
    # The keys of a FindInMap are Refs, resolved above: so it comes second, as in the SAM transform.
    mappings = IntrinsicsResolver(
        _mapping(template.get("Mappings", {}), "Mappings"), {"Fn::FindInMap": FindInMapAction()}
    )
    mapped = mappings.resolve_parameter_refs(resolved) if template.get("Mappings") else resolved
    result = _without_no_value(mapped)
    assert isinstance(result, dict)
    return result


class _If(Action):  # type: ignore[misc]
    """``Fn::If``: the branch its condition chooses, itself resolved (the resolver goes on with its children)."""

    intrinsic_name = "Fn::If"

    def __init__(self, conditions: Mapping[str, bool], resolve_value: Callable[[Any], Any]) -> None:
        self._conditions = conditions
        self._resolve = resolve_value

    def resolve_parameter_refs(self, input_dict: Any, parameters: dict[str, Any]) -> Any:
        args = input_dict["Fn::If"]
        if not isinstance(args, list) or len(args) != 3 or args[0] not in self._conditions:
            return input_dict  # left for the reader that needs the value to name
        return self._resolve(args[1] if self._conditions[args[0]] else args[2])


class _Sub(SubAction):  # type: ignore[misc]
    """``Fn::Sub`` with its own variables, and unwrapped once nothing is left to substitute."""

    def __init__(self, resolve_value: Callable[[Any], Any]) -> None:
        self._resolve = resolve_value

    def resolve_parameter_refs(self, input_dict: Any, parameters: dict[str, Any]) -> Any:
        args = input_dict["Fn::Sub"]
        if isinstance(args, list) and len(args) == 2 and isinstance(args[1], dict):
            variables = self._resolve(args[1])
            if not all(isinstance(value, str) for value in variables.values()):
                return {"Fn::Sub": [args[0], variables]}  # a variable names something not known locally
            input_dict, parameters = {"Fn::Sub": args[0]}, {**parameters, **variables}
        result = super().resolve_parameter_refs(input_dict, parameters)
        text = result.get("Fn::Sub") if isinstance(result, dict) else None
        if isinstance(text, str) and "${" not in text.replace("${!", ""):
            return text.replace("${!", "${")
        return result


class _GetAtt(GetAttAction):  # type: ignore[misc]
    """``!GetAtt LogicalId.Attribute`` to the value given for ``LogicalId.Attribute``, if any."""

    def resolve_parameter_refs(self, input_dict: Any, parameters: dict[str, Any]) -> Any:
        target = input_dict["Fn::GetAtt"]
        name = ".".join(target) if isinstance(target, list) and all(isinstance(t, str) for t in target) else target
        return parameters.get(name, input_dict) if isinstance(name, str) else input_dict


def _without_no_value(node: object) -> object:
    if isinstance(node, dict):
        return {key: _without_no_value(value) for key, value in node.items() if value is not _NO_VALUE}
    if isinstance(node, list):
        return [_without_no_value(value) for value in node if value is not _NO_VALUE]
    return node


# --- the typed views --------------------------------------------------------------------------------


def table_definitions(template: dict[str, Any]) -> dict[str, TableDefinition]:
    """Every ``AWS::DynamoDB::Table`` of the template, keyed by logical id."""
    tables: dict[str, TableDefinition] = {}
    for where, properties in _resources_of_type(template, TABLE_TYPE):
        unsupported = sorted(
            set(properties)
            - _TABLE_PROPERTIES_IGNORED_LOCALLY
            - {"KeySchema", "AttributeDefinitions", "StreamSpecification"}
        )
        if unsupported:
            raise ValueError(f"{where}: table properties not supported locally: {', '.join(unsupported)}")
        key_schema = tuple(
            KeyElement(_str(element, "AttributeName", f"{where}.KeySchema"), _str(element, "KeyType", where))
            for element in _list(properties, "KeySchema", where)
        )
        attributes = tuple(
            AttributeDefinition(
                _str(element, "AttributeName", f"{where}.AttributeDefinitions"),
                _str(element, "AttributeType", f"{where}.AttributeDefinitions"),
            )
            for element in _list(properties, "AttributeDefinitions", where)
        )
        key_names = {key.attribute_name for key in key_schema}
        defined_names = {attr.attribute_name for attr in attributes}
        if key_names != defined_names:
            raise ValueError(f"{where}: AttributeDefinitions {sorted(defined_names)} != KeySchema {sorted(key_names)}")
        ttl = _mapping(properties.get("TimeToLiveSpecification", {}), f"{where}.TimeToLiveSpecification")
        tables[where] = TableDefinition(
            logical_id=where,
            key_schema=key_schema,
            attribute_definitions=attributes,
            ttl_attribute=_str(ttl, "AttributeName", f"{where}.TimeToLiveSpecification")
            if ttl.get("Enabled")
            else None,
            stream_view_type=_mapping(properties.get("StreamSpecification", {}), where).get("StreamViewType"),
        )
    return tables


def queue_definitions(template: dict[str, Any]) -> dict[str, QueueDefinition]:
    """Every ``AWS::SQS::Queue`` of the template, keyed by logical id."""
    queues: dict[str, QueueDefinition] = {}
    for where, properties in _resources_of_type(template, QUEUE_TYPE):
        dead_letter_target: str | None = None
        max_receive_count: int | None = None
        if "RedrivePolicy" in properties:
            redrive = _mapping(properties["RedrivePolicy"], f"{where}.RedrivePolicy")
            dead_letter_target = _arn_target(redrive.get("deadLetterTargetArn"), f"{where}.RedrivePolicy")
            max_receive_count = _int(redrive, "maxReceiveCount", f"{where}.RedrivePolicy")
        _check_resolved({k: v for k, v in properties.items() if k != "RedrivePolicy"}, where)
        queues[where] = QueueDefinition(
            logical_id=where,
            fifo=_bool(properties, "FifoQueue", where, default=False),
            visibility_timeout_seconds=_int(
                properties, "VisibilityTimeout", where, SQS_DEFAULT_VISIBILITY_TIMEOUT_SECONDS
            ),
            message_retention_seconds=_int(
                properties, "MessageRetentionPeriod", where, SQS_DEFAULT_MESSAGE_RETENTION_SECONDS
            ),
            dead_letter_target=dead_letter_target,
            max_receive_count=max_receive_count,
            properties=properties,
        )
    return queues


def stream_definitions(template: dict[str, Any]) -> dict[str, StreamDefinition]:
    """Every ``AWS::Kinesis::Stream`` of the template, keyed by logical id (whatever its Condition)."""
    streams: dict[str, StreamDefinition] = {}
    for where, properties in _resources_of_type(template, STREAM_TYPE):
        details = _mapping(properties.get("StreamModeDetails", {}), f"{where}.StreamModeDetails")
        mode = _str(details, "StreamMode", f"{where}.StreamModeDetails", default="PROVISIONED")
        if mode not in {"ON_DEMAND", "PROVISIONED"}:
            raise ValueError(f"{where}.StreamMode: expected ON_DEMAND or PROVISIONED, got {mode!r}")
        shard_count = _int(properties, "ShardCount", where, None) if mode == "PROVISIONED" else None
        if mode == "PROVISIONED" and shard_count is None:
            raise ValueError(f"{where}: a PROVISIONED stream needs a ShardCount")
        streams[where] = StreamDefinition(
            logical_id=where,
            on_demand=mode == "ON_DEMAND",
            shard_count=shard_count,
            retention_hours=_int(properties, "RetentionPeriodHours", where, KINESIS_DEFAULT_RETENTION_HOURS),
        )
    return streams


def function_event_sources(
    template: dict[str, Any], function_logical_id: str = DEFAULT_FUNCTION
) -> dict[str, SqsEventSource]:
    """The ``Type: SQS`` events of one ``AWS::Serverless::Function``, keyed by event name."""
    sources: dict[str, SqsEventSource] = {}
    for event_name, properties, where in _function_events(template, function_logical_id, "SQS"):
        scaling = _mapping(properties.get("ScalingConfig", {}), f"{where}.ScalingConfig")
        sources[event_name] = SqsEventSource(
            function_logical_id=function_logical_id,
            event_name=event_name,
            queue_logical_id=_arn_target(properties.get("Queue"), f"{where}.Queue"),
            batch_size=_int(properties, "BatchSize", where, ESM_DEFAULT_BATCH_SIZE),
            maximum_batching_window_seconds=_int(
                properties, "MaximumBatchingWindowInSeconds", where, ESM_DEFAULT_BATCHING_WINDOW_SECONDS
            ),
            function_response_types=_string_list(properties, "FunctionResponseTypes", where),
            maximum_concurrency=_int(scaling, "MaximumConcurrency", f"{where}.ScalingConfig", None),
        )
    return sources


def stream_event_sources(
    template: dict[str, Any], function_logical_id: str = DEFAULT_STREAM_FUNCTION
) -> dict[str, KinesisEventSource]:
    """The ``Type: Kinesis`` events of one ``AWS::Serverless::Function``, keyed by event name."""
    sources: dict[str, KinesisEventSource] = {}
    for event_name, properties, where in _function_events(template, function_logical_id, "Kinesis"):
        destination = _mapping(properties.get("DestinationConfig", {}), f"{where}.DestinationConfig")
        on_failure = _mapping(destination.get("OnFailure", {}), f"{where}.DestinationConfig.OnFailure")
        sources[event_name] = KinesisEventSource(
            function_logical_id=function_logical_id,
            event_name=event_name,
            stream_logical_id=_arn_target(properties.get("Stream"), f"{where}.Stream"),
            starting_position=_str(properties, "StartingPosition", where),
            batch_size=_int(properties, "BatchSize", where, KINESIS_ESM_DEFAULT_BATCH_SIZE),
            maximum_batching_window_seconds=_int(
                properties, "MaximumBatchingWindowInSeconds", where, ESM_DEFAULT_BATCHING_WINDOW_SECONDS
            ),
            parallelization_factor=_int(properties, "ParallelizationFactor", where, 1),
            bisect_batch_on_function_error=_bool(properties, "BisectBatchOnFunctionError", where, default=False),
            maximum_retry_attempts=_int(properties, "MaximumRetryAttempts", where, KINESIS_ESM_DEFAULT_RETRY_ATTEMPTS),
            maximum_record_age_seconds=_int(
                properties, "MaximumRecordAgeInSeconds", where, KINESIS_ESM_DEFAULT_RECORD_AGE_SECONDS
            ),
            function_response_types=_string_list(properties, "FunctionResponseTypes", where),
            on_failure_destination=(
                _arn_target(on_failure["Destination"], f"{where}.DestinationConfig.OnFailure.Destination")
                if "Destination" in on_failure
                else None
            ),
        )
    return sources


def function_definition(
    template: dict[str, Any], logical_id: str, physical_ids: Mapping[str, str]
) -> FunctionDefinition:
    """The function with ``Globals.Function`` applied; ``!Ref Resource`` in its environment becomes
    ``physical_ids[Resource]`` (the local table name, queue URL or stream name)."""
    resolved = resolve(template, physical_ids)
    properties = _properties(resolved, logical_id, FUNCTION_TYPE)
    globals_ = _mapping(_mapping(resolved.get("Globals", {}), "Globals").get("Function", {}), "Globals.Function")
    environment: dict[str, str] = {}
    for source, where in ((globals_, "Globals.Function"), (properties, f"{logical_id}.Properties")):
        variables = _mapping(_mapping(source.get("Environment", {}), where).get("Variables", {}), where)
        for name, value in variables.items():
            if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in resolved["Resources"]:
                raise ValueError(
                    f"{logical_id}.Environment.Variables.{name}: no local resource for !Ref {value['Ref']}"
                )
            environment[name] = _str(variables, name, f"{logical_id}.Environment.Variables")
    return FunctionDefinition(
        logical_id=logical_id,
        handler=_str(properties, "Handler", f"{logical_id}.Properties"),
        timeout_seconds=_int(
            properties,
            "Timeout",
            logical_id,
            _int(globals_, "Timeout", "Globals.Function", SAM_DEFAULT_TIMEOUT_SECONDS),
        ),
        environment=environment,
    )


# --- reading resolved values ------------------------------------------------------------------------


def _resources_of_type(template: dict[str, Any], resource_type: str) -> list[tuple[str, dict[str, Any]]]:
    resolved = resolve(template)
    return [
        (logical_id, _properties(resolved, logical_id, resource_type))
        for logical_id, resource in _mapping(resolved.get("Resources"), "Resources").items()
        if _mapping(resource, logical_id).get("Type") == resource_type
    ]


def _properties(resolved: dict[str, Any], logical_id: str, resource_type: str) -> dict[str, Any]:
    resource = _mapping(resolved["Resources"].get(logical_id), logical_id)
    if resource.get("Type") != resource_type:
        raise ValueError(f"{logical_id}: expected Type {resource_type}, got {resource.get('Type')!r}")
    return _mapping(resource.get("Properties", {}), f"{logical_id}.Properties")


def _function_events(
    template: dict[str, Any], function_logical_id: str, event_type: str
) -> list[tuple[str, dict[str, Any], str]]:
    properties = _properties(resolve(template), function_logical_id, FUNCTION_TYPE)
    events = _mapping(properties.get("Events", {}), f"{function_logical_id}.Events")
    found: list[tuple[str, dict[str, Any], str]] = []
    for event_name, raw_event in events.items():
        where = f"{function_logical_id}.Events.{event_name}"
        event = _mapping(raw_event, where)
        if event.get("Type") == event_type:
            found.append((event_name, _mapping(event.get("Properties"), f"{where}.Properties"), where))
    return found


def _is_intrinsic(value: object) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    (function,) = value
    return function == "Ref" or str(function).startswith("Fn::")


def _check_resolved(value: object, where: str) -> object:
    """``value`` itself, if nothing in it is an intrinsic function left unresolved."""
    if _is_intrinsic(value):
        assert isinstance(value, dict)
        ((function, args),) = value.items()
        if function == "Ref" and isinstance(args, str):
            raise ValueError(
                f"{where}: !Ref {args} is not a template Parameter, or the Parameter has no Default to resolve locally"
            )
        raise ValueError(f"{where}: cannot resolve {value!r} locally")
    for key, item in value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ():
        _check_resolved(item, f"{where}.{key}")
    return value


def _attribute(value: object) -> str:
    """A resolved value as CloudFormation hands it to the service: booleans in lower case, JSON as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or _is_intrinsic(value):
        _check_resolved(value, where)
        raise ValueError(f"{where}: expected a mapping, got {value!r}")
    return value


def _list(properties: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = properties.get(key)
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}.{key}: expected a non-empty literal list, got {value!r}")
    return [_mapping(item, f"{where}.{key}[]") for item in value]


_REQUIRED: Any = object()


def _str(properties: dict[str, Any], key: str, where: str, default: Any = _REQUIRED) -> str:
    value = _check_resolved(properties.get(key, default), f"{where}.{key}")
    if value is _REQUIRED or isinstance(value, dict | list):
        raise ValueError(f"{where}.{key}: expected a string, got {properties.get(key)!r}")
    return _attribute(value)


def _int(properties: dict[str, Any], key: str, where: str, default: Any = _REQUIRED) -> Any:
    """An integer (CloudFormation passes Number parameters as strings), or ``default`` when absent."""
    if key not in properties:
        if default is _REQUIRED:
            raise ValueError(f"{where}.{key}: missing")
        return default
    value = _check_resolved(properties[key], f"{where}.{key}")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().removeprefix("-").isdigit():
        return int(value)
    raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")


def _bool(properties: dict[str, Any], key: str, where: str, *, default: bool) -> bool:
    value = _check_resolved(properties.get(key, default), f"{where}.{key}")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    raise ValueError(f"{where}.{key}: expected a boolean, got {value!r}")


def _string_list(properties: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = _check_resolved(properties.get(key, []), f"{where}.{key}")
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}.{key}: expected a list of strings, got {value!r}")
    return tuple(value)


def _arn_target(value: object, where: str) -> str:
    """The logical id of ``!GetAtt <LogicalId>.Arn`` (left unresolved: no local ARNs given)."""
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        if isinstance(target, list) and len(target) == 2 and target[1] == "Arn" and isinstance(target[0], str):
            return target[0]
    raise ValueError(f"{where}: expected !GetAtt <LogicalId>.Arn, got {value!r}")
