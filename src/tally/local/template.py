"""Read ``template.yaml`` so local stand-ins are built from the deployed definitions.

Local DynamoDB tables, local SQS queues and the local event-source settings all come from the SAM
template, never from a second copy of the key schema or the queue attributes: if the template
changes, local tooling and tests follow.

Only the shapes tally's template uses are understood. Values may be literals, ``!Ref`` to a
Parameter (resolved to its ``Default``) or ``!FindInMap`` whose keys resolve the same way;
anything else raises :class:`ValueError` naming the resource and property.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cfn_flip import load_yaml

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = [
    "AttributeDefinition",
    "FunctionDefinition",
    "KeyElement",
    "KinesisEventSource",
    "QueueDefinition",
    "SqsEventSource",
    "StreamDefinition",
    "TableDefinition",
    "condition_values",
    "function_definition",
    "function_event_sources",
    "load_template",
    "queue_definitions",
    "resource_created",
    "stream_definitions",
    "stream_event_sources",
    "table_definitions",
    "with_parameters",
]

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
        }

    def update_time_to_live_kwargs(self, table_name: str) -> dict[str, Any] | None:
        """Keyword arguments for boto3 ``update_time_to_live``, or None when the table has no TTL."""
        if self.ttl_attribute is None:
            return None
        return {
            "TableName": table_name,
            "TimeToLiveSpecification": {"AttributeName": self.ttl_attribute, "Enabled": True},
        }


@dataclass(frozen=True, slots=True)
class QueueDefinition:
    """What a local SQS endpoint needs to create a queue like the template's."""

    logical_id: str
    fifo: bool
    visibility_timeout_seconds: int
    message_retention_seconds: int
    dead_letter_target: str | None  # logical id of the redrive target queue
    max_receive_count: int | None

    def create_queue_kwargs(self, queue_name: str, dead_letter_target_arn: str | None = None) -> dict[str, Any]:
        """Keyword arguments for boto3 ``create_queue``.

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
            "VisibilityTimeout": str(self.visibility_timeout_seconds),
            "MessageRetentionPeriod": str(self.message_retention_seconds),
        }
        if self.fifo:
            attributes["FifoQueue"] = "true"
        if dead_letter_target_arn is not None:
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": dead_letter_target_arn,
                    "maxReceiveCount": str(self.max_receive_count),
                }
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


def load_template(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template (YAML or JSON, short-form tags included) into plain dicts."""
    document = load_yaml(path.read_text(encoding="utf-8"))
    # cfn_flip returns ODicts; a JSON round trip gives plain dicts and lists, and fails loudly on
    # anything that is not JSON-shaped (dates, binary), which a CloudFormation template never has.
    plain = json.loads(json.dumps(document))
    if not isinstance(plain, dict) or not isinstance(plain.get("Resources"), dict):
        raise ValueError(f"{path}: not a CloudFormation template (no Resources mapping)")
    return plain


def table_definitions(template: dict[str, Any]) -> dict[str, TableDefinition]:
    """Every ``AWS::DynamoDB::Table`` of the template, keyed by logical id."""
    tables: dict[str, TableDefinition] = {}
    for logical_id, properties in _resources_of_type(template, TABLE_TYPE):
        where = logical_id
        unsupported = sorted(
            set(properties) - _TABLE_PROPERTIES_IGNORED_LOCALLY - {"KeySchema", "AttributeDefinitions"}
        )
        if unsupported:
            raise ValueError(f"{where}: table properties not supported locally: {', '.join(unsupported)}")
        key_schema = tuple(
            KeyElement(
                attribute_name=_literal_str(element, "AttributeName", f"{where}.KeySchema"),
                key_type=_literal_str(element, "KeyType", f"{where}.KeySchema"),
            )
            for element in _list(properties, "KeySchema", where)
        )
        attributes = tuple(
            AttributeDefinition(
                attribute_name=_literal_str(element, "AttributeName", f"{where}.AttributeDefinitions"),
                attribute_type=_literal_str(element, "AttributeType", f"{where}.AttributeDefinitions"),
            )
            for element in _list(properties, "AttributeDefinitions", where)
        )
        key_names = {key.attribute_name for key in key_schema}
        defined_names = {attr.attribute_name for attr in attributes}
        if key_names != defined_names:
            raise ValueError(f"{where}: AttributeDefinitions {sorted(defined_names)} != KeySchema {sorted(key_names)}")
        tables[logical_id] = TableDefinition(
            logical_id=logical_id,
            key_schema=key_schema,
            attribute_definitions=attributes,
            ttl_attribute=_ttl_attribute(properties, where),
        )
    return tables


