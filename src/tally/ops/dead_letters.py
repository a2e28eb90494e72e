"""The dead-letter queue, for operators: list what is in it and why, and send it back to be counted.

Three kinds of message end up in tally's dead-letter queue:

- **poison**, dead-lettered by the function itself with its original body and ``tally.error_code`` /
  ``tally.error_message`` / ``tally.source`` (the ARN of the queue or stream it came from) /
  ``tally.source_record_id`` (and ``tally.body_encoding`` when the body had to be base64-encoded);
- **messages SQS moved** after ``maxReceiveCount`` receives (the function kept failing them, say while
  DynamoDB was unreachable): the producer's original message, without tally attributes;
- **Kinesis batches Lambda gave up on**: metadata only (shard and sequence range), as Lambda's
  on-failure destination receives it; the records are still in the stream until it trims them.

With ``StreamFailureDestination=S3`` a given-up batch goes instead to the stack's failure
bucket, **whole**: Lambda writes the invocation record, its event included (``payload``), as one object
under ``aws/lambda/<mapping UUID>/<shard>/...``. ``list_failed_batches`` reads them and ``redrive`` (given
the bucket) re-puts their records from the object itself, so the replay no longer depends on the
stream's retention, then deletes the object.

``list_letters`` reads them all without consuming them (they are made visible again at once);
``counted_letters`` says which of them already count (their producer's id has a marker for that very
content, ``tally.store.counted``): a refusal that no longer holds, say a ``below_floor`` whose copy was
counted after a restock.
``redrive`` re-sends each body, unchanged, to where it came from (``tally.source``), or to a given
queue or stream, and deletes it from the dead-letter queue once the source accepted it; a Kinesis batch
is replayed from the stream (its records re-put with their data and partition keys). Nothing can count
twice: the producer's id inside the body is the unit of idempotency, and every message already applied
has its marker. A poison message that is redriven unchanged is dead-lettered again (a new message),
which this function recognises and leaves alone, so a redrive always terminates. A redrive can be aimed
(``reasons``: only letters with those codes, the others left alone), tried first (``dry_run``: nothing sent,
nothing deleted), and told which letters already count (``counted``): a refused letter whose message
counts is deleted instead of sent, because nothing is left to do for it. A letter of a post-commit refusal
(``gauge_refused``, ``members_refused``) counts by definition and is always sent: its redrive is what
writes the gauges or members once the cause is gone.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.batching import group
from tally.core.decode import decode_message
from tally.core.defaults import NO_DEFAULTS
from tally.core.digest import content_digest
from tally.core.limits import KINESIS_PUT_MAX_RECORDS, SQS_BATCH_MAX_ENTRIES
from tally.core.model import COUNTED_REFUSALS, Message
from tally.core.views import NO_VIEWS, CounterViews
from tally.dead_letter_sender import (
    BODY_ENCODING,
    ERROR_CODE,
    ERROR_MESSAGE,
    SOURCE,
    SOURCE_RECORD_ID,
    SOURCE_SHARD,
)
from tally.errors import OperatorError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from mypy_boto3_kinesis.client import KinesisClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient

    from tally.core.defaults import CounterDefaults
_LIST_VISIBILITY_S: Final = 30
"""How long a listed message stays hidden at most (each is made visible again as soon as it is read)."""
_REDRIVE_VISIBILITY_S: Final = 120
"""Hides a message while it is being redriven; a re-dead-lettered one stays hidden this long, so the
redrive never meets it again."""
RECEIVE_WAIT_S: Final = 1
"""Each receive long-polls this long: a short poll samples only some of SQS's servers and may answer empty while
letters wait, so an empty answer would not mean an empty queue (every list and redrive ends on one)."""
_MAX_REPLAY_RECORDS: Final = 10_000
_PUT_RECORDS_MAX_BYTES: Final = 4 * 1024 * 1024
"""PutRecords takes 500 records and 5 MiB (data and partition keys) per call; a margin is kept."""
FAILURE_PREFIX: Final = "aws/lambda/"
"""Where Lambda writes a Kinesis mapping's S3 on-failure records (aws/lambda/<mapping UUID>/<shard>/...)."""


@dataclass(frozen=True, slots=True)
class KinesisBatch:
    """A Kinesis batch Lambda gave up on (its on-failure record)."""

    stream_arn: str
    shard_id: str
    start_sequence_number: str
    end_sequence_number: str
    size: int
    condition: str


