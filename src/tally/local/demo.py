"""The local demo: the real SQS and Kinesis handlers on the sample events, against DynamoDB Local.

What it does, with no AWS account and no Docker:

1. starts DynamoDB Local (AWS's emulator) and an SQS endpoint (moto's server) for the dead-letter queue;
2. creates the tables and the dead-letter queue from ``template.yaml`` (same keys, TTL, queue settings);
3. invokes ``tally.handlers.sqs.handler`` on every ``events/sqs-*.json`` file and
   ``tally.handlers.kinesis.handler`` on every ``events/kinesis-*.json`` file (``source`` in
   ``expected.json``), then again on each (a redelivery of the whole batch, as after a crash), with
   boto3 pointed at the local endpoints through ``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL_SQS``;
4. reads every counter back through the same read path as ``tally get`` and compares it with
   ``events/expected.json``; lists the dead letters with their reasons;
5. stops everything (also on Ctrl-C) and exits non-zero if any count is wrong.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer
from rich.console import Console
from rich.progress import track
from rich.table import Table

from tally.config import DEFAULT_MARKER_TTL_DAYS
from tally.local.context import LocalLambdaContext
from tally.local.dynamodb_local import DynamoDBLocal
from tally.local.template import load_template, queue_definitions, table_definitions
from tally.store.dynamodb import DynamoDBCounterStore

ROOT = Path(__file__).resolve().parents[3]
EVENTS = ROOT / "events"
TEMPLATE = ROOT / "template.yaml"


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    console = Console()
    expected: dict[str, Any] = json.loads((EVENTS / "expected.json").read_text())
    with ExitStack() as stack:
        console.print("[bold]tally local demo[/]: starting DynamoDB Local and a local SQS endpoint ...")
        ddb = stack.enter_context(DynamoDBLocal())
        sqs_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        sqs_server.start()
        stack.callback(sqs_server.stop)
        host, port = sqs_server.get_host_and_port()
        sqs_endpoint = f"http://{host}:{port}"
        env = _local_environment(ddb.endpoint_url, sqs_endpoint)
        os.environ.update(env)
        tables, dlq_url = _create_resources(ddb.client(), sqs_endpoint)
        os.environ.update(
            {"TALLY_COUNTERS_TABLE": tables["CountersTable"], "TALLY_MARKERS_TABLE": tables["MarkersTable"]}
        )
        os.environ["TALLY_DLQ_URL"] = dlq_url
        console.print(f"DynamoDB Local at {ddb.endpoint_url}; SQS at {sqs_endpoint}; tables from template.yaml")

        # Imported only now, as Lambda would at cold start: Powertools reads its settings on import.
        from tally.handlers import kinesis as kinesis_handler  # noqa: PLC0415
        from tally.handlers import sqs as sqs_handler  # noqa: PLC0415

        handlers = {"sqs": sqs_handler.handler, "kinesis": kinesis_handler.handler}

        failures = 0
        for event_file in track(sorted(expected), description="invoking the handler", console=console):
            event = json.loads((EVENTS / event_file).read_text())
            for _delivery in range(2):  # the second delivery is a redelivery of the same batch
                response = handlers[expected[event_file]["source"]](event, LocalLambdaContext())
                failures += len(response["batchItemFailures"])

        store = DynamoDBCounterStore(
            ddb.client(), tables["CountersTable"], tables["MarkersTable"], DEFAULT_MARKER_TTL_DAYS * 86_400
        )
        ok = _print_counters(console, expected, store) and failures == 0
        ok = _print_dead_letters(console, expected, dlq_url, sqs_endpoint) and ok
        verdict = "[bold green]EXACT[/]: every counter matches" if ok else "[bold red]WRONG COUNTS[/]"
        console.print(verdict + (" (redelivered batches counted once)" if ok else ""))
        return 0 if ok else 1


def _local_environment(dynamodb_endpoint: str, sqs_endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_endpoint,
        "AWS_ENDPOINT_URL_SQS": sqs_endpoint,
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


def _create_resources(dynamodb: Any, sqs_endpoint: str) -> tuple[dict[str, str], str]:
    template = load_template(TEMPLATE)
    suffix = time.strftime("%Y%m%d%H%M%S")
    tables = {}
    for logical_id, definition in table_definitions(template).items():
        name = f"tally-{logical_id}-{suffix}"
        dynamodb.create_table(**definition.create_table_kwargs(name))
        ttl = definition.update_time_to_live_kwargs(name)
        if ttl is not None:
            dynamodb.update_time_to_live(**ttl)
        tables[logical_id] = name
    sqs = boto3.client("sqs", endpoint_url=sqs_endpoint)
    dead_letter = queue_definitions(template)["EventsDeadLetterQueue"]
    dlq_url = sqs.create_queue(**dead_letter.create_queue_kwargs(f"tally-dlq-{suffix}"))["QueueUrl"]
    return tables, dlq_url


def _print_counters(console: Console, expected: dict[str, Any], store: DynamoDBCounterStore) -> bool:
    table = Table(title="counters: expected vs counted (read back from DynamoDB Local)")
    for column in ("event file", "key", "counter", "expected", "counted", ""):
        table.add_column(column, justify="right" if column in ("expected", "counted") else "left")
    ok = True
    for event_file, spec in sorted(expected.items()):
        for key, counters in spec["counters"].items():
            counted = store.read_counters(key)
            for name, value in counters.items():
                got = counted.get(name)
                match = got == Decimal(value)
                ok = ok and match
                table.add_row(event_file, key, name, value, str(got), "[green]ok[/]" if match else "[red]WRONG[/]")
    console.print(table)
    return ok


def _print_dead_letters(console: Console, expected: dict[str, Any], dlq_url: str, sqs_endpoint: str) -> bool:
    sqs = boto3.client("sqs", endpoint_url=sqs_endpoint)
    letters: list[Any] = []
    while batch := sqs.receive_message(
        QueueUrl=dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=300
    ).get("Messages", []):
        letters.extend(batch)
    table = Table(title="dead-letter queue (poison is dead-lettered on each delivery: it never gets a marker)")
    for column in ("error code", "reason", "body"):
        table.add_column(column)
    for letter in letters:
        attributes = letter["MessageAttributes"]
        table.add_row(
            attributes["tally.error_code"]["StringValue"],
            attributes["tally.error_message"]["StringValue"][:70],
            letter["Body"][:50],
        )
    console.print(table)
    want = sorted(code for spec in expected.values() for code in spec["dead_letters"] * 2)
    got = sorted(letter["MessageAttributes"]["tally.error_code"]["StringValue"] for letter in letters)
    if got != want:
        console.print(f"[red]dead letters differ[/]: expected {want}, got {got}")
    return got == want


if __name__ == "__main__":
    sys.exit(main())