def queue_definitions(template: dict[str, Any]) -> dict[str, QueueDefinition]:
    """Every ``AWS::SQS::Queue`` of the template, keyed by logical id."""
    queues: dict[str, QueueDefinition] = {}
    for logical_id, properties in _resources_of_type(template, QUEUE_TYPE):
        where = logical_id
        dead_letter_target: str | None = None
        max_receive_count: int | None = None
        if "RedrivePolicy" in properties:
            redrive = _mapping(properties["RedrivePolicy"], f"{where}.RedrivePolicy")
            dead_letter_target = _get_att_arn_target(
                redrive.get("deadLetterTargetArn"), f"{where}.RedrivePolicy.deadLetterTargetArn"
            )
            max_receive_count = _resolve_int(
                template, redrive.get("maxReceiveCount"), f"{where}.RedrivePolicy.maxReceiveCount"
            )
        queues[logical_id] = QueueDefinition(
            logical_id=logical_id,
            fifo=_resolve(template, properties.get("FifoQueue", False), f"{where}.FifoQueue") in (True, "true"),
            visibility_timeout_seconds=_resolve_int(
                template,
                properties.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
                f"{where}.VisibilityTimeout",
            ),
            message_retention_seconds=_resolve_int(
                template,
                properties.get("MessageRetentionPeriod", SQS_DEFAULT_MESSAGE_RETENTION_SECONDS),
                f"{where}.MessageRetentionPeriod",
            ),
            dead_letter_target=dead_letter_target,
            max_receive_count=max_receive_count,
        )
    return queues


def function_event_sources(
    template: dict[str, Any], function_logical_id: str = DEFAULT_FUNCTION
) -> dict[str, SqsEventSource]:
    """The ``Type: SQS`` events of one ``AWS::Serverless::Function``, keyed by event name."""
    resource = _mapping(template["Resources"].get(function_logical_id), function_logical_id)
    if resource.get("Type") != FUNCTION_TYPE:
        raise ValueError(f"{function_logical_id}: expected Type {FUNCTION_TYPE}, got {resource.get('Type')!r}")
    properties = _mapping(resource.get("Properties", {}), f"{function_logical_id}.Properties")
    events = _mapping(properties.get("Events", {}), f"{function_logical_id}.Events")
    sources: dict[str, SqsEventSource] = {}
    for event_name, raw_event in events.items():
        where = f"{function_logical_id}.Events.{event_name}"
        event = _mapping(raw_event, where)
        if event.get("Type") != "SQS":
            continue
        event_properties = _mapping(event.get("Properties"), f"{where}.Properties")
        scaling = _mapping(event_properties.get("ScalingConfig", {}), f"{where}.ScalingConfig")
        response_types = event_properties.get("FunctionResponseTypes", [])
        if not isinstance(response_types, list) or not all(isinstance(t, str) for t in response_types):
            raise ValueError(f"{where}.FunctionResponseTypes: expected a list of strings, got {response_types!r}")
        sources[event_name] = SqsEventSource(
            function_logical_id=function_logical_id,
            event_name=event_name,
            queue_logical_id=_get_att_arn_target(event_properties.get("Queue"), f"{where}.Queue", template),
            batch_size=_resolve_int(
                template, event_properties.get("BatchSize", ESM_DEFAULT_BATCH_SIZE), f"{where}.BatchSize"
            ),
            maximum_batching_window_seconds=_resolve_int(
                template,
                event_properties.get("MaximumBatchingWindowInSeconds", ESM_DEFAULT_BATCHING_WINDOW_SECONDS),
                f"{where}.MaximumBatchingWindowInSeconds",
            ),
            function_response_types=tuple(response_types),
            maximum_concurrency=(
                _resolve_int(template, scaling["MaximumConcurrency"], f"{where}.ScalingConfig.MaximumConcurrency")
                if "MaximumConcurrency" in scaling
                else None
            ),
        )
    return sources