@dataclass(frozen=True, slots=True)
class Letter:
    """One message of the dead-letter queue."""

    message_id: str
    receipt_handle: str
    body: str
    sent_ms: int
    receive_count: int
    error_code: str | None = None
    error_message: str | None = None
    source: str | None = None
    """ARN of the queue or stream the record came from (poison only)."""
    source_record_id: str | None = None
    body_encoding: str | None = None
    message_group_id: str | None = None
    """The message group of a FIFO dead-letter queue's message (a redrive to a FIFO queue keeps it)."""
    source_shard: str | None = None
    """The Kinesis shard of the record (poison from a stream): its sequence number is unique within it only."""

    @property
    def source_record(self) -> SentRecord | None:
        """Which record of its source this letter's message was (poison only): how a redrive knows its own."""
        if self.source_record_id is None:
            return None
        source = self.source or ""
        if source.startswith("arn:") and ":kinesis:" in source:
            return SentRecord(stream_name(source), self.source_shard, self.source_record_id)
        return SentRecord(None, None, self.source_record_id)

    @property
    def kind(self) -> str:
        """``poison``, ``kinesis-batch`` (metadata of a given-up batch) or ``message`` (moved by SQS)."""
        if self.error_code is not None:
            return "poison"
        if self.kinesis_batch is not None:
            return "kinesis-batch"
        return "message"

    @property
    def reason(self) -> str:
        """What ``--reason`` aims at: the ``tally.error_code``, else the kind (``message``, ``kinesis-batch``)."""
        return self.error_code or self.kind

    @property
    def payload(self) -> bytes:
        """The original body as the producer sent it (base64 decoded when ``tally.body_encoding`` says so)."""
        if self.body_encoding == "base64":
            try:
                return base64.b64decode(self.body, validate=True)
            except binascii.Error as exc:
                raise OperatorError(f"dead letter {self.message_id}: body is not valid base64") from exc
        if self.body_encoding == "empty":
            return b""
        return self.body.encode("utf-8")

    @property
    def kinesis_batch(self) -> KinesisBatch | None:
        if self.error_code is not None or not self.body.startswith("{"):
            return None
        try:
            return _batch_info(json.loads(self.body))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _batch_info(document: Any) -> KinesisBatch:
    """The ``KinesisBatchInfo`` of an on-failure record (SQS message body or S3 object)."""
    info = document["KinesisBatchInfo"]
    return KinesisBatch(
        stream_arn=info["streamArn"],
        shard_id=info["shardId"],
        start_sequence_number=info["startSequenceNumber"],
        end_sequence_number=info["endSequenceNumber"],
        size=int(info["batchSize"]),
        condition=str(document.get("requestContext", {}).get("condition", "")),
    )


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One Kinesis record as the function was invoked with it: its data (decoded) and partition key."""

    data: bytes
    partition_key: str
    sequence_number: str


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A given-up Kinesis batch kept whole in the S3 failure bucket: the object and what it holds."""

    key: str
    batch: KinesisBatch
    records: tuple[StreamRecord, ...]
    last_modified_ms: int = 0


def parse_failure_object(key: str, body: bytes, last_modified_ms: int = 0) -> StoredBatch:
    """Read one S3 on-failure object (Lambda's invocation record of a Kinesis batch).

    The metadata is the record an SQS destination receives (``KinesisBatchInfo``, ``requestContext``);
    ``payload`` is the invocation's event, ``{"Records": [...]}`` with each record's data base64-encoded
    as the function received it. A ``payload`` given as a JSON string is read too (the documentation
    shows the record, not its serialisation). Anything else is an :class:`OperatorError` naming the key.
    """
    try:
        document = json.loads(body)
        batch = _batch_info(document)
        payload = document["payload"]
        if isinstance(payload, str):
            payload = json.loads(payload)
        records = tuple(
            StreamRecord(
                data=base64.b64decode(record["kinesis"]["data"], validate=True),
                partition_key=str(record["kinesis"]["partitionKey"]),
                sequence_number=str(record["kinesis"]["sequenceNumber"]),
            )
            for record in payload["Records"]
        )
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise OperatorError(
            f"s3 object {key}: not a Lambda invocation record of a Kinesis batch with its payload ({exc!r})"
        ) from exc
    if not records:
        raise OperatorError(f"s3 object {key}: its payload holds no records")
    return StoredBatch(key, batch, records, last_modified_ms)


