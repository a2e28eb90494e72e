"""The IAM contract: the calls tally makes, as IAM actions on ARNs, against the policies template.yaml grants.

AWS authorises every call; DynamoDB Local and moto authorise none. This module turns the recorded calls
(``tally_local.kit.calls``) into the IAM requests AWS would evaluate and checks them against:

- the function roles SAM generates (aws-sam-translator), with the AWS managed policies SAM attaches
  (vendored in ``tests/template/data/aws_managed_policies.json``) and the calls Lambda itself makes with
  the role (the event source poller, the Kinesis on-failure destination, logs, X-Ray);
- the operator's managed policy (``OperatorPolicy``), for the ``tally`` command;
- the producers' and readers' managed policies (``ProducerPolicy``, ``ReaderPolicy``), for the libraries an
  application embeds (``tally.producer``, ``tally.reader``), and the read endpoint's role.

The policies are evaluated by moto's evaluator (``moto.iam.access_control.IAMPolicy``: Allow/Deny,
Action/NotAction, ``*`` wildcards in actions and resources; no NotResource and no ``?``, which the template
does not use: ``check_supported`` refuses a policy that does). ``!GetAtt``/``!Ref``/``!Sub``/``!If`` are
resolved to fake ARNs in account 123456789012, us-east-1, each resource's physical name being its logical
id. Which template resource a test's table or queue stands for is decided by the template itself: a table
by its key schema (from the test's ``CreateTable`` or the request's key attributes), a queue, stream or
stack by what the call site does with it (see ``_bind``).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, PermissionResult

from tally_local.kit.calls import FUNCTION, OPERATOR, PRODUCER, READ_FUNCTION, READER, Call, Recording, Target
from tests.template.conditions import evaluate_conditions, parameter_values, prune

if TYPE_CHECKING:
    from collections.abc import Iterable

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
STACK_NAME = "tally"
STACK_ID = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK_NAME}/0b6e4a30-0000-4000-8000-000000000000"
MANAGED_POLICIES = Path(__file__).resolve().parents[1] / "template" / "data" / "aws_managed_policies.json"

COUNTERS, MARKERS, QUEUE, DLQ, STREAM = (
    "CountersTable",
    "MarkersTable",
    "EventsQueue",
    "EventsDeadLetterQueue",
    "EventStream",
)
OPERATOR_POLICY = "OperatorPolicy"
# The policies for an application's producers and readers, and the read endpoint's function.
PRODUCER_POLICY, READER_POLICY, READ_FUNCTION_ID = "ProducerPolicy", "ReaderPolicy", "ReadFunction"
STACK = "AWS::StackId"  # the stack itself, as a "resource" of cloudformation:Describe*
FAILURE_BUCKET = "StreamFailureBucket"
ARCHIVE_BUCKET = "ArchiveBucket"
# The sources a team already owns, by ARN (a fake account's, as the stack's resources are).
EXISTING_QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:owners-events"
EXISTING_STREAM_ARN = f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/owners-events"
# Each configuration the contract is evaluated for: a name and its parameter overrides. The three Sources,
# then the choices for an existing account (a FIFO queue, sources the team owns, given-up batches whole in S3).
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "SQS": {"Source": "SQS"},
    "Kinesis": {"Source": "Kinesis"},
    "Both": {"Source": "Both"},
    "SQS FIFO": {"Source": "SQS", "QueueType": "FIFO", "BatchSize": "10", "BatchingWindowSeconds": "0"},
    "Both, existing queue and stream": {
        "Source": "Both",
        "ExistingQueueArn": EXISTING_QUEUE_ARN,
        "ExistingStreamArn": EXISTING_STREAM_ARN,
    },
    "Kinesis, failures to S3": {"Source": "Kinesis", "StreamFailureDestination": "S3"},
    "Both, existing stream, failures to S3": {
        "Source": "Both",
        "ExistingStreamArn": EXISTING_STREAM_ARN,
        "StreamFailureDestination": "S3",
    },
}
SOURCES = tuple(CONFIGURATIONS)
# A source the stack consumes but does not create: the parameter holding its ARN.
_EXISTING = {QUEUE: "ExistingQueueArn", STREAM: "ExistingStreamArn"}

# --- operations -> IAM actions --------------------------------------------------------------------------

_DYNAMODB_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_DYNAMODB_PLAIN = {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable"}
_SQS_ACTIONS = {
    "SendMessage": "SendMessage",
    "SendMessageBatch": "SendMessage",
    "ReceiveMessage": "ReceiveMessage",
    "DeleteMessage": "DeleteMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibility": "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    "GetQueueUrl": "GetQueueUrl",
    "GetQueueAttributes": "GetQueueAttributes",
}
_KINESIS_ACTIONS = {
    "PutRecord",
    "PutRecords",
    "GetRecords",
    "GetShardIterator",
    "DescribeStream",
    "DescribeStreamSummary",
    "ListShards",
}
_CLOUDFORMATION_ACTIONS = {"DescribeStacks", "DescribeStackResource", "DescribeStackResources", "ListStackResources"}
# S3 (the failure bucket of given-up Kinesis batches): an object operation is authorised on the object's ARN.
_S3_BUCKET_ACTIONS = {"ListObjectsV2": "ListBucket", "ListObjects": "ListBucket"}
_S3_OBJECT_ACTIONS = {"GetObject": "GetObject", "DeleteObject": "DeleteObject", "PutObject": "PutObject"}
# The operator's SQS calls: reading and deleting are on the dead-letter queue, sending (a redrive, a publish)
# on the stack's source queue. The function sends only to the dead-letter queue (tally.dead_letter_sender).
_OPERATOR_DLQ_OPERATIONS = {
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "GetQueueAttributes",
}


@dataclass(frozen=True, order=True)
class Requirement:
    """One IAM request AWS would evaluate: ``action`` on ``resource``, and what made it (for the report)."""

    action: str
    resource: str
    origin: str


@dataclass
class Requirements:
    """The IAM requests of some calls, and the calls that could not be mapped (each a failure)."""

    needed: list[Requirement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# --- the template ---------------------------------------------------------------------------------------


def _attributes(logical_id: str, resource_type: str) -> dict[str, str]:
    """Ref and GetAtt values of a resource whose physical name is its logical id."""
    arn = f"arn:{PARTITION}"
    if resource_type == "AWS::DynamoDB::Table":
        return {"Ref": logical_id, "Arn": f"{arn}:dynamodb:{REGION}:{ACCOUNT}:table/{logical_id}"}
    if resource_type == "AWS::SQS::Queue":
        return {
            "Ref": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{logical_id}",
            "Arn": f"{arn}:sqs:{REGION}:{ACCOUNT}:{logical_id}",
            "QueueName": logical_id,
        }
    if resource_type == "AWS::Kinesis::Stream":
        return {"Ref": logical_id, "Arn": f"{arn}:kinesis:{REGION}:{ACCOUNT}:stream/{logical_id}"}
    if resource_type == "AWS::Logs::LogGroup":
        return {"Ref": logical_id, "Arn": f"{arn}:logs:{REGION}:{ACCOUNT}:log-group:{logical_id}:*"}
    if resource_type == "AWS::SNS::Topic":
        return {"Ref": f"{arn}:sns:{REGION}:{ACCOUNT}:{logical_id}", "TopicName": logical_id}
    if resource_type == "AWS::KMS::Key":
        return {"Ref": logical_id, "Arn": f"{arn}:kms:{REGION}:{ACCOUNT}:key/{logical_id}", "KeyId": logical_id}
    if resource_type == "AWS::Lambda::Function":
        return {"Ref": logical_id, "Arn": f"{arn}:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"}
    if resource_type == "AWS::IAM::ManagedPolicy":
        return {"Ref": f"{arn}:iam::{ACCOUNT}:policy/{logical_id}"}
    if resource_type == "AWS::S3::Bucket":
        return {"Ref": logical_id, "Arn": f"{arn}:s3:::{logical_id}"}
    return {"Ref": logical_id, "Arn": f"{arn}:unknown:{REGION}:{ACCOUNT}:{logical_id}"}


_NO_VALUE = object()


class Stack:
    """A transformed template for one set of parameter values: what exists, with intrinsics resolved."""

    def __init__(self, transformed: dict[str, Any], values: dict[str, str]) -> None:
        self.values = values
        self.conditions = evaluate_conditions(transformed, values)
        self.template = prune(transformed, values)
        self.resources: dict[str, Any] = self.template["Resources"]
        self.pseudo = {
            "AWS::AccountId": ACCOUNT,
            "AWS::Region": REGION,
            "AWS::Partition": PARTITION,
            "AWS::StackName": STACK_NAME,
            "AWS::StackId": STACK_ID,
            "AWS::URLSuffix": "amazonaws.com",
        }

    def attribute(self, logical_id: str, name: str = "Ref") -> str:
        if logical_id in self.pseudo and name == "Ref":
            return self.pseudo[logical_id]
        if logical_id in self.values and name == "Ref":
            return self.values[logical_id]
        return _attributes(logical_id, self.resources[logical_id]["Type"])[name]

    def arn(self, logical_id: str) -> str:
        if logical_id == STACK:
            return STACK_ID
        if logical_id not in self.resources and self.values.get(_EXISTING.get(logical_id, ""), ""):
            return self.values[_EXISTING[logical_id]]  # the team's own queue or stream
        return self.attribute(logical_id, "Arn")

    def exists(self, logical_id: str) -> bool:
        """In the stack, or consumed by it (a queue or stream given by ARN)."""
        existing = _EXISTING.get(logical_id)
        consumed = existing is not None and bool(self.values.get(existing)) and self._consumes(logical_id)
        return logical_id == STACK or logical_id in self.resources or consumed

    def _consumes(self, logical_id: str) -> bool:
        return self.conditions["UseSqs" if logical_id == QUEUE else "UseKinesis"]

    def resolve(self, node: Any) -> Any:
        """``node`` with every intrinsic function replaced by its value (``AWS::NoValue`` entries dropped)."""
        if isinstance(node, list):
            return [value for value in (self.resolve(item) for item in node) if value is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, args),) = node.items()
            if key == "Ref":
                return _NO_VALUE if args == "AWS::NoValue" else self.attribute(args)
            if key == "Fn::GetAtt":
                logical_id, name = args if isinstance(args, list) else args.split(".", 1)
                return self.attribute(logical_id, name)
            if key == "Fn::If":
                condition, when_true, when_false = args
                return self.resolve(when_true if self.conditions[condition] else when_false)
            if key == "Fn::Sub":
                text, variables = (args, {}) if isinstance(args, str) else args
                values = {name: self.resolve(value) for name, value in variables.items()}

                def substitute(match: re.Match[str]) -> str:
                    name = match.group(1)
                    if name in values:
                        return str(values[name])
                    if "." in name and not name.startswith("AWS::"):
                        logical_id, attribute = name.split(".", 1)
                        return self.attribute(logical_id, attribute)
                    return self.attribute(name)

                return re.sub(r"\$\{([^}!]+)\}", substitute, text)
            if key == "Fn::Join":
                separator, items = args
                return separator.join(str(item) for item in self.resolve(items))
            if key == "Fn::Split":
                separator, text = args
                return str(self.resolve(text)).split(separator)
            if key == "Fn::Select":
                index, items = args
                return self.resolve(items)[int(index)]
            if key.startswith("Fn::"):
                raise AssertionError(f"intrinsic {key} not understood by the IAM contract's resolver")
        return {key: value for key, value in ((k, self.resolve(v)) for k, v in node.items()) if value is not _NO_VALUE}


def check_supported(document: dict[str, Any]) -> None:
    """Refuse what moto's evaluator would get wrong rather than let it answer wrongly."""
    statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
    for statement in statements:
        unsupported = {"NotResource", "NotPrincipal"} & set(statement)
        if unsupported:
            raise AssertionError(f"{sorted(unsupported)} in {statement}: not evaluated by the IAM contract")
        for element in ("Action", "NotAction", "Resource"):
            values = statement.get(element, [])
            for value in [values] if isinstance(values, str) else values:
                if "?" in value:
                    raise AssertionError(f"'?' wildcard in {statement}: not evaluated by the IAM contract")


