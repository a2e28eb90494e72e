"""The chaos run's archive: a bucket on moto's S3 that every consumer writes to, and its verdict after the run.

Every consumer archives what it counts (``tally.post_commit.archive``, through the production wiring, on an S3
client of its own with its own faults: ``tally_local.chaos.faults.ArchiveChaos``). After the run the archive is
read back and recounted (``tally.audit.recount``, with the run's windows and start values, on the run's one
virtual clock: no tolerance between clocks), and the recount must equal what the tables hold:

- every all-time counter of every key the table or the recount names (a message counted but not archived shows
  as a counter short; a refused message archived, or a counting archived twice under two commits, as a counter
  over);
- every window still kept that the table or the recount names, its counters and distinct counts (the table read
  whole after the run's final close: window items, and windows still on key or day items);
- every gauge and distinct count (all-time, and per window), except on the run's ``refused_keys``, whose gauge
  and member writes DynamoDB refuses for good: their messages count (so are archived) and leave nothing there;
- and no record's content may differ from its digest.

A counter the recount cannot order against a reset (``Recount.inexact``) is counted as unjudged, not wrong. A key
whose windows it cannot place (``Recount.unplaced``) fails the run: every marker is this code's, and keeps the
receive time a later delivery's copy needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from tally.archive_writer import S3ArchiveWriter
from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally.client_config import CLIENT_CONFIG
from tally.core.items import ALL_TIME
from tally.core.views import NO_VIEWS
from tally.core.windows import parse_window_id
from tally.post_commit.archive import DEFAULT_PREFIX
from tally.reader.dynamodb import add_into
from tally.store.requests import scan_all_time_items
from tally.store.schema import (
    counter_item_of,
    counters_from_item,
    distinct_from_item,
    open_windows_from_item,
)
from tally_local.kit.clients import local_client

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

    from tally.audit.recount import Recount
    from tally.core.archive import ArchiveRecord
    from tally.core.defaults import CounterDefaults
    from tally.core.ledger import MarkerRecord
    from tally.core.views import CounterViews
    from tally.core.windows import WindowSpec
    from tally_local.chaos.check import PatternReads

BUCKET = "tally-chaos-archive"


@dataclass(frozen=True, slots=True)
class CountedMessages:
    """What the harness knows of the messages it sent: their ids, their markers (what the table counted, after
    the run) and each one's history (``tally_local.chaos.ledger.MessageTrail``)."""

    message_ids: Iterable[str]
    read_marker: Callable[[str], MarkerRecord | None]
    history: Callable[[str], Sequence[str]]


@dataclass(frozen=True, slots=True)
class ArchiveSite:
    """Where a run's archive lives: moto's server and the bucket on it."""

    endpoint_url: str
    bucket: str = BUCKET

    def client(self) -> S3Client:
        client: S3Client = local_client("s3", self.endpoint_url, region="us-east-1", config=CLIENT_CONFIG)
        return client

    def writer(self, client: S3Client | None = None) -> S3ArchiveWriter:
        return S3ArchiveWriter(client or self.client(), self.bucket)

    def create(self) -> ArchiveSite:
        self.client().create_bucket(Bucket=self.bucket)
        return self