def list_failed_batches(s3: S3Client, bucket: str, *, limit: int | None = None) -> list[StoredBatch]:
    """The given-up batches kept in the S3 failure bucket, oldest first (objects that are not Lambda's
    invocation records raise :class:`OperatorError`)."""
    return [_read_object(s3, bucket, key, modified) for key, modified in _failure_keys(s3, bucket, limit)]


def _failure_keys(s3: S3Client, bucket: str, limit: int | None) -> list[tuple[str, int]]:
    keys: list[tuple[str, int]] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=FAILURE_PREFIX):
            keys.extend((obj["Key"], int(obj["LastModified"].timestamp() * 1000)) for obj in page.get("Contents", []))
    except (ClientError, BotoCoreError) as exc:
        raise OperatorError(f"cannot list the failure bucket {bucket}: {exc}") from exc
    keys.sort(key=lambda item: (item[1], item[0]))
    return keys if limit is None else keys[:limit]


def _read_object(s3: S3Client, bucket: str, key: str, last_modified_ms: int) -> StoredBatch:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (ClientError, BotoCoreError) as exc:
        raise OperatorError(f"cannot read s3://{bucket}/{key}: {exc}") from exc
    return parse_failure_object(key, body, last_modified_ms)


def list_letters(sqs: SQSClient, dlq_url: str, *, limit: int | None = None) -> list[Letter]:
    """Every message of the dead-letter queue (up to ``limit``), oldest first, left in the queue."""
    letters: list[Letter] = []
    seen: set[str] = set()
    try:
        while limit is None or len(letters) < limit:
            batch = _receive(sqs, dlq_url, _LIST_VISIBILITY_S)
            if not batch:
                break
            fresh = [letter for letter in batch if letter.message_id not in seen]
            seen.update(letter.message_id for letter in batch)
            letters.extend(fresh)
            if not fresh:
                break
        _release(sqs, dlq_url, letters)
    except (ClientError, BotoCoreError) as exc:
        raise OperatorError(f"cannot read the dead-letter queue {dlq_url}: {exc}") from exc
    letters.sort(key=lambda letter: letter.sent_ms)
    return letters if limit is None else letters[:limit]


class CountedLookup(Protocol):
    """Which messages count already (``tally.store.counted.DynamoDBCountedLookup``)."""

    def counted(self, digests: Mapping[str, bytes]) -> frozenset[str]:
        """The message ids of ``digests`` (id -> content digest) whose markers count that very content."""
        ...


def counted_letters(
    letters: Iterable[Letter],
    lookup: CountedLookup,
    defaults: CounterDefaults = NO_DEFAULTS,
    views: CounterViews = NO_VIEWS,
) -> frozenset[str]:
    """The (dead-letter queue) ids of the letters whose message already counts, content and all.

    A letter's body is decoded as the function decodes it (``defaults``: the deployment's default deltas,
    ``views``: its views, which an event's ``dims`` must fit); a body that does not decode, or a given-up Kinesis
    batch's metadata, is never counted here.
    """
    by_id: dict[str, list[str]] = {}
    digests: dict[str, bytes] = {}
    for letter in letters:
        if letter.kinesis_batch is not None or not letter.payload:
            continue
        message = decode_message(letter.payload, defaults=defaults, views=views)
        if not isinstance(message, Message):
            continue
        digest = content_digest(message)
        if digests.setdefault(message.message_id, digest) != digest:
            continue  # two contents under one id in the queue: only the first is asked about
        by_id.setdefault(message.message_id, []).append(letter.message_id)
    if not digests:
        return frozenset()
    try:
        counted = lookup.counted(digests)
    except StoreError as exc:
        raise OperatorError(f"cannot read the idempotency markers: {exc}") from exc
    return frozenset(letter_id for message_id in counted for letter_id in by_id.get(message_id, []))


def skipped_as_counted(letter: Letter, counted: frozenset[str]) -> bool:
    """Whether a redrive deletes ``letter`` instead of sending it: a refusal (a code) that no longer holds."""
    return letter.message_id in counted and letter.error_code is not None and letter.error_code not in COUNTED_REFUSALS


