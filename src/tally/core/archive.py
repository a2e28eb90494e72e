"""The archive of what was counted: one record per counted message, as it lands in S3.

Every message the function counts is written to the archive after its commit (``tally.post_commit.archive``),
with what a recount needs (``tally.audit.recount``) and what a person needs to trace a number to its events:

- the message: its ``id``, its content (``events``, exactly as decoded, ``dims`` included: every number as its
  exact decimal text) and its content ``digest`` (the one its marker keeps: ``tally.core.digest``);
- the commit that counted it (``commit``, ``committed_ms``: ``tally.core.ledger.Commit``), so that copies of a
  record written again by a retry or a redelivery are dropped at read by (``id``, ``commit``), while a message
  counted twice by design (re-sent past the marker horizon: two markers, two commits) stays twice;
- when its deltas certainly had landed (``archived_ms``, read after the commit, before the write) and, within
  one invocation, its place in the source's order (``delivery``, ``seq``, ``counted_here``): what orders a reset
  against the other messages of its key;
- where it came from (``origin``: the source ARN and partition key or message group, ``record_id``,
  ``received_ms``: the time that places an event without ``ts`` in its windows) and, on a copy a later delivery
  wrote, the committing delivery's receive time as the message's marker keeps it (``placed_ms``).

**Format** (chosen by measurement: docs/explanation/archive.md): gzip-compressed JSON lines, one object per
invocation, under Hive-style partitions of the hour it was written, ``<prefix>dt=YYYY-MM-DD/hour=HH/<archived
ms>-<delivery>.jsonl.gz``, which Athena (partition projection) and DuckDB (``hive_partitioning``) both prune.
Numbers are JSON numbers written as their exact decimal text (``1.50``, ``1E-130``, 38-digit integers), read
back exactly (an integer literal as an int, any other as a Decimal: a double's 17 digits would not hold a
DynamoDB Number); a ``latest`` gauge's text reading stays a JSON string. Absent optional fields are omitted
(Athena reads them as NULL).

Pure: no boto3, no clock; gzip and msgspec only.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

import msgspec

from tally.core.epochs import FencedBatch
from tally.core.model import CounterEvent, Gauge, GaugeKind, Message

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from tally.core.ledger import Commit
    from tally.core.model import SourceRecord

ARCHIVE_VERSION: Final = 1
"""``v`` of a record written after its commit's deltas landed; a reader refuses a record of a later version than it
reads (``READ_VERSION``)."""
LANDING_VERSION: Final = 2
"""``v`` of a record written while its commit's deltas were still landing (``ArchiveRecord.before_landing``): a reader
of format 1 would take its ``archived_ms`` for a time by which they had landed, so it must refuse it."""
READ_VERSION: Final = LANDING_VERSION
"""The latest format this code reads."""
OBJECT_SUFFIX: Final = ".jsonl.gz"
CONTENT_TYPE: Final = "application/x-ndjson"
CONTENT_ENCODING: Final = "gzip"
GZIP_LEVEL: Final = 6
"""zlib's default: measured against levels 1 and 9 (docs/explanation/archive.md)."""


class ArchivedGauge(msgspec.Struct, frozen=True, gc=False):
    """A gauge reading: its kind (``max``, ``min``, ``latest``) and its value (a number, or a ``latest`` text)."""

    kind: str
    value: Any
    """``int | Decimal | str``: typed loosely because msgspec takes no union of two string-like types; the
    decoder reads a JSON number here exactly (``float_hook=Decimal``), a JSON string as text."""