@dataclass(frozen=True, slots=True)
class ArchiveVerdict:
    """The recount of the run's archive against the tables."""

    records: int
    """Records read back (copies included)."""
    countings: int
    """Distinct (message id, commit)."""
    counters_checked: int
    counters_wrong: int
    windows_checked: int
    windows_wrong: int
    patterns_checked: int
    """Gauges and distinct counts."""
    patterns_wrong: int
    unjudged: int
    """Counters the recount cannot give exactly (a reset it cannot order): not judged."""
    unplaced: int
    """Keys whose windows the recount cannot place (an event without ``ts`` archived only by a later delivery whose
    copy names no placing time): every marker of a run is this code's, which keeps that time, so a run must have
    none (``ok``)."""
    placed_by_markers: int
    """Countings archived only by later deliveries whose copies place events without ``ts`` by the receive time
    their markers kept (``ArchiveRecord.placed_ms``): the situation that needs it."""
    digest_mismatches: int
    written_before_landing: int = 0
    """Countings whose first record was written while their fenced batch's item writes were landing
    (``ArchiveRecord.before_landing``): the archive's write beside the landing, the situation that needs the flag."""
    examples: tuple[str, ...] = field(default_factory=tuple)
    gaps: tuple[ArchiveGap, ...] = ()
    """The messages whose counting the archive misses, or holds with other content or under another commit."""

    @property
    def ok(self) -> bool:
        return (
            self.counters_wrong == 0
            and self.windows_wrong == 0
            and self.patterns_wrong == 0
            and self.digest_mismatches == 0
            and self.unplaced == 0
            and self.countings > 0
            and not self.gaps
        )

    @property
    def gap_count(self) -> int:
        """Counted messages the archive misses or holds otherwise (``gaps``)."""
        return len(self.gaps)


@dataclass(frozen=True, slots=True)
class ArchiveGap:
    """A counted message the archive does not hold as its marker counted it, with what the run did to it."""

    message_id: str
    problem: str
    """``not archived``, ``other content`` (a record under its commit whose digest is not its marker's), or
    ``another commit`` (records under a commit that is not its marker's, none under its marker's)."""
    detail: str
    history: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.message_id}: {self.problem} ({self.detail}); history: " + " | ".join(self.history)


def archive_gaps(
    records: Sequence[ArchiveRecord],
    message_ids: Iterable[str],
    read_marker: Callable[[str], MarkerRecord | None],
    history: Callable[[str], Sequence[str]] = lambda _: (),
) -> list[ArchiveGap]:
    """The messages of ``message_ids`` whose marker (what the table counted) the archive does not hold: no record
    at all, no record under the marker's commit, or a record under it with another digest. Ids without a marker
    counted nothing and are skipped; so are ids whose records name their marker's commit and digest."""
    by_id: dict[str, list[ArchiveRecord]] = {}
    for record in records:
        by_id.setdefault(record.id, []).append(record)
    gaps: list[ArchiveGap] = []
    for message_id in sorted(set(message_ids)):
        marker = read_marker(message_id)
        if marker is None:
            continue
        commit = marker.commit.commit
        held = by_id.get(message_id, [])
        under = [record for record in held if record.commit == commit]
        seen = "; ".join(_record_line(record) for record in held) or "none"
        problem = None
        if not held:
            problem = "not archived"
        elif not under:
            problem = "another commit"
        elif marker.digest is not None and any(record.digest != marker.digest.hex() for record in under):
            problem = "other content"
        if problem is not None:
            detail = f"marker {commit} digest {marker.digest.hex()[:12] if marker.digest else '-'}; records: {seen}"
            gaps.append(ArchiveGap(message_id, problem, detail, tuple(history(message_id))))
    return gaps


def _record_line(record: ArchiveRecord) -> str:
    here = "counted here" if record.counted_here else "marker met"
    return (
        f"{record.commit} digest {record.digest[:12]} {here} archived_ms {record.archived_ms} "
        f"delivery {record.delivery[:8]} seq {record.seq}"
    )