@dataclass(frozen=True, slots=True)
class SentRecord:
    """A record a redrive put in a source: an SQS message id (unique), or a Kinesis stream, shard and sequence
    number (unique within the shard only: moto numbers each shard's records 1, 2, 3, ...)."""

    stream: str | None
    shard: str | None
    record_id: str


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a redrive sends bodies: a queue URL or a stream (name or ARN)."""

    queue_url: str | None = None
    stream: str | None = None

    def __post_init__(self) -> None:
        if self.queue_url is not None and self.stream is not None:
            raise ValueError("a redrive destination is a queue or a stream, not both")


@dataclass(frozen=True, slots=True)
class Skipped:
    letter: Letter
    reason: str


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What a redrive did: letters re-sent (by kind), records replayed, and what stayed and why."""

    redriven: tuple[Letter, ...] = ()
    replayed_records: int = 0
    skipped: tuple[Skipped, ...] = ()
    destinations: frozenset[str] = field(default_factory=frozenset)
    replayed_objects: tuple[str, ...] = ()
    """Keys of the S3 failure bucket's objects whose records were re-put (and the objects deleted)."""
    skipped_objects: tuple[tuple[str, str], ...] = ()
    """(key, reason) of the objects left in the bucket."""
    counted: tuple[Letter, ...] = ()
    """Refused letters whose message counts already: deleted, not sent (or, in a dry run, to be)."""
    not_aimed: int = 0
    """Letters left alone because ``reasons`` did not name their reason."""
    dry_run: bool = False
    """Nothing was sent or deleted: ``redriven``, ``counted`` and ``replayed_objects`` say what would be."""
    returned: int = 0
    """Dead letters of what this redrive sent, refused again (poison comes back): left in the queue."""

    @property
    def ok(self) -> bool:
        return not self.skipped and not self.skipped_objects


@dataclass
class _Redrive:
    sqs: SQSClient
    kinesis: KinesisClient | None
    dlq_url: str
    destination: Destination
    default_queue_url: str | None
    reasons: frozenset[str] | None = None
    dry_run: bool = False
    counted_lookup: Callable[[Sequence[Letter]], frozenset[str]] | None = None
    redriven: list[Letter] = field(default_factory=list)
    counted: list[Letter] = field(default_factory=list)
    not_aimed: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    sent: set[SentRecord] = field(default_factory=set)
    """The records this redrive put in a source: a dead letter naming one was redriven and refused again."""
    _sent_in_streams: set[tuple[str, str]] = field(default_factory=set)
    returned: int = 0
    replayed: int = 0
    destinations: set[str] = field(default_factory=set)
    _queue_urls: dict[str, str] = field(default_factory=dict)

    def put(self, records: Iterable[SentRecord]) -> None:
        for record in records:
            self.sent.add(record)
            if record.stream is not None:
                self._sent_in_streams.add((record.stream, record.record_id))

    def came_back(self, letter: Letter) -> bool:
        """Whether ``letter`` is the dead letter of a record this redrive sent (counted in ``returned``). A letter
        from a function too old to name its shard is matched on its stream and sequence number alone."""
        record = letter.source_record
        if record is None:
            return False
        if record.shard is None and record.stream is not None:
            found = (record.stream, record.record_id) in self._sent_in_streams
        else:
            found = record in self.sent
        self.returned += found
        return found


def redrive(
    sqs: SQSClient,
    dlq_url: str,
    *,
    kinesis: KinesisClient | None = None,
    destination: Destination | None = None,
    default_queue_url: str | None = None,
    limit: int | None = None,
    progress: Callable[[Letter], None] | None = None,
    s3: S3Client | None = None,
    failure_bucket: str | None = None,
    reasons: frozenset[str] | None = None,
    dry_run: bool = False,
    counted: Callable[[Sequence[Letter]], frozenset[str]] | None = None,
) -> RedriveResult:
    """Send the dead letters back to be counted, deleting each once its destination accepted it.

    Each goes to ``destination`` if given, else to its ``tally.source``; a message SQS moved (no tally
    attributes) goes to ``default_queue_url`` (the stack's source queue). What cannot be sent stays in
    the queue and is reported in ``RedriveResult.skipped``. With ``failure_bucket`` (and ``s3``), the
    given-up batches kept there are replayed too, from the objects themselves (see the module).

    ``reasons``: only letters whose ``Letter.reason`` is one of these (given-up batches: ``kinesis-batch``);
    ``dry_run``: send and delete nothing, report what would be; ``counted``: the ids, among letters given to
    it, of those whose message counts already (``counted_letters``): refused ones are deleted, not sent.
    """
    run = _Redrive(
        sqs,
        kinesis,
        dlq_url,
        destination or Destination(),
        default_queue_url,
        reasons=reasons,
        dry_run=dry_run,
        counted_lookup=counted,
    )
    result = _redrive_letters(run, limit, progress)
    if failure_bucket is None or (reasons is not None and "kinesis-batch" not in reasons):
        return result
    if dry_run:
        keys = tuple(key for key, _ in (_failure_keys(s3, failure_bucket, None) if s3 is not None else []))
        return dataclasses.replace(result, replayed_objects=keys)
    if s3 is None or kinesis is None:
        raise OperatorError("an S3 and a Kinesis client are needed to replay the failure bucket")
    replayed, skipped, records, streams = _redrive_bucket(s3, kinesis, failure_bucket, destination or Destination())
    return dataclasses.replace(
        result,
        replayed_records=result.replayed_records + records,
        destinations=result.destinations | streams,
        replayed_objects=replayed,
        skipped_objects=skipped,
    )


