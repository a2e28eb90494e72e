"""``tally dlq list`` and ``tally dlq redrive``: what is in the dead-letter queue and why; send it back.

``list`` reads without consuming (each message is made visible again at once), and says of each letter
whether its message already counts (its idempotency marker holds that very content: a refusal that no
longer holds). ``redrive`` re-sends every body unchanged to where it came from (``tally.source``), to
``--to-queue`` / ``--to-stream``, or, for a message SQS moved there after ``maxReceiveCount``, to the
stack's source queue; a Kinesis batch Lambda gave up on is replayed from the stream. ``--reason`` aims it
at some codes, ``--dry-run`` says what it would do, and a refused letter whose message already counts is
deleted rather than sent. The idempotency markers make all of it safe: nothing already counted is counted
again. Poison redriven unchanged is dead-lettered again, with its reason.
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
    from collections.abc import Callable, Sequence

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
    given-up Kinesis batches of the S3 failure bucket (if the stack has one).

    Each letter says whether its message already counts (its idempotency marker holds that very content,
    read from the markers table when the tables are known): a refusal that no longer holds, such as a
    below_floor whose copy was counted after a restock. gauge_refused and members_refused letters count by
    definition: only their gauges or members wait for a redrive."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.ops.dead_letters import list_failed_batches, list_letters, skipped_as_counted

    resolver = Resolver(stack_name, os.environ)
    url = resolver.required("TALLY_DLQ_URL", dlq_url, "the dead-letter queue", "--dlq-url")
    bucket = resolver.value("TALLY_FAILURE_BUCKET", failure_bucket)
    check = counted_check(resolver)
    sqs: SQSClient = client("sqs")
    try:
        letters = list_letters(sqs, url, limit=limit)
        counted = check(letters) if check is not None else None
        stored = list_failed_batches(client("s3"), bucket, limit=limit) if bucket else []
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure("list the dead letters", "sqs", exc) from exc
    if as_json:
        for letter in letters:
            sys.stdout.buffer.write(json_bytes(letter_json(letter, counted)))
        for batch in stored:
            sys.stdout.buffer.write(json_bytes(stored_json(batch)))
        return
    out = console()
    out.print(letters_table(letters, url, counted))
    if counted is None:
        out.print("counted: unknown (give the tables, $TALLY_COUNTERS_TABLE/$TALLY_MARKERS_TABLE, or --stack)")
    elif counted:
        deleted = sum(1 for letter in letters if skipped_as_counted(letter, counted))
        out.print(
            f"already counted: {len(counted)}; a redrive deletes {deleted} of them (refusals that no longer hold) "
            "and sends the rest (gauge_refused, members_refused: the redrive writes what is missing)"
        )
    if bucket:
        out.print(stored_table(stored, bucket))
    codes = Counter(letter.error_code or letter.kind for letter in letters)
    if codes:
        out.print("by reason: " + ", ".join(f"{code} {count}" for code, count in codes.most_common()))


@dlq.command("redrive")
@click.option("--to-queue", help="Send every body to this queue instead of where it came from.")
@click.option("--to-stream", help="Put every body into this stream (name or ARN) instead.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many messages.")
@click.option(
    "--reason",
    "reasons",
    multiple=True,
    help="Only letters with this reason (a tally.error_code such as below_floor, or message: moved by SQS, or "
    "kinesis-batch: given up); repeat for several. The others stay.",
)
@click.option("--dry-run", is_flag=True, help="Send and delete nothing: say what would be redriven or deleted.")
@json_option("Print what was redriven (or would be) and what was left as JSON.")
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
    reasons: tuple[str, ...],
    dry_run: bool,
    stack_name: str | None,
    dlq_url: str | None,
    queue_url: str | None,
    failure_bucket: str | None,
) -> None:
    """Send the dead letters back to their source (markers make it safe), deleting each once accepted.

    A refused letter whose message already counts (its idempotency marker holds that very content, read when
    the tables are known) is deleted without being sent: its refusal no longer holds and nothing is left to
    count. gauge_refused and members_refused letters are always sent: their counters count, and the redrive
    is what writes their gauges or members once the cause is gone."""
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
                reasons=frozenset(reasons) if reasons else None,
                dry_run=dry_run,
                counted=counted_check(resolver),
            )
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure("redrive the dead letters", "sqs", exc) from exc
    if as_json:
        print_json(redrive_document(result))
    else:
        console().print(redrive_table(result))
    if not result.ok:
        sys.exit(1)


def counted_check(resolver: Resolver) -> Callable[[Sequence[Letter]], frozenset[str]] | None:
    """Which letters already count, read from the markers table; None when the tables are not known."""
    from tally.cli.aws import client
    from tally.config import Settings
    from tally.errors import ConfigurationError
    from tally.ops.dead_letters import counted_letters
    from tally.store.counted import DynamoDBCountedLookup

    try:
        settings = Settings.from_env(resolver.settings(_COUNTED_SETTINGS), require_dlq=False)
    except ConfigurationError:
        return None
    lookup = DynamoDBCountedLookup(client("dynamodb"), settings.counters_table, settings.markers_table)

    def check(letters: Sequence[Letter]) -> frozenset[str]:
        return counted_letters(letters, lookup, settings.declarations.defaults, settings.declarations.views)

    return check


_COUNTED_SETTINGS = (
    "TALLY_COUNTERS_TABLE",
    "TALLY_MARKERS_TABLE",
    "TALLY_HOT_KEYS",
    "TALLY_COUNTER_DEFAULTS",
    "TALLY_COUNTER_VIEWS",
)
"""What deciding whether a letter counts needs: both tables, and how the stack fills in default deltas and reads
dimensions (a message is decoded as the function decodes it)."""


def letter_json(letter: Letter, counted: frozenset[str] | None = None) -> dict[str, Any]:
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
        "counted": None if counted is None else letter.message_id in counted,
    }
    batch = letter.kinesis_batch
    if batch is not None:
        document["kinesis_batch"] = dataclasses.asdict(batch)
    return document


def letters_table(letters: list[Letter], url: str, counted: frozenset[str] | None = None) -> Table:
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
        rows.add_row(_time(letter.sent_ms), reason + _counted_mark(letter, counted), detail, source, body)
    return rows


def _counted_mark(letter: Letter, counted: frozenset[str] | None) -> str:
    """Beside the reason: whether the letter's message counts already (nothing when that is unknown)."""
    return " (counted)" if counted is not None and letter.message_id in counted else ""


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
        "dry_run": result.dry_run,
        "redriven": [
            {"message_id": letter.message_id, "kind": letter.kind, "reason": letter.reason}
            for letter in result.redriven
        ],
        "counted_deleted": [{"message_id": letter.message_id, "reason": letter.reason} for letter in result.counted],
        "not_aimed": result.not_aimed,
        "replayed_records": result.replayed_records,
        "replayed_objects": list(result.replayed_objects),
        "skipped_objects": [{"key": key, "reason": reason} for key, reason in result.skipped_objects],
        "sent_to": sorted(result.destinations),
        "left": [{"message_id": skipped.letter.message_id, "reason": skipped.reason} for skipped in result.skipped],
        "returned": result.returned,
    }