def managed_policy_documents() -> dict[str, dict[str, Any]]:
    """ARN -> policy document of the vendored AWS managed policies."""
    data = json.loads(MANAGED_POLICIES.read_text(encoding="utf-8"))
    return {policy["Arn"]: policy["Document"] for policy in data["policies"].values()}


@dataclass(frozen=True)
class Grantee:
    """A role (or the operator's managed policy) and the policy documents it holds, resolved."""

    name: str
    inline: tuple[tuple[str, dict[str, Any]], ...]  # (policy name, document)
    managed: tuple[tuple[str, dict[str, Any]], ...]  # (ARN, document)

    def documents(self) -> list[dict[str, Any]]:
        return [document for _, document in (*self.inline, *self.managed)]

    def allows(self, action: str, resource: str) -> bool:
        """IAM's rule for one identity's policies: allowed if some statement allows and none denies."""
        results = [
            IAMPolicy(json.dumps(document)).is_action_permitted(action, resource) for document in self.documents()
        ]
        return PermissionResult.DENIED not in results and PermissionResult.PERMITTED in results


def role_grantee(stack: Stack, role_id: str) -> Grantee:
    properties = stack.resolve(stack.resources[role_id]["Properties"])
    managed = managed_policy_documents()
    unknown = [arn for arn in properties.get("ManagedPolicyArns", []) if arn not in managed]
    if unknown:
        raise AssertionError(f"{role_id} gets managed policies with no vendored document: {unknown}")
    inline = tuple((p["PolicyName"], p["PolicyDocument"]) for p in properties.get("Policies", []))
    for _, document in inline:
        check_supported(document)
    return Grantee(role_id, inline, tuple((arn, managed[arn]) for arn in properties.get("ManagedPolicyArns", [])))