def _redrive_bucket(
    s3: S3Client, kinesis: KinesisClient, bucket: str, destination: Destination
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], int, frozenset[str]]:
    """Re-put each stored batch's records into its stream (or ``destination.stream``), in order, and delete
    the object once every record was accepted. An object that cannot be read or replayed stays."""
    replayed: list[str] = []
    skipped: list[tuple[str, str]] = []
    streams: set[str] = set()
    records = 0
    for key, modified in _failure_keys(s3, bucket, None):
        try:
            stored = _read_object(s3, bucket, key, modified)
            stream = destination.stream or stored.batch.stream_arn
            _put_all(kinesis, stream, [(r.data, r.partition_key) for r in stored.records])
            s3.delete_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError, OperatorError) as exc:
            skipped.append((key, str(exc)))
            continue
        replayed.append(key)
        streams.add(stream)
        records += len(stored.records)
    return tuple(replayed), tuple(skipped), records, frozenset(streams)


def _put_all(kinesis: KinesisClient, stream: str, records: Sequence[tuple[bytes, str]]) -> list[SentRecord]:
    """PutRecords in order, in calls within its limits; any record refused is an :class:`OperatorError`
    (re-running the redrive puts the whole batch again: the markers drop what was counted). The records put."""
    put: list[SentRecord] = []
    for chunk in group(records, KINESIS_PUT_MAX_RECORDS, _PUT_RECORDS_MAX_BYTES, _record_bytes):
        put.extend(_put_chunk(kinesis, stream, chunk))
    return put


def _record_bytes(record: tuple[bytes, str]) -> int:
    data, key = record
    return len(data) + len(key.encode("utf-8"))


def _put_chunk(kinesis: KinesisClient, stream: str, chunk: Sequence[tuple[bytes, str]]) -> list[SentRecord]:
    put = kinesis.put_records(
        Records=[{"Data": data, "PartitionKey": key} for data, key in chunk], StreamName=stream_name(stream)
    )
    if put.get("FailedRecordCount"):
        raise OperatorError(f"{put['FailedRecordCount']} record(s) not accepted by {stream}")
    return [SentRecord(stream_name(stream), entry["ShardId"], entry["SequenceNumber"]) for entry in put["Records"]]