def judge_archive(
    site: ArchiveSite,
    *,
    windows: WindowSpec,
    defaults: CounterDefaults,
    views: CounterViews = NO_VIEWS,
    client: DynamoDBClient,
    counters_table: str,
    patterns: PatternReads,
    refused_keys: frozenset[str],
    now_ms: int,
    counted: CountedMessages | None = None,
) -> ArchiveVerdict:
    """Recount ``site``'s archive and compare it with the counters table, read whole (two ``Scan`` s); with
    ``counted``, name each counted message the archive misses or holds otherwise (``archive_gaps``)."""
    records = list(read_archive(site.client(), site.bucket, DEFAULT_PREFIX))
    gaps = archive_gaps(records, counted.message_ids, counted.read_marker, counted.history) if counted else []
    result = recount(records, windows=windows, defaults=defaults, clock_tolerance_ms=0, views=views)
    examples: list[str] = []
    counters = _compare_counters(result, stored_all_time(client, counters_table), examples)
    stored_windows, stored_members = stored_window_values(client, counters_table)
    windowed = _compare_windows(
        result,
        windows,
        (stored_windows, stored_members),
        now_ms=now_ms,
        refused=refused_keys,
        examples=examples,
    )
    pattern_figures = _compare_patterns(result, patterns, refused_keys, examples)
    examples.extend(f"archived content differs from its digest: {mid}" for mid in result.digest_mismatches[:3])
    examples.extend(f"windows of {key} not placed: {why}" for key, why in list(result.unplaced.items())[:3])
    examples[:0] = [gap.describe() for gap in gaps[:5]]
    return ArchiveVerdict(
        records=result.records,
        countings=result.messages,
        counters_checked=counters[0],
        counters_wrong=counters[1],
        windows_checked=windowed[0],
        windows_wrong=windowed[1],
        patterns_checked=pattern_figures[0],
        patterns_wrong=pattern_figures[1],
        unjudged=len(result.inexact),
        unplaced=len(result.unplaced),
        placed_by_markers=_placed_by_markers(records),
        digest_mismatches=len(result.digest_mismatches),
        written_before_landing=len({(record.id, record.commit) for record in records if record.before_landing}),
        examples=tuple(examples[:10]),
        gaps=tuple(gaps),
    )


def _placed_by_markers(records: Sequence[ArchiveRecord]) -> int:
    """Countings no committing invocation archived whose later copies name the placing time a marker kept."""
    here = {(record.id, record.commit) for record in records if record.counted_here}
    later = {(record.id, record.commit) for record in records if record.placed_ms is not None}
    return len(later - here)


WindowValues = dict[str, dict[str, dict[str, Decimal]]]
"""Key -> window id -> name -> value."""


def stored_all_time(client: DynamoDBClient, counters_table: str) -> dict[str, dict[str, Decimal]]:
    """Every key's and every view item's all-time counters, shards summed, by the key a recount names them by (a
    view item's derived key): one consistent ``Scan`` of the all-time items, views' included."""
    totals: dict[str, dict[str, Decimal]] = {}
    for item in scan_all_time_items(client, counters_table, views=True):
        add_into(totals.setdefault(counter_item_of(item).key, {}), counters_from_item(item))
    return totals


def stored_window_values(client: DynamoDBClient, counters_table: str) -> tuple[WindowValues, WindowValues]:
    """Every window's counters and distinct counts as the counters table holds them, shards summed: window items,
    and windows still on key items or day items (``w#`` attributes), added as ``tally.reader``'s series adds
    them. One consistent ``Scan`` after the run, when nothing moves any more."""
    found: WindowValues = {}
    members: WindowValues = {}
    pages = client.get_paginator("scan").paginate(TableName=counters_table, ConsistentRead=True)
    for page in pages:
        for item in page.get("Items", []):
            try:  # by both keys: a view's items share a partition (a view named "d" ends as a member partition)
                parts = counter_item_of(item)
            except ValueError:
                continue  # a distinct member's own item: counted in its set's count
            key, window = parts.key, parts.window
            for held, counters in open_windows_from_item(item).items():
                add_into(found.setdefault(key, {}).setdefault(held, {}), counters)
            if window != ALL_TIME:
                add_into(found.setdefault(key, {}).setdefault(window, {}), counters_from_item(item))
                add_into(members.setdefault(key, {}).setdefault(window, {}), distinct_from_item(item))
    return found, members


def _nonzero(values: Mapping[str, Decimal | int]) -> dict[str, Decimal]:
    return {name: Decimal(value) for name, value in values.items() if value}