def policy_grantee(stack: Stack, policy_id: str) -> Grantee:
    document = stack.resolve(stack.resources[policy_id]["Properties"]["PolicyDocument"])
    check_supported(document)
    return Grantee(policy_id, ((policy_id, document),), ())


@dataclass(frozen=True)
class LambdaFunction:
    """A function of the stack: its role and what Lambda itself does with that role."""

    function_id: str
    role_id: str
    runtime_calls: tuple[Requirement, ...]


def functions(stack: Stack) -> list[LambdaFunction]:
    """Each function with the calls Lambda makes with its role: the event source poller (the actions AWS
    documents for the execution role), the Kinesis on-failure destination, logs, X-Ray."""
    found = []
    for function_id, resource in stack.resources.items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        properties = resource["Properties"]
        role_id = properties["Role"]["Fn::GetAtt"][0]
        calls: list[Requirement] = []
        log_group = properties.get("LoggingConfig", {}).get("LogGroup")
        log_arn = (
            stack.arn(log_group["Ref"])
            if isinstance(log_group, dict)
            else f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{function_id}:*"
        )
        calls += [
            Requirement(f"logs:{a}", log_arn, "Lambda: function logs") for a in ("CreateLogStream", "PutLogEvents")
        ]
        if properties.get("TracingConfig", {}).get("Mode") == "Active":
            calls += [
                Requirement(f"xray:{a}", "*", "Lambda: X-Ray tracing")
                for a in ("PutTraceSegments", "PutTelemetryRecords")
            ]
        for mapping in stack.resources.values():
            if mapping["Type"] != "AWS::Lambda::EventSourceMapping":
                continue
            if mapping["Properties"]["FunctionName"] != {"Ref": function_id}:
                continue
            mapping_properties = stack.resolve(mapping["Properties"])
            source = mapping_properties["EventSourceArn"]
            if ":sqs:" in source:
                actions = ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")
                calls += [Requirement(f"sqs:{a}", source, "Lambda: SQS event source poller") for a in actions]
            elif ":kinesis:" in source:
                actions = ("GetRecords", "GetShardIterator", "DescribeStream", "DescribeStreamSummary", "ListShards")
                calls += [Requirement(f"kinesis:{a}", source, "Lambda: Kinesis event source poller") for a in actions]
                calls.append(Requirement("kinesis:ListStreams", "*", "Lambda: Kinesis event source poller"))
            else:
                raise AssertionError(f"event source {source} not understood by the IAM contract")
            destination = mapping_properties.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
            if destination is not None:
                calls += _on_failure_calls(destination, stack)
        found.append(LambdaFunction(function_id, role_id, tuple(calls)))
    return found