# --- parameters, conditions, streams and functions --------------------------------------------------


def with_parameters(template: dict[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``template`` deployed with ``overrides`` (as ``sam deploy --parameter-overrides``).

    Each override becomes its parameter's ``Default``, so every resolver here sees it; it is checked
    against the parameter's ``AllowedValues``, ``MinValue``/``MaxValue`` and ``AllowedPattern`` first,
    as CloudFormation would, so a local stack never runs with a value a deployment would refuse.
    """
    copied = copy.deepcopy(template)
    parameters = _mapping(copied.get("Parameters", {}), "Parameters")
    for name, value in overrides.items():
        if name not in parameters:
            raise ValueError(f"{name} is not a template Parameter")
        parameter = _mapping(parameters[name], f"Parameters.{name}")
        _check_parameter(name, parameter, str(value))
        parameter["Default"] = str(value)
    return copied


def _check_parameter(name: str, parameter: dict[str, Any], value: str) -> None:
    allowed = parameter.get("AllowedValues")
    if isinstance(allowed, list) and value not in {str(item) for item in allowed}:
        raise ValueError(f"{name}={value!r} is not one of {allowed}")
    pattern = parameter.get("AllowedPattern")
    if isinstance(pattern, str) and not re.fullmatch(pattern, value):
        raise ValueError(f"{name}={value!r} does not match {pattern}")
    if parameter.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a number") from None
        low, high = parameter.get("MinValue"), parameter.get("MaxValue")
        if (low is not None and number < float(low)) or (high is not None and number > float(high)):
            raise ValueError(f"{name}={value!r} is outside [{low}, {high}]")


def condition_values(template: dict[str, Any]) -> dict[str, bool]:
    """Every entry of ``Conditions``, evaluated with the parameters' Defaults (see ``with_parameters``)."""
    conditions = _mapping(template.get("Conditions", {}), "Conditions")
    resolved: dict[str, bool] = {}

    def condition(name: str) -> bool:
        if name not in conditions:
            raise ValueError(f"Condition {name!r} is not defined")
        if name not in resolved:
            resolved[name] = bool(evaluate(conditions[name], f"Conditions.{name}"))
        return resolved[name]

    def evaluate(node: object, where: str) -> object:
        if not isinstance(node, dict):
            return node
        if len(node) != 1:
            raise ValueError(f"{where}: expected one condition function, got {node!r}")
        ((function, args),) = node.items()
        if function == "Condition" and isinstance(args, str):
            return condition(args)
        if function == "Ref":
            return _resolve(template, node, where)
        if not isinstance(args, list):
            raise ValueError(f"{where}: {function} needs a list, got {args!r}")
        if function == "Fn::Equals" and len(args) == 2:
            left, right = (evaluate(arg, where) for arg in args)
            return str(left) == str(right)
        if function == "Fn::Not" and len(args) == 1:
            return not evaluate(args[0], where)
        if function == "Fn::And":
            return all(evaluate(arg, where) for arg in args)
        if function == "Fn::Or":
            return any(evaluate(arg, where) for arg in args)
        raise ValueError(f"{where}: condition function {function} not understood locally")

    return {name: condition(name) for name in conditions}


def resource_created(template: dict[str, Any], logical_id: str) -> bool:
    """Whether a stack of this template (with its Defaults) creates the resource: its Condition holds."""
    resource = _mapping(_mapping(template.get("Resources"), "Resources").get(logical_id), logical_id)
    name = resource.get("Condition")
    return name is None or condition_values(template)[str(name)]


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


def stream_definitions(template: dict[str, Any]) -> dict[str, StreamDefinition]:
    """Every ``AWS::Kinesis::Stream`` of the template, keyed by logical id (whatever its Condition)."""
    streams: dict[str, StreamDefinition] = {}
    for logical_id, properties in _resources_of_type(template, STREAM_TYPE):
        where = logical_id
        details = _mapping(properties.get("StreamModeDetails", {}), f"{where}.StreamModeDetails")
        mode = str(_resolve(template, details.get("StreamMode", "PROVISIONED"), f"{where}.StreamMode"))
        if mode not in {"ON_DEMAND", "PROVISIONED"}:
            raise ValueError(f"{where}.StreamMode: expected ON_DEMAND or PROVISIONED, got {mode!r}")
        raw_shards = _resolve(template, properties.get("ShardCount"), f"{where}.ShardCount")
        shard_count = None if raw_shards is None else _resolve_int(template, raw_shards, f"{where}.ShardCount")
        if mode == "PROVISIONED" and shard_count is None:
            raise ValueError(f"{where}: a PROVISIONED stream needs a ShardCount")
        streams[logical_id] = StreamDefinition(
            logical_id=logical_id,
            on_demand=mode == "ON_DEMAND",
            shard_count=None if mode == "ON_DEMAND" else shard_count,
            retention_hours=_resolve_int(
                template,
                properties.get("RetentionPeriodHours", KINESIS_DEFAULT_RETENTION_HOURS),
                f"{where}.RetentionPeriodHours",
            ),
        )
    return streams


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
            stream_logical_id=_get_att_arn_target(properties.get("Stream"), f"{where}.Stream", template),
            starting_position=str(_resolve(template, properties.get("StartingPosition"), f"{where}.StartingPosition")),
            batch_size=_resolve_int(
                template, properties.get("BatchSize", KINESIS_ESM_DEFAULT_BATCH_SIZE), f"{where}.BatchSize"
            ),
            maximum_batching_window_seconds=_resolve_int(
                template,
                properties.get("MaximumBatchingWindowInSeconds", ESM_DEFAULT_BATCHING_WINDOW_SECONDS),
                f"{where}.MaximumBatchingWindowInSeconds",
            ),
            parallelization_factor=_resolve_int(
                template, properties.get("ParallelizationFactor", 1), f"{where}.ParallelizationFactor"
            ),
            bisect_batch_on_function_error=_resolve_bool(
                template, properties.get("BisectBatchOnFunctionError", False), f"{where}.BisectBatchOnFunctionError"
            ),
            maximum_retry_attempts=_resolve_int(
                template,
                properties.get("MaximumRetryAttempts", KINESIS_ESM_DEFAULT_RETRY_ATTEMPTS),
                f"{where}.MaximumRetryAttempts",
            ),
            maximum_record_age_seconds=_resolve_int(
                template,
                properties.get("MaximumRecordAgeInSeconds", KINESIS_ESM_DEFAULT_RECORD_AGE_SECONDS),
                f"{where}.MaximumRecordAgeInSeconds",
            ),
            function_response_types=_string_list(properties, "FunctionResponseTypes", where),
            on_failure_destination=(
                _get_att_arn_target(
                    on_failure["Destination"], f"{where}.DestinationConfig.OnFailure.Destination", template
                )
                if "Destination" in on_failure
                else None
            ),
        )
    return sources


@dataclass(frozen=True, slots=True)
class FunctionDefinition:
    """What a local runtime needs to run a function like Lambda would: its handler, timeout and environment."""

    logical_id: str
    handler: str
    timeout_seconds: int
    environment: dict[str, str]


def function_definition(
    template: dict[str, Any], logical_id: str, physical_ids: Mapping[str, str]
) -> FunctionDefinition:
    """The function with ``Globals.Function`` applied; ``!Ref Resource`` in its environment becomes
    ``physical_ids[Resource]`` (the local table name, queue URL or stream name)."""
    resource = _mapping(template["Resources"].get(logical_id), logical_id)
    if resource.get("Type") != FUNCTION_TYPE:
        raise ValueError(f"{logical_id}: expected Type {FUNCTION_TYPE}, got {resource.get('Type')!r}")
    properties = _mapping(resource.get("Properties", {}), f"{logical_id}.Properties")
    globals_ = _mapping(_mapping(template.get("Globals", {}), "Globals").get("Function", {}), "Globals.Function")
    variables: dict[str, Any] = {}
    for source, where in ((globals_, "Globals.Function"), (properties, f"{logical_id}.Properties")):
        environment = _mapping(source.get("Environment", {}), f"{where}.Environment")
        variables.update(_mapping(environment.get("Variables", {}), f"{where}.Environment.Variables"))
    resources = _mapping(template.get("Resources"), "Resources")
    environment_values: dict[str, str] = {}
    for name, value in variables.items():
        where = f"{logical_id}.Environment.Variables.{name}"
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in resources:
            if value["Ref"] not in physical_ids:
                raise ValueError(f"{where}: no local resource for !Ref {value['Ref']}")
            environment_values[name] = physical_ids[value["Ref"]]
        else:
            environment_values[name] = str(_resolve(template, value, where))
    timeout = properties.get("Timeout", globals_.get("Timeout", SAM_DEFAULT_TIMEOUT_SECONDS))
    return FunctionDefinition(
        logical_id=logical_id,
        handler=_literal_str(properties, "Handler", f"{logical_id}.Properties"),
        timeout_seconds=_resolve_int(template, timeout, f"{logical_id}.Timeout"),
        environment=environment_values,
    )


def _function_events(
    template: dict[str, Any], function_logical_id: str, event_type: str
) -> list[tuple[str, dict[str, Any], str]]:
    resource = _mapping(template["Resources"].get(function_logical_id), function_logical_id)
    if resource.get("Type") != FUNCTION_TYPE:
        raise ValueError(f"{function_logical_id}: expected Type {FUNCTION_TYPE}, got {resource.get('Type')!r}")
    properties = _mapping(resource.get("Properties", {}), f"{function_logical_id}.Properties")
    events = _mapping(properties.get("Events", {}), f"{function_logical_id}.Events")
    found: list[tuple[str, dict[str, Any], str]] = []
    for event_name, raw_event in events.items():
        where = f"{function_logical_id}.Events.{event_name}"
        event = _mapping(raw_event, where)
        if event.get("Type") == event_type:
            found.append((event_name, _mapping(event.get("Properties"), f"{where}.Properties"), where))
    return found


def _string_list(properties: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = properties.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}.{key}: expected a list of strings, got {value!r}")
    return tuple(value)


# --- resolution helpers ---------------------------------------------------------------------------


def _resources_of_type(template: dict[str, Any], resource_type: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for logical_id, raw in _mapping(template.get("Resources"), "Resources").items():
        resource = _mapping(raw, logical_id)
        if resource.get("Type") == resource_type:
            found.append((logical_id, _mapping(resource.get("Properties", {}), f"{logical_id}.Properties")))
    return found


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping, got {value!r}")
    return value


def _list(properties: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = properties.get(key)
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}.{key}: expected a non-empty literal list, got {value!r}")
    return [_mapping(item, f"{where}.{key}[]") for item in value]


def _literal_str(element: dict[str, Any], key: str, where: str) -> str:
    value = element.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key}: expected a literal string, got {value!r}")
    return value


def _ttl_attribute(properties: dict[str, Any], where: str) -> str | None:
    if "TimeToLiveSpecification" not in properties:
        return None
    spec = _mapping(properties["TimeToLiveSpecification"], f"{where}.TimeToLiveSpecification")
    if spec.get("Enabled") is not True:
        return None
    return _literal_str(spec, "AttributeName", f"{where}.TimeToLiveSpecification")


def _get_att_arn_target(value: object, where: str, template: dict[str, Any] | None = None) -> str:
    """Logical id from ``!GetAtt X.Arn`` (short form) or ``{"Fn::GetAtt": ["X", "Arn"]}``, or from the
    branch of an ``!If`` the template's conditions take (``!If [HasExistingQueue, !Ref ..., !GetAtt ...]``:
    the local stack always creates its own source)."""
    if template is not None and isinstance(value, dict) and set(value) == {"Fn::If"}:
        args = value["Fn::If"]
        if isinstance(args, list) and len(args) == 3 and isinstance(args[0], str):
            return _get_att_arn_target(args[1] if condition_values(template)[args[0]] else args[2], where, template)
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        if isinstance(target, str):
            target = target.split(".", 1)
        if isinstance(target, list) and len(target) == 2 and target[1] == "Arn" and isinstance(target[0], str):
            return target[0]
    raise ValueError(f"{where}: expected !GetAtt <LogicalId>.Arn, got {value!r}")


def _resolve(template: dict[str, Any], value: object, where: str) -> object:
    """Resolve a literal, ``!Ref Parameter`` (its Default) or ``!FindInMap`` of resolvable keys."""
    if not isinstance(value, dict):
        return value
    if value == {"Ref": "AWS::NoValue"}:
        return None
    if set(value) == {"Fn::If"}:
        args = value["Fn::If"]
        if not isinstance(args, list) or len(args) != 3 or not isinstance(args[0], str):
            raise ValueError(f"{where}: !If needs [Condition, ValueIfTrue, ValueIfFalse], got {args!r}")
        chosen = args[1] if condition_values(template)[args[0]] else args[2]
        return _resolve(template, chosen, where)
    if set(value) == {"Ref"}:
        name = value["Ref"]
        parameters = _mapping(template.get("Parameters", {}), "Parameters")
        if not isinstance(name, str) or name not in parameters:
            raise ValueError(f"{where}: !Ref {name!r} is not a template Parameter")
        parameter = _mapping(parameters[name], f"Parameters.{name}")
        if "Default" not in parameter:
            raise ValueError(f"{where}: Parameter {name} has no Default to resolve locally")
        return parameter["Default"]
    if set(value) == {"Fn::FindInMap"}:
        args = value["Fn::FindInMap"]
        if not isinstance(args, list) or len(args) != 3:
            raise ValueError(f"{where}: !FindInMap needs [MapName, TopLevelKey, SecondLevelKey], got {args!r}")
        map_name, top_key, second_key = (str(_resolve(template, arg, where)) for arg in args)
        mappings = _mapping(template.get("Mappings", {}), "Mappings")
        try:
            return mappings[map_name][top_key][second_key]
        except (KeyError, TypeError):
            raise ValueError(f"{where}: !FindInMap [{map_name}, {top_key}, {second_key}] is not in Mappings") from None
    raise ValueError(f"{where}: cannot resolve {value!r} locally (only literals, !Ref Parameter, !FindInMap, !If)")


def _resolve_int(template: dict[str, Any], value: object, where: str) -> int:
    resolved = _resolve(template, value, where)
    if isinstance(resolved, bool):
        raise ValueError(f"{where}: expected an integer, got {resolved!r}")
    if isinstance(resolved, int):
        return resolved
    if isinstance(resolved, str) and resolved.strip().removeprefix("-").isdigit():
        return int(resolved)
    raise ValueError(f"{where}: expected an integer, got {resolved!r}")


def _resolve_bool(template: dict[str, Any], value: object, where: str) -> bool:
    resolved = _resolve(template, value, where)
    if isinstance(resolved, bool):
        return resolved
    if isinstance(resolved, str) and resolved.lower() in {"true", "false"}:
        return resolved.lower() == "true"
    raise ValueError(f"{where}: expected a boolean, got {resolved!r}")