def redrive_table(result: RedriveResult) -> Table:
    from rich.table import Table

    would = "would be " if result.dry_run else ""
    table = Table(
        title="redrive (dry run: nothing sent or deleted)" if result.dry_run else "redrive", show_header=False
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    reasons = Counter(letter.reason for letter in result.redriven)
    table.add_row(f"{would}redriven", f"{len(result.redriven):,}")
    for reason, count in sorted(reasons.items()):
        table.add_row(f"  {reason}", f"{count:,}")
    table.add_row(f"already counted: {would}deleted, not sent", f"{len(result.counted):,}")
    for reason, count in sorted(Counter(letter.reason for letter in result.counted).items()):
        table.add_row(f"  {reason}", f"{count:,}")
    if result.not_aimed:
        table.add_row("other reasons (left alone)", f"{result.not_aimed:,}")
    if result.replayed_records:
        table.add_row("Kinesis records replayed", f"{result.replayed_records:,}")
    if result.replayed_objects or result.skipped_objects:
        table.add_row(f"  given-up batches {would}replayed from S3", f"{len(result.replayed_objects):,}")
        table.add_row("  left in the failure bucket", f"{len(result.skipped_objects):,}")
        for key, reason in result.skipped_objects[:5]:
            table.add_row(f"  {key}", reason[:100])
    table.add_row("sent to", ", ".join(sorted(result.destinations)) or "-")
    table.add_row("left in the dead-letter queue (could not be sent)", f"{len(result.skipped):,}")
    for skipped in result.skipped[:5]:
        table.add_row(f"  {skipped.letter.message_id}", skipped.reason[:100])
    if result.returned:
        table.add_row("refused again: back in the dead-letter queue", f"{result.returned:,}")
    return table


def _time(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