def _on_failure_calls(destination: str, stack: Stack) -> list[Requirement]:
    """What Lambda does with the function's role to deliver a given-up batch's record: an SQS destination
    gets ``SendMessage``; an S3 destination gets the whole invocation record as an object under
    ``aws/lambda/<mapping UUID>/<shard>/YYYY/MM/DD/...`` (``s3:PutObject``), and ``s3:ListBucket`` on the
    bucket (the two actions AWS documents for an S3 destination, and that aws-sam-translator grants for
    ``OnFailure: Type: S3``)."""
    origin = "Lambda: on-failure destination"
    if ":sqs:" in destination:
        return [Requirement("sqs:SendMessage", destination, origin)]
    if destination.startswith("arn:aws:s3:::"):
        uuid = f"{stack.values.get('Source', 'x')}-mapping-uuid"
        key = f"aws/lambda/{uuid}/shardId-000000000000/2026/11/24/2026-11-24T10.15.00-0b6e4a30"
        return [
            Requirement("s3:PutObject", f"{destination}/{key}", origin),
            Requirement("s3:ListBucket", destination, origin),
        ]
    raise AssertionError(f"on-failure destination {destination} not understood by the IAM contract")


# --- recorded calls -> IAM requests ---------------------------------------------------------------------


class Binding:
    """Which template resource a test's concrete table, queue, stream or stack stands for."""

    def __init__(self, template: dict[str, Any], created_tables: dict[str, tuple[str, ...]]) -> None:
        self.table_keys = {
            logical_id: tuple(sorted(key["AttributeName"] for key in resource["Properties"]["KeySchema"]))
            for logical_id, resource in template["Resources"].items()
            if resource["Type"] == "AWS::DynamoDB::Table"
        }
        self.created_tables = created_tables

    def table(self, target: Target) -> str | None:
        """By key schema: the table's own (CreateTable), else the key attributes of the item requested."""
        keys = self.created_tables.get(target.name)
        if keys is not None:
            matches = [logical_id for logical_id, schema in self.table_keys.items() if schema == keys]
        else:
            attributes = set(target.attributes)
            matches = [
                logical_id for logical_id, schema in self.table_keys.items() if attributes and set(schema) <= attributes
            ]
        return matches[0] if len(matches) == 1 else None


