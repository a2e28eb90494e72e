"""The environment a handler runs in on AWS, on moto: what the handler tests of each function share.

Credentials and region for moto, no local endpoint (a developer's ``AWS_ENDPOINT_URL`` would bypass moto),
the template's two tables (their key schemas read from ``template.yaml``), a dead-letter queue and the
``TALLY_*`` variables the template gives the functions.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3
from moto import mock_aws

from tally.reader import CounterReader, NotificationReader
from tally.reader.store_view import read_counters
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.context import LocalLambdaContext
from tally_local.template import load_template, table_definitions
from tests.support.environment import MOTO_CREDENTIALS, set_environment
from tests.support.events import sample_views

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import pytest

TEMPLATE: Final = Path(__file__).resolve().parents[2] / "template.yaml"


@dataclass(frozen=True)
class MotoFunction:
    dynamodb: Any
    sqs: Any
    dlq_url: str


@contextmanager
def moto_function(monkeypatch: pytest.MonkeyPatch, **environment: str) -> Iterator[MotoFunction]:
    """Inside moto, with the tables ``counters`` and ``markers`` and the DLQ ``tally-dlq``; ``environment``
    adds or overrides variables (``TALLY_WINDOWS``, ``POWERTOOLS_METRICS_NAMESPACE``, ...)."""
    variables = {
        **MOTO_CREDENTIALS,
        "POWERTOOLS_SERVICE_NAME": "tally",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "TALLY_COUNTERS_TABLE": "counters",
        "TALLY_MARKERS_TABLE": "markers",
        "TALLY_NOTIFICATIONS_TABLE": "notifications",
        **environment,
    }
    set_environment(
        monkeypatch, variables, without=("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")
    )
    with mock_aws():
        dynamodb = boto3.client("dynamodb")
        definitions = table_definitions(load_template(TEMPLATE))
        tables = (("CountersTable", "counters"), ("MarkersTable", "markers"), ("NotificationsTable", "notifications"))
        for logical_id, name in tables:
            dynamodb.create_table(**definitions[logical_id].create_table_kwargs(name))
        sqs = boto3.client("sqs")
        dlq_url = sqs.create_queue(QueueName="tally-dlq")["QueueUrl"]
        monkeypatch.setenv("TALLY_DLQ_URL", dlq_url)
        yield MotoFunction(dynamodb, sqs, dlq_url)


@contextmanager
def counters_on_moto(
    monkeypatch: pytest.MonkeyPatch, items: Sequence[Mapping[str, Any]], *, markers_table: bool = False
) -> Iterator[None]:
    """The template's counters table named ``counters`` on moto, holding ``items``, with the credentials and
    ``TALLY_COUNTERS_TABLE`` (and ``TALLY_MARKERS_TABLE``) the CLI reads, and no local endpoint."""
    environment = {**MOTO_CREDENTIALS, "TALLY_COUNTERS_TABLE": "counters"}
    if markers_table:
        environment["TALLY_MARKERS_TABLE"] = "markers"
    set_environment(monkeypatch, environment, without=("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"))
    with mock_aws():
        dynamodb = boto3.client("dynamodb")
        definition = table_definitions(load_template(TEMPLATE))["CountersTable"]
        dynamodb.create_table(**definition.create_table_kwargs("counters"))
        for item in items:
            dynamodb.put_item(TableName="counters", Item=item)  # type: ignore[arg-type]
        yield


@dataclass(frozen=True)
class MotoStack:
    """A handler's store and dead-letter queue on moto (``moto_function``)."""

    store: DynamoDBCounterStore
    sqs: Any
    dlq_url: str

    def dead_letters(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=self.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", []):
            messages.extend(batch)
        return messages


@contextmanager
def moto_stack(monkeypatch: pytest.MonkeyPatch, handler_module: Any, **environment: str) -> Iterator[MotoStack]:
    """``moto_function`` with the handler's cached pipeline cleared before and after (it reads the environment)."""
    with moto_function(monkeypatch, **environment) as function:
        handler_module.pipeline.cache_clear()
        yield MotoStack(
            DynamoDBCounterStore(function.dynamodb, "counters", "markers", 86_400), function.sqs, function.dlq_url
        )
    handler_module.pipeline.cache_clear()


def deliver_sample_twice(
    handler_module: Any, event: dict[str, Any], spec: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    """Run ``handler_module``'s handler on a sample event twice (a redelivery of the whole batch), with the
    deployment parameters ``events/expected.json`` gives the sample (CounterDefaults, CounterBounds,
    CounterThresholds, CounterViews)."""
    for variable, name in (
        ("TALLY_COUNTER_DEFAULTS", "counter_defaults"),
        ("TALLY_COUNTER_BOUNDS", "counter_bounds"),
        ("TALLY_COUNTER_THRESHOLDS", "counter_thresholds"),
        ("TALLY_COUNTER_VIEWS", "counter_views"),
    ):
        if name in spec:
            monkeypatch.setenv(variable, spec[name])
            handler_module.pipeline.cache_clear()
    return handler_module.handler(event, LocalLambdaContext()), handler_module.handler(event, LocalLambdaContext())


def sample_outcome(stack: MotoStack, spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the store and the dead-letter queue hold for the keys ``spec`` documents, in ``documented``'s shape."""
    reader = CounterReader("counters", client=stack.store.client)
    views = sample_views(reader, spec)
    return {
        "counters": {key: {n: str(v) for n, v in read_counters(stack.store, key).items()} for key in spec["counters"]},
        "dead_letters": sorted(m["MessageAttributes"]["tally.error_code"]["StringValue"] for m in stack.dead_letters()),
        "gauges": {
            key: {kind: {n: str(v) for n, v in g.items()} for kind, g in reader.get(key).gauges.items()}
            for key in spec.get("gauges", {})
        },
        "distinct": {key: {n: str(v) for n, v in reader.get(key).distinct.items()} for key in spec.get("distinct", {})},
        "views": views,
        "notifications": [
            {
                "key": c.key,
                "counter": c.counter,
                "level": str(c.level),
                "direction": str(c.direction),
                "message_id": c.message_id,
            }
            for c in NotificationReader("notifications", client=stack.store.client).list()
            if c.key in spec["counters"]
        ],
    }


def documented_after_two_deliveries(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``events/expected.json``'s outcome of a sample delivered twice: poison is dead-lettered on every delivery
    (it never gets a marker), everything else counts once."""
    return {
        "counters": spec["counters"],
        "dead_letters": sorted(spec["dead_letters"] * 2),
        "gauges": spec.get("gauges", {}),
        "distinct": spec.get("distinct", {}),
        "views": spec.get("views", {}),
        "notifications": spec.get("notifications", []),
    }