def _redrive_letters(run: _Redrive, limit: int | None, progress: Callable[[Letter], None] | None) -> RedriveResult:
    """One pass over the queue. A letter the pass does not delete (left alone, not sent, or only looked at in a
    dry run) stays hidden until the pass ends, so that every receive brings letters not seen yet: released at
    once, it would come back in the next receive and hide the rest (a receive returns at most 10)."""
    sqs, dlq_url = run.sqs, run.dlq_url
    handled: set[str] = set()
    kept: dict[str, Letter] = {}  # hidden until the pass ends: message id -> the letter, latest receipt handle

    def done() -> int:
        return len(run.redriven) + len(run.skipped) + len(run.counted)

    try:
        while limit is None or done() < limit:
            received = _receive(sqs, dlq_url, _REDRIVE_VISIBILITY_S)
            if not received:
                break
            # A letter kept since earlier in the pass and visible again (a pass longer than the visibility
            # timeout): this receive hid it again; its new receipt handle is the one that releases it.
            kept.update((letter.message_id, letter) for letter in received if letter.message_id in kept)
            batch = [letter for letter in received if letter.message_id not in handled]
            handled.update(letter.message_id for letter in batch)
            aimed = [letter for letter in batch if run.reasons is None or letter.reason in run.reasons]
            run.not_aimed += len(batch) - len(aimed)
            kept.update((letter.message_id, letter) for letter in batch if letter not in aimed)
            counted = run.counted_lookup(aimed) if run.counted_lookup is not None and aimed else frozenset()
            for letter in aimed:
                if (limit is not None and done() >= limit) or run.came_back(letter):
                    kept[letter.message_id] = letter  # beyond the limit, or redriven by this run and refused again
                    continue
                if not _redrive_one(run, letter, counted=skipped_as_counted(letter, counted)):
                    kept[letter.message_id] = letter
                if progress is not None:
                    progress(letter)
    except (ClientError, BotoCoreError) as exc:
        raise OperatorError(f"redrive from {dlq_url} stopped: {exc}") from exc
    finally:
        with contextlib.suppress(ClientError, BotoCoreError):
            _release(sqs, dlq_url, kept.values())
    return RedriveResult(
        tuple(run.redriven),
        run.replayed,
        tuple(run.skipped),
        frozenset(run.destinations),
        counted=tuple(run.counted),
        not_aimed=run.not_aimed,
        dry_run=run.dry_run,
        returned=run.returned,
    )


def _redrive_one(run: _Redrive, letter: Letter, *, counted: bool) -> bool:
    """Send ``letter`` back and delete it, or delete it unsent when it ``counted`` already (in a dry run,
    only record which it would be); whether it left the queue."""
    if run.dry_run:
        (run.counted if counted else run.redriven).append(letter)
        return False
    if counted:
        run.sqs.delete_message(QueueUrl=run.dlq_url, ReceiptHandle=letter.receipt_handle)
        run.counted.append(letter)
        return True
    batch = letter.kinesis_batch
    try:
        sent = _replay(run, batch) if batch is not None else _resend(run, letter)
    except (ClientError, BotoCoreError, OperatorError) as exc:
        run.skipped.append(Skipped(letter, str(exc)))
        return False
    if isinstance(sent, Skipped):
        run.skipped.append(sent)
        return False
    run.sqs.delete_message(QueueUrl=run.dlq_url, ReceiptHandle=letter.receipt_handle)
    run.redriven.append(letter)
    return True


def _resend(run: _Redrive, letter: Letter) -> Skipped | None:
    queue_url, stream = _destination_of(run, letter)
    payload = letter.payload
    if not payload:
        return Skipped(letter, "empty body: nothing to count")
    if queue_url is not None:
        if letter.body_encoding == "base64":
            return Skipped(letter, "the body is not text SQS can carry (tally.body_encoding=base64): use --to-stream")
        body = payload.decode("utf-8")
        if queue_url.endswith(".fifo"):
            # SQS requires both on a FIFO queue. The group: the letter's own (the producer's, kept by SQS's
            # move and by tally.dead_letter_sender), so the message rejoins its order. The deduplication id: this dead
            # letter's id, never the producer's, which SQS would drop as a duplicate of the original send
            # for five minutes; the same letter redriven twice (a redrive that died before deleting it) is
            # dropped by SQS, or else by the markers.
            response = run.sqs.send_message(
                QueueUrl=queue_url,
                MessageBody=body,
                MessageGroupId=letter.message_group_id or "tally-redrive",
                MessageDeduplicationId=letter.message_id,
            )
        else:
            response = run.sqs.send_message(QueueUrl=queue_url, MessageBody=body)
        run.put([SentRecord(None, None, response["MessageId"])])
        run.destinations.add(queue_url)
        return None
    if stream is None or run.kinesis is None:
        return Skipped(letter, "no destination: give a queue or a stream to redrive to")
    put = run.kinesis.put_record(
        Data=payload, PartitionKey=partition_key(payload, letter), StreamName=stream_name(stream)
    )
    run.put([SentRecord(stream_name(stream), put["ShardId"], put["SequenceNumber"])])
    run.destinations.add(stream)
    return None


def _destination_of(run: _Redrive, letter: Letter) -> tuple[str | None, str | None]:
    if run.destination.queue_url is not None or run.destination.stream is not None:
        return run.destination.queue_url, run.destination.stream
    source = letter.source or ""
    if source.startswith("arn:") and ":sqs:" in source:
        return _queue_url(run, source), None
    if source.startswith("arn:") and ":kinesis:" in source:
        return None, source
    return run.default_queue_url, None