def _bind(call: Call) -> str | None:
    """The template resource of a call's queue, stream or stack, from what its call site does."""
    if call.service == "sqs":
        if call.role == FUNCTION:
            # tally.dead_letter_sender.SqsDeadLetterQueue, wired by tally.runtime with TALLY_DLQ_URL = !Ref EventsDeadLetterQueue
            return DLQ if call.site.startswith("tally/dead_letter_sender.py") else None
        return DLQ if call.operation in _OPERATOR_DLQ_OPERATIONS else QUEUE
    if call.service == "kinesis":
        return STREAM
    if call.service == "cloudformation":
        return STACK
    if call.service == "s3":
        if call.site.startswith(("tally/archive_writer.py", "tally/audit/")):
            return (
                ARCHIVE_BUCKET  # the function's archive writes (TALLY_ARCHIVE_BUCKET = !Ref ArchiveBucket), and reads
            )
        return FAILURE_BUCKET  # given-up Kinesis batches (tally.ops.dead_letters)
    return None


def _dynamodb_requirements(call: Call, binding: Binding, stack: Stack, result: Requirements) -> None:
    """A DynamoDB call's IAM requests, one per table (and index) it names; a transaction's per item action."""
    origin = f"{call.operation} at {call.site}"
    operation = call.operation
    if operation in {"TransactWriteItems", "TransactGetItems"}:
        pairs = [(_DYNAMODB_ITEM_ACTIONS.get(t.item_action), t) for t in call.targets]
    elif operation in {"BatchGetItem", "BatchWriteItem"} or operation in _DYNAMODB_PLAIN:
        pairs = [(operation, t) for t in call.targets]
    else:
        pairs = [(None, Target("table", "?"))]
    for action, target in pairs:
        table = binding.table(target)
        if action is None:
            result.problems.append(f"no IAM mapping for dynamodb {operation} {target.item_action}: {origin}")
        elif table is None:
            result.problems.append(f"table {target.name!r} is none of the template's tables: {origin}")
        else:
            arn = stack.arn(table) + (f"/index/{target.index}" if target.index else "")
            result.needed.append(Requirement(f"dynamodb:{action}", arn, origin))
    if not call.targets:
        result.problems.append(f"dynamodb {operation} names no table: {origin}")


