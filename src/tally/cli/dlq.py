"""``tally dlq list`` and ``tally dlq redrive``: what is in the dead-letter queue and why; send it back.

``list`` reads without consuming (each message is made visible again at once). ``redrive`` re-sends
every body unchanged to where it came from (``tally.source``), to ``--to-queue`` / ``--to-stream``, or,
for a message SQS moved there after ``maxReceiveCount``, to the stack's source queue; a Kinesis batch
Lambda gave up on is replayed from the stream. The idempotency markers make all of it safe: nothing
already counted is counted again. Poison redriven unchanged is dead-lettered again, with its reason.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from tally.cli.output import console, json_bytes, json_option, print_json, table
from tally.cli.resolve import Resolver, stack_option

if TYPE_CHECKING:
    from mypy_boto3_kinesis.client import KinesisClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient
    from rich.table import Table

    from tally.ops.dead_letters import Letter, RedriveResult, StoredBatch

_PREVIEW = 60


@click.group()
def dlq() -> None:
    """Inspect and redrive the dead-letter queue."""


_DLQ_URL = click.option("--dlq-url", help="The dead-letter queue (default: the stack's, or $TALLY_DLQ_URL).")
_FAILURE_BUCKET = click.option(
    "--failure-bucket",
    help="The S3 bucket of given-up Kinesis batches (StreamFailureDestination=S3; default: the stack's, or"
    " $TALLY_FAILURE_BUCKET).",
)


@dlq.command("list")
@json_option("Print one JSON object per line (bodies in full).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many messages.")
@stack_option
@_DLQ_URL
@_FAILURE_BUCKET
def list_command(
    as_json: bool, limit: int | None, stack_name: str | None, dlq_url: str | None, failure_bucket: str | None
) -> None:
    """List each dead letter with its reason (tally.error_code / tally.error_message), oldest first, and the
    given-up Kinesis batches of the S3 failure bucket (if the stack has one)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.ops.dead_letters import list_failed_batches, list_letters

    resolver = Resolver(stack_name, os.environ)
    url = resolver.required("TALLY_DLQ_URL", dlq_url, "the dead-letter queue", "--dlq-url")
    bucket = resolver.value("TALLY_FAILURE_BUCKET", failure_bucket)
    sqs: SQSClient = client("sqs")
    try:
        letters = list_letters(sqs, url, limit=limit)
        stored = list_failed_batches(client("s3"), bucket, limit=limit) if bucket else []
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure("list the dead letters", "sqs", exc) from exc
    if as_json:
        for letter in letters:
            sys.stdout.buffer.write(json_bytes(letter_json(letter)))
        for batch in stored:
            sys.stdout.buffer.write(json_bytes(stored_json(batch)))
        return
    out = console()
    out.print(letters_table(letters, url))
    if bucket:
        out.print(stored_table(stored, bucket))
    codes = Counter(letter.error_code or letter.kind for letter in letters)
    if codes:
        out.print("by reason: " + ", ".join(f"{code} {count}" for code, count in codes.most_common()))


@dlq.command("redrive")
@click.option("--to-queue", help="Send every body to this queue instead of where it came from.")
@click.option("--to-stream", help="Put every body into this stream (name or ARN) instead.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many messages.")
@json_option("Print what was redriven and what was left as JSON.")
@stack_option
@_DLQ_URL
@click.option(
    "--queue-url",
    help="Where messages without a tally.source go (SQS moved them): the source queue (default: the stack's, or"
    " $TALLY_QUEUE_URL).",
)
@_FAILURE_BUCKET
def redrive_command(  # click passes every option by name
    *,
    as_json: bool,
    to_queue: str | None,
    to_stream: str | None,
    limit: int | None,
    stack_name: str | None,
    dlq_url: str | None,
    queue_url: str | None,
    failure_bucket: str | None,
) -> None:
    """Send the dead letters back to their source (markers make it safe), deleting each once accepted."""
    from botocore.exceptions import BotoCoreError, ClientError
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.ops.dead_letters import Destination, redrive

    if to_queue and to_stream:
        raise click.UsageError("give --to-queue or --to-stream, not both")
    resolver = Resolver(stack_name, os.environ)
    url = resolver.required("TALLY_DLQ_URL", dlq_url, "the dead-letter queue", "--dlq-url")
    default_queue = resolver.value("TALLY_QUEUE_URL", queue_url)
    bucket = resolver.value("TALLY_FAILURE_BUCKET", failure_bucket)
    sqs: SQSClient = client("sqs")
    kinesis: KinesisClient = client("kinesis")
    s3: S3Client | None = client("s3") if bucket else None
    columns = (TextColumn("redriving"), BarColumn(), MofNCompleteColumn(), TextColumn("messages"))
    try:
        with Progress(*columns, console=console(stderr=True), transient=True) as progress:
            task = progress.add_task("redrive", total=limit)
            result = redrive(
                sqs,
                url,
                kinesis=kinesis,
                destination=Destination(queue_url=to_queue, stream=to_stream),
                default_queue_url=default_queue,
                limit=limit,
                progress=lambda _letter: progress.advance(task),
                s3=s3,
                failure_bucket=bucket,
            )
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure("redrive the dead letters", "sqs", exc) from exc
    if as_json:
        print_json(redrive_document(result))
    else:
        console().print(redrive_table(result))
    if not result.ok:
        sys.exit(1)