def _compare_counters(
    result: Recount, stored_totals: Mapping[str, Mapping[str, Decimal]], examples: list[str]
) -> tuple[int, int]:
    """Every all-time counter of every key the table or the recount names."""
    checked = wrong = 0
    for key in sorted(stored_totals.keys() | result.counters.keys()):
        stored = _nonzero(stored_totals.get(key, {}))
        recounted = _nonzero(result.counters.get(key, {}))
        for name in sorted(stored.keys() | recounted.keys()):
            if (key, ALL_TIME, name) in result.inexact:
                continue
            checked += 1
            have, want = stored.get(name, Decimal(0)), recounted.get(name, Decimal(0))
            if have != want:
                wrong += 1
                examples.append(f"{key}/{name}: stored {have}, the archive recounts {want}")
    return checked, wrong


def _compare_windows(
    result: Recount,
    spec: WindowSpec,
    stored: tuple[WindowValues, WindowValues],
    *,
    now_ms: int,
    refused: frozenset[str],
    examples: list[str],
) -> tuple[int, int]:
    """Every window still kept that the table or the recount names: its counters, and its distinct counts
    (a refused key's member writes never land: its windows hold none)."""
    stored_windows, stored_members = stored
    recounted_members: WindowValues = {}
    for key, sets in result.distinct.items():
        for (window, name), count in sets.items():
            if window != ALL_TIME and key not in refused:
                recounted_members.setdefault(key, {}).setdefault(window, {})[name] = Decimal(count)
    checked = wrong = 0
    pairs = {(k, w) for k, ws in stored_windows.items() for w in ws} | {
        (k, w) for k, ws in result.windows.items() for w in ws
    }
    for key, window in sorted(pairs):
        if key in result.unplaced:
            continue  # which window an event went to is unknown (ArchiveVerdict.unplaced, which fails the run)
        name, start = parse_window_id(window)
        expiry = spec.unit(name).expires_at_s(start)
        if expiry is not None and expiry * 1000 <= now_ms:
            continue  # past its retention: TTL deletes it, whatever it holds
        have = _nonzero(stored_windows.get(key, {}).get(window, {}))
        want = _nonzero(result.windows.get(key, {}).get(window, {}))
        have_members = _nonzero(stored_members.get(key, {}).get(window, {}))
        want_members = _nonzero(recounted_members.get(key, {}).get(window, {}))
        checked += 1
        if have != want or (key not in refused and have_members != want_members):
            wrong += 1
            examples.append(
                f"window {key} {window}: stored {have} {have_members}, the archive recounts {want} {want_members}"
            )
    return checked, wrong


def _compare_patterns(
    result: Recount, patterns: PatternReads, refused: frozenset[str], examples: list[str]
) -> tuple[int, int]:
    """Every gauge and all-time distinct count the recount names (a refused key's writes never land)."""
    checked = wrong = 0
    for key, slots in sorted(result.gauges.items()):
        if key in refused:
            continue
        stored = patterns.gauges(key)
        for (kind, name), value in sorted(slots.items()):
            checked += 1
            found = stored.get(str(kind), {}).get(name)
            same = (
                found == value
                if isinstance(value, str) or found is None or isinstance(found, str)
                else (Decimal(found) == Decimal(value))
            )
            if not same:
                wrong += 1
                examples.append(f"{key} gauge {kind} {name}: stored {found!r}, the archive recounts {value!r}")
    for key, sets in sorted(result.distinct.items()):
        if key in refused:
            continue
        stored_counts = patterns.distinct(key)
        for (window, name), count in sorted(sets.items()):
            if window != ALL_TIME:
                continue  # per window: judged with the windows
            checked += 1
            if stored_counts.get(name) != count:
                wrong += 1
                examples.append(
                    f"{key} distinct {name}: stored {stored_counts.get(name)}, the archive recounts {count}"
                )
    return checked, wrong