def requirements(calls: Iterable[Call], binding: Binding, stack: Stack) -> Requirements:
    """The IAM requests of ``calls``; those on resources absent from ``stack`` (say, the stream of a
    Source=SQS stack) do not apply. An operation or resource the mapping does not know is a problem."""
    result = Requirements()
    for call in calls:
        origin = f"{call.operation} at {call.site}"
        service, operation = call.service, call.operation
        if service == "dynamodb":
            _dynamodb_requirements(call, binding, stack, result)
            continue
        if service == "sqs" and operation in _SQS_ACTIONS:
            action = f"sqs:{_SQS_ACTIONS[operation]}"
        elif service == "kinesis" and operation in _KINESIS_ACTIONS:
            action = f"kinesis:{operation}"
        elif service == "cloudformation" and operation in _CLOUDFORMATION_ACTIONS:
            action = f"cloudformation:{operation}"
        elif service == "s3" and operation in _S3_BUCKET_ACTIONS:
            action = f"s3:{_S3_BUCKET_ACTIONS[operation]}"
        elif service == "s3" and operation in _S3_OBJECT_ACTIONS:
            action = f"s3:{_S3_OBJECT_ACTIONS[operation]}"
        else:
            result.problems.append(f"no IAM mapping for {service} {operation}: {origin}")
            continue
        resource = _bind(call)
        if resource is None:
            result.problems.append(f"{service} resource of {operation} not bound to the template: {origin}")
        elif stack.exists(resource):
            arn = stack.arn(resource)
            if service == "s3" and operation in _S3_OBJECT_ACTIONS:
                # the object's key prefix, as recorded (tally_local.kit.calls): an object under it
                prefixes = [t.item_action for t in call.targets if t.kind == "object"]
                arn = f"{arn}/{prefixes[0] if prefixes else ''}/recorded-object"
            result.needed.append(Requirement(action, arn, origin))
    return result


# --- evaluation -----------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What one grantee was asked for, what it refused, and what it grants that nobody asked for."""

    grantee: str
    source: str
    denied: list[Requirement]
    unused: list[str]
    problems: list[str]
    asked: int

    def lines(self) -> list[str]:
        head = f"{self.grantee} (Source={self.source}): {self.asked} distinct IAM requests"
        out = [head + (f", {len(self.denied)} DENIED" if self.denied else ", all allowed")]
        out += [f"  DENIED {r.action} on {r.resource}  <- {r.origin}" for r in self.denied]
        out += [f"  PROBLEM {p}" for p in self.problems]
        if self.asked:  # a run that never called as this grantee says nothing about what it needs
            out += [f"  granted, never used: {u}" for u in self.unused]
        return out