def letter_json(letter: Letter) -> dict[str, Any]:
    document: dict[str, Any] = {
        "message_id": letter.message_id,
        "kind": letter.kind,
        "error_code": letter.error_code,
        "error_message": letter.error_message,
        "source": letter.source,
        "source_record_id": letter.source_record_id,
        "body_encoding": letter.body_encoding,
        "sent_ms": letter.sent_ms,
        "receive_count": letter.receive_count,
        "body": letter.body,
    }
    batch = letter.kinesis_batch
    if batch is not None:
        document["kinesis_batch"] = dataclasses.asdict(batch)
    return document


def letters_table(letters: list[Letter], url: str) -> Table:
    rows = table(
        f"dead-letter queue {url.rsplit('/', 1)[-1]}: {len(letters)} message(s)",
        ["sent (UTC)", "reason", "detail", "source", "body"],
    )
    for letter in letters:
        batch = letter.kinesis_batch
        if batch is not None:
            reason = f"kinesis batch given up ({batch.condition})"
            detail = (
                f"{batch.shard_id} {batch.start_sequence_number}..{batch.end_sequence_number} ({batch.size} records)"
            )
            source = batch.stream_arn.rsplit("/", 1)[-1]
        else:
            reason = letter.error_code or "moved by SQS (maxReceiveCount)"
            detail = (letter.error_message or "")[:80]
            source = (letter.source or "").rsplit(":", 1)[-1].rsplit("/", 1)[-1]
        body = letter.body if len(letter.body) <= _PREVIEW else letter.body[:_PREVIEW] + "…"
        rows.add_row(_time(letter.sent_ms), reason, detail, source, body)
    return rows


def stored_json(stored: StoredBatch) -> dict[str, Any]:
    return {
        "kind": "kinesis-batch-s3",
        "key": stored.key,
        "kinesis_batch": dataclasses.asdict(stored.batch),
        "records": len(stored.records),
        "last_modified_ms": stored.last_modified_ms,
    }


def stored_table(stored: list[StoredBatch], bucket: str) -> Table:
    rows = table(
        f"failure bucket {bucket}: {len(stored)} given-up Kinesis batch(es), records included",
        ["written (UTC)", "reason", "detail", "source"],
    )
    for item in stored:
        batch = item.batch
        rows.add_row(
            _time(item.last_modified_ms),
            f"kinesis batch given up ({batch.condition})",
            f"{batch.shard_id} {batch.start_sequence_number}..{batch.end_sequence_number} "
            f"({len(item.records)} records)",
            batch.stream_arn.rsplit("/", 1)[-1],
        )
    return rows


def redrive_document(result: RedriveResult) -> dict[str, Any]:
    """What ``--json`` prints: every message redriven (id, kind) and every one left, with why."""
    return {
        "ok": result.ok,
        "redriven": [{"message_id": letter.message_id, "kind": letter.kind} for letter in result.redriven],
        "replayed_records": result.replayed_records,
        "replayed_objects": list(result.replayed_objects),
        "skipped_objects": [{"key": key, "reason": reason} for key, reason in result.skipped_objects],
        "sent_to": sorted(result.destinations),
        "left": [{"message_id": skipped.letter.message_id, "reason": skipped.reason} for skipped in result.skipped],
    }


def redrive_table(result: RedriveResult) -> Table:
    from rich.table import Table

    table = Table(title="redrive", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    kinds = Counter(letter.kind for letter in result.redriven)
    table.add_row("redriven", f"{len(result.redriven):,}")
    for kind, count in sorted(kinds.items()):
        table.add_row(f"  {kind}", f"{count:,}")
    if result.replayed_records:
        table.add_row("Kinesis records replayed", f"{result.replayed_records:,}")
    if result.replayed_objects or result.skipped_objects:
        table.add_row("  given-up batches replayed from S3", f"{len(result.replayed_objects):,}")
        table.add_row("  left in the failure bucket", f"{len(result.skipped_objects):,}")
        for key, reason in result.skipped_objects[:5]:
            table.add_row(f"  {key}", reason[:100])
    table.add_row("sent to", ", ".join(sorted(result.destinations)) or "-")
    table.add_row("left in the dead-letter queue", f"{len(result.skipped):,}")
    for skipped in result.skipped[:5]:
        table.add_row(f"  {skipped.letter.message_id}", skipped.reason[:100])
    return table


def _time(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