class ArchivedEvent(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One event of a counted message, as decoded (default deltas filled in): what it counted."""

    key: str
    deltas: dict[str, int | Decimal] = msgspec.field(default_factory=dict)
    ts: int | None = None
    gauges: dict[str, ArchivedGauge] | None = None
    distinct: dict[str, str] | None = None
    reset: dict[str, int | Decimal] | None = None
    correction: bool = False
    dims: dict[str, str] | None = None
    """The event's dimensions: a recount derives its views from them as the commit did (``tally.core.views``)."""


class ArchiveRecord(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One counted message, as one line of an archive object (field names are the JSON's)."""

    v: int
    id: str
    commit: str
    committed_ms: int
    archived_ms: int
    delivery: str
    """The archive object (one per invocation) this record was written in."""
    seq: int
    """The message's place in its invocation's batch, in the source's order."""
    counted_here: bool
    """True: the invocation that wrote the record committed the message. False: it met the message's marker (a
    duplicate, or the redelivery that repairs a crash between a commit and its archive write)."""
    record_id: str
    received_ms: int
    events: tuple[ArchivedEvent, ...]
    digest: str = ""
    """The content digest in hex (empty: unknown, a message built without one)."""
    origin: dict[str, str] = msgspec.field(default_factory=dict)
    placed_ms: int | None = None
    """On a record a later delivery wrote (``counted_here`` False): the receive time that placed the message's events
    without ``ts`` in their windows, as its marker keeps it; this record's own ``received_ms`` is the later
    delivery's (the same for a redelivery of the counted record, another for a producer's re-send or a redrive).
    Absent: the committing invocation wrote it, or the marker kept none (no such event, or written before markers
    kept it)."""
    before_landing: bool = False
    """True: written while the deltas of its commit (a fenced journal batch, FENCED then) were still landing, so
    ``archived_ms`` does not bound their landing; an audit learns it from the batch's header instead
    (``tally.audit.cut``). Such a record is of format ``LANDING_VERSION``; absent (False) otherwise."""

    @property
    def placing_ms(self) -> int | None:
        """The receive time that placed this message's events without ``ts``, when this record knows it."""
        return self.received_ms if self.counted_here else self.placed_ms


_encoder: Final = msgspec.json.Encoder(decimal_format="number")
_decoder: Final = msgspec.json.Decoder(ArchiveRecord, float_hook=Decimal)


def archived_event(event: CounterEvent) -> ArchivedEvent:
    """An event as the archive keeps it."""
    gauges = (
        {name: ArchivedGauge(str(gauge.kind), gauge.value) for name, gauge in event.gauges.items()}
        if event.gauges
        else None
    )
    return ArchivedEvent(
        key=event.key,
        deltas=dict(event.deltas),
        ts=event.ts_ms,
        gauges=gauges,
        distinct=dict(event.distinct) if event.distinct else None,
        reset=dict(event.reset) if event.reset is not None else None,
        correction=event.correction,
        dims=dict(event.dims) if event.dims else None,
    )


def counter_event(event: ArchivedEvent) -> CounterEvent:
    """An archived event back into the core's ``CounterEvent`` (the same content digest as the one counted)."""
    gauges = (
        {name: Gauge(GaugeKind(gauge.kind), gauge.value) for name, gauge in event.gauges.items()}
        if event.gauges
        else None
    )
    return CounterEvent(
        event.key, event.deltas, event.ts, gauges, event.distinct or None, event.reset, event.correction, event.dims
    )


def archive_record(
    message: Message,
    commit: Commit,
    source: SourceRecord,
    *,
    digest: bytes,
    archived_ms: int,
    delivery: str,
    seq: int,
    counted_here: bool,
    before_landing: bool = False,
) -> ArchiveRecord:
    """The record of ``message``, counted by ``commit``, delivered as ``source``; ``before_landing`` when written
    while the commit's deltas were still landing."""
    return ArchiveRecord(
        v=LANDING_VERSION if before_landing else ARCHIVE_VERSION,
        id=message.message_id,
        commit=commit.commit,
        committed_ms=commit.committed_ms,
        archived_ms=archived_ms,
        delivery=delivery,
        seq=seq,
        counted_here=counted_here,
        record_id=source.record_id,
        received_ms=source.received_ms,
        events=tuple(archived_event(event) for event in message.events),
        digest=digest.hex(),
        origin=dict(source.origin),
        placed_ms=None if counted_here else commit.placed_ms,
        before_landing=before_landing,
    )


def record_message(record: ArchiveRecord) -> Message:
    """The message a record archives, as the core decoded it when it counted."""
    return Message(record.id, tuple(counter_event(event) for event in record.events))


def encode_records(records: Iterable[ArchiveRecord]) -> bytes:
    """An archive object's body: the records as JSON lines, gzip-compressed (``GZIP_LEVEL``, no file name or
    time in the header, so the same records always make the same bytes)."""
    lines = b"".join(_encoder.encode(record) + b"\n" for record in records)
    return gzip.compress(lines, compresslevel=GZIP_LEVEL, mtime=0)


class ArchiveFormatError(ValueError):
    """An archive object this code cannot read (not gzip, not JSON lines of records, a later version)."""


def decode_records(body: bytes) -> list[ArchiveRecord]:
    """The records of an archive object's body (gzip or plain JSON lines)."""
    try:
        text = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        records = [_decoder.decode(line) for line in text.splitlines() if line.strip()]
    except (OSError, EOFError, msgspec.DecodeError) as exc:
        raise ArchiveFormatError(f"not an archive object: {exc}") from exc
    for record in records:
        if record.v > READ_VERSION:
            raise ArchiveFormatError(f"record {record.id!r} is of format {record.v}; this code reads {READ_VERSION}")
        if record.before_landing and FencedBatch.parse(record.commit) is None:
            # Only a fenced batch's landing can run beside the archive write, and only its header tells an audit
            # when the deltas landed: any other commit here would leave its counting unplaceable forever.
            raise ArchiveFormatError(
                f"record {record.id!r} says it was written before its deltas landed, and its commit "
                f"{record.commit!r} is no fenced journal batch"
            )
    return records


def partition(at_ms: int) -> str:
    """The Hive-style partition of an instant: ``dt=YYYY-MM-DD/hour=HH`` (UTC)."""
    moment = datetime.fromtimestamp(at_ms / 1000, UTC)
    return f"dt={moment:%Y-%m-%d}/hour={moment:%H}"


def object_key(prefix: str, archived_ms: int, delivery: str) -> str:
    """Where an invocation's records go: ``<prefix>dt=.../hour=.../<archived ms>-<delivery>.jsonl.gz``.

    ``delivery`` is drawn once per write and kept through its retries, so a retried write (its answer lost)
    replaces the same object with the same bytes; another delivery of the same messages writes another object,
    whose duplicate records the reader drops by (id, commit).
    """
    return f"{prefix}{partition(archived_ms)}/{archived_ms:013d}-{delivery}{OBJECT_SUFFIX}"


def partitions_between(prefix: str, since_ms: int, until_ms: int) -> Sequence[str]:
    """The prefixes of every hour partition from ``since_ms`` to ``until_ms`` (inclusive), in order."""
    hour_ms = 3_600_000
    start = since_ms - since_ms % hour_ms
    return [f"{prefix}{partition(at)}/" for at in range(start, until_ms + 1, hour_ms)]