def unused_grants(grantee: Grantee, needed: Iterable[Requirement]) -> list[str]:
    """Each (action, resource) of the grantee's own Allow statements that no request matched."""
    needed = list(needed)
    unused = []
    for _, document in grantee.inline:
        statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
        for statement in statements:
            if statement["Effect"] != "Allow" or "Action" not in statement:
                continue
            actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
            resources = [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
            for action in actions:
                for resource in resources:
                    probe = IAMPolicyStatement({"Effect": "Allow", "Action": action, "Resource": resource})
                    if not any(
                        probe.is_action_permitted(r.action, r.resource) is PermissionResult.PERMITTED for r in needed
                    ):
                        unused.append(f"{statement.get('Sid', '?')}: {action} on {resource}")
    return unused


def _verdict(grantee: Grantee, source: str, needed: list[Requirement], problems: list[str]) -> Verdict:
    distinct = sorted(set(needed))
    denied = [r for r in distinct if not grantee.allows(r.action, r.resource)]
    return Verdict(
        grantee.name,
        source,
        denied,
        unused_grants(grantee, distinct),
        problems,
        len({(r.action, r.resource) for r in distinct}),
    )


def evaluate(transformed: dict[str, Any], recording: Recording, source: str) -> list[Verdict]:
    """Each function role and the operator policy of a ``source`` stack (a key of ``CONFIGURATIONS``) against
    the recorded calls (with the read endpoint on, so that its function exists), then the producer and reader
    policies."""
    values = parameter_values(
        transformed,
        **CONFIGURATIONS.get(source, {"Source": source}),
        AlarmEmail="ops@example.com",
        ReadEndpoint="FunctionUrl",
    )
    stack = Stack(transformed, values)
    binding = Binding(transformed, recording.tables)
    function_calls = requirements([c for c in recording.calls if c.role == FUNCTION], binding, stack)
    function_calls.problems += [f"{c.operation}: {c.site}" for c in recording.calls if c.role == "error"]
    read_calls = requirements([c for c in recording.calls if c.role == READ_FUNCTION], binding, stack)
    verdicts = []
    for function in functions(stack):
        calls = read_calls if function.function_id == READ_FUNCTION_ID else function_calls
        needed = [*calls.needed, *function.runtime_calls]
        verdicts.append(_verdict(role_grantee(stack, function.role_id), source, needed, calls.problems))
    operator_calls = requirements([c for c in recording.calls if c.role == OPERATOR], binding, stack)
    if OPERATOR_POLICY in stack.resources:
        verdicts.append(
            _verdict(policy_grantee(stack, OPERATOR_POLICY), source, operator_calls.needed, operator_calls.problems)
        )
    else:
        problems = [*operator_calls.problems, f"the template has no {OPERATOR_POLICY} for the tally command"]
        verdicts.append(Verdict(OPERATOR_POLICY, source, [], [], problems, len(operator_calls.needed)))
    return verdicts + application_verdicts(stack, binding, recording, source)


def application_verdicts(stack: Stack, binding: Binding, recording: Recording, source: str) -> list[Verdict]:
    """ProducerPolicy against the producer library's calls; ReaderPolicy against the reader library's, and,
    when the read endpoint was called, against what its caller needs: a function URL with IAM auth is
    authorised on ``lambda:InvokeFunctionUrl`` and ``lambda:InvokeFunction`` (AWS, since October 2025) on
    the function, a call no botocore client makes (the caller signs an HTTPS request) and so declared here."""
    producer = requirements([c for c in recording.calls if c.role == PRODUCER], binding, stack)
    reader = requirements([c for c in recording.calls if c.role == READER], binding, stack)
    if stack.exists(READ_FUNCTION_ID) and any(c.role == READ_FUNCTION for c in recording.calls):
        arn = stack.arn(READ_FUNCTION_ID)
        origin = "a caller of the read endpoint (function URL, AWS_IAM)"
        reader.needed += [Requirement(f"lambda:{a}", arn, origin) for a in ("InvokeFunctionUrl", "InvokeFunction")]
    verdicts = []
    for policy_id, calls in ((PRODUCER_POLICY, producer), (READER_POLICY, reader)):
        if policy_id in stack.resources:
            verdicts.append(_verdict(policy_grantee(stack, policy_id), source, calls.needed, calls.problems))
        else:
            problems = [*calls.problems, f"the template has no {policy_id}"]
            verdicts.append(Verdict(policy_id, source, [], [], problems, len(calls.needed)))
    return verdicts


def transformed_template() -> dict[str, Any]:
    from tally_local.template import load_template  # noqa: PLC0415
    from tests.template.test_template import TEMPLATE_PATH, sam_transform  # noqa: PLC0415

    return sam_transform(copy.deepcopy(load_template(TEMPLATE_PATH)))