def _queue_url(run: _Redrive, queue_arn: str) -> str:
    if queue_arn not in run._queue_urls:
        parts = queue_arn.split(":")
        if len(parts) != 6:
            raise OperatorError(f"not a queue ARN: {queue_arn!r}")
        account, name = parts[4], parts[5]
        run._queue_urls[queue_arn] = run.sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    return run._queue_urls[queue_arn]


def _replay(run: _Redrive, batch: KinesisBatch) -> Skipped | None:
    """Re-put the given-up batch's records (same data, same partition keys) into its stream."""
    if run.kinesis is None:
        raise OperatorError("a Kinesis client is needed to replay a Kinesis batch")
    stream = run.destination.stream or batch.stream_arn
    iterator = run.kinesis.get_shard_iterator(
        StreamName=stream_name(batch.stream_arn),
        ShardId=batch.shard_id,
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        StartingSequenceNumber=batch.start_sequence_number,
    )["ShardIterator"]
    end = int(batch.end_sequence_number)
    records: list[dict[str, Any]] = []
    while iterator and len(records) < _MAX_REPLAY_RECORDS:
        response = run.kinesis.get_records(ShardIterator=iterator, Limit=1000)
        fetched = response["Records"]
        records.extend(record for record in fetched if int(record["SequenceNumber"]) <= end)  # type: ignore[misc]
        if not fetched or int(fetched[-1]["SequenceNumber"]) >= end:
            break
        iterator = response.get("NextShardIterator", "")
    if not records or records[0]["SequenceNumber"] != batch.start_sequence_number:
        raise OperatorError(
            f"records {batch.start_sequence_number}..{batch.end_sequence_number} of {batch.shard_id} are no longer "
            "in the stream (trimmed after its retention)"
        )
    run.put(_put_all(run.kinesis, stream, [(record["Data"], record["PartitionKey"]) for record in records]))
    run.replayed += len(records)
    run.destinations.add(stream)
    return None


def partition_key(payload: bytes, letter: Letter) -> str:
    """As the producer library chooses it: the key of a single-event message, else the message id."""
    try:
        document = json.loads(payload)
    except ValueError:
        document = None
    if isinstance(document, dict):
        for field_name in ("key", "id"):
            value = document.get(field_name)
            if isinstance(value, str) and 0 < len(value) <= 256:
                return value
    return (letter.source_record_id or letter.message_id)[:256]


def stream_name(stream: str) -> str:
    """The name of a stream given by name or ARN (``arn:aws:kinesis:<region>:<account>:stream/<name>``)."""
    return stream.rsplit(":stream/", 1)[-1]


def _receive(sqs: SQSClient, queue_url: str, visibility_s: int) -> list[Letter]:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=SQS_BATCH_MAX_ENTRIES,
        VisibilityTimeout=visibility_s,
        WaitTimeSeconds=RECEIVE_WAIT_S,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return [_letter(message) for message in response.get("Messages", [])]


def _letter(message: Any) -> Letter:
    attributes = message.get("MessageAttributes", {})

    def text(name: str) -> str | None:
        value = attributes.get(name, {}).get("StringValue")
        return str(value) if value is not None else None

    system = message.get("Attributes", {})
    return Letter(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        sent_ms=int(system.get("SentTimestamp", 0)),
        receive_count=int(system.get("ApproximateReceiveCount", 0)),
        error_code=text(ERROR_CODE),
        error_message=text(ERROR_MESSAGE),
        source=text(SOURCE),
        source_record_id=text(SOURCE_RECORD_ID),
        body_encoding=text(BODY_ENCODING),
        message_group_id=system.get("MessageGroupId"),
        source_shard=text(SOURCE_SHARD),
    )


def _release(sqs: SQSClient, queue_url: str, letters: Iterable[Letter]) -> None:
    """Make the letters visible again at once (they were only being read)."""
    pending: Sequence[Letter] = list(letters)
    for start in range(0, len(pending), SQS_BATCH_MAX_ENTRIES):
        chunk = pending[start : start + SQS_BATCH_MAX_ENTRIES]
        sqs.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
                for index, letter in enumerate(chunk)
            ],
        )
