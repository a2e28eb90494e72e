"""``tally audit``'s work: read the archive, recount it, read the table, judge every value, look again.

1. **Archive.** List the objects (all of them, or those written since ``Scope.since_ms`` less the deployment's
   future tolerance: an event counted in a window from then on cannot have been committed earlier), read them
   ``workers`` at a time, as stored (gzip'd JSON lines: what is kept in memory until the recount is done).
2. **Recount** the records of keys under the prefix with the core that counts (``tally.audit.recount``), split
   by key into ``processes`` shares, each in a process of its own (``tally.audit.shares``: the recount is pure
   Python, a core each); a small archive is recounted here. Repairs (``tally audit --fix``'s corrections) are set
   aside: they are not recounted (``tally.audit.corrections``).
3. **Table.** Read every key the recount names (and, in a full audit, every key the table holds: a ``Scan``,
   so a counter the archive knows nothing of is found) with ``CounterReader.states``, ``keys_per_read`` keys a
   read, several reads at once, each read's ``ReadInterval`` noted. Before each round of reads, the journal
   headers of the batches whose records were written before their deltas landed, and not yet seen landed, are
   read (``landings``): the cut places such a counting by when its batch was seen landed (``tally.audit.cut``),
   and a key it touches is judged against the cut until then.
4. **Archive again.** List what was written since the first listing began (less ``WRITE_SLACK_MS``), read it.
5. **Judge** each key (``tally.audit.compare``) against the countings its read can hold
   (``tally.audit.cut``): a key no new record touches against the recount of step 2; the others against a
   recount of their records before their read, the values a counting racing the read touches ``unsettled``.
6. **Look again**: the keys with a drifted or unsettled value are read again, and the archive listed again
   ``settle_s`` after that read (what committed before the read has been archived by then: the archive write
   follows its commit within the same invocation), up to ``attempts`` reads in all. Drift that stays is drift;
   a value live traffic keeps touching stays ``unsettled`` (never drift). Drift on a key the dead-letter queue
   holds messages of is ``pending`` (``waiting``). The first read is listed again at once: on a quiet table
   nothing is waited for, and whatever it shows drifted is read again with the pause.

``recheck(keys, ids)`` waits until the archive holds the given message ids (the repairs ``--fix`` published),
then judges ``keys`` again as in step 6.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import TYPE_CHECKING, Final, Protocol

from tally.audit.compare import Finding, Scope, Slot, Verdict, compare_key, recounted_slots, with_pending
from tally.audit.corrections import is_repair, repair_slots
from tally.audit.cut import ReadInterval, split
from tally.audit.objects import archive_keys, read_bodies, written_since
from tally.audit.recount import DEFAULT_CLOCK_TOLERANCE_MS, event_keys, gc_paused, recount
from tally.audit.shares import ShareSettings, merge, recount_share
from tally.core.archive import decode_records
from tally.core.defaults import NO_DEFAULTS
from tally.core.items import owner_key
from tally.core.views import NO_VIEWS
from tally.core.windows import MINUTE_MS

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

    from mypy_boto3_s3 import S3Client

    from tally.audit.recount import Recount
    from tally.core.archive import ArchiveRecord
    from tally.core.defaults import CounterDefaults
    from tally.core.views import CounterViews
    from tally.core.windows import WindowSpec
    from tally.reader import CounterReader, KeyState

SHARE_BYTES: Final = 8 * 1024 * 1024
"""Below this much archive (compressed, about 100,000 events), one process recounts it: starting others costs
more than it saves."""
MAX_PROCESSES: Final = 4
WRITE_SLACK_MS: Final = 15 * MINUTE_MS
"""How long after its ``archived_ms`` an archive object may appear (its ``PutObject`` retried within the
function's timeout, at most 15 minutes): the second listing starts this far before the first."""
CLOCK_TOLERANCE_MS: Final = 2_000
"""How far the auditor's clock may be from the functions' (``tally.audit.cut``): a machine synchronised by
NTP is within tens of milliseconds; the rest is margin, paid only in values read again."""


class Landings(Protocol):
    """Which of the given fenced batches have landed every item write (``tally.store.journal.landed_batches``)."""

    def __call__(self, batch_ids: Collection[str], /) -> set[str]: ...


class Progress(Protocol):
    """Where the auditor says what it is doing (a progress bar; ``NO_PROGRESS``)."""

    def phase(self, name: str, total: int | None = None) -> None: ...
    def advance(self, amount: int = 1) -> None: ...


class _Silent:
    def phase(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass


NO_PROGRESS: Final = _Silent()


@dataclass(frozen=True, slots=True)
class AuditSettings:
    spec: WindowSpec
    defaults: CounterDefaults = NO_DEFAULTS
    scope: Scope = field(default_factory=Scope)
    prefix: str = ""
    """Only keys that begin with it."""
    settle_s: float = 5.0
    attempts: int = 3
    tolerance_ms: int = CLOCK_TOLERANCE_MS
    recount_tolerance_ms: int = DEFAULT_CLOCK_TOLERANCE_MS
    workers: int = 16
    """Archive objects read at once."""
    processes: int | None = None
    """Processes the first recount is split over (None: the machine's cores, at most ``MAX_PROCESSES``, for an
    archive of ``SHARE_BYTES`` or more; one below)."""
    readers: int = 4
    """Reads of the table at once."""
    keys_per_read: int = 25
    views: CounterViews = NO_VIEWS
    """The deployment's ``CounterViews``: each view item an event counts in is recounted and compared like a key
    (under its item's key, ``tally.core.items.view_item_key``; in the scope of its event's key)."""


@dataclass(frozen=True, slots=True)
class AuditReport:
    findings: tuple[Finding, ...]
    """Every value compared (exact ones included), by key."""
    objects: int
    records: int
    countings: int
    repairs: tuple[ArchiveRecord, ...]
    """The repairs the archive holds (left out of the recount)."""
    digest_mismatches: tuple[str, ...]
    recounted_twice: tuple[str, ...]
    """Ids counted more than once with the same content: re-sent past the marker horizon (counted twice by
    design: not drift)."""
    reused_ids: tuple[str, ...]
    """Ids counted more than once with different content: a producer reused an id past the marker horizon."""
    reads: int
    """How many times the table was read for the keys that needed it most (1: no second look)."""
    last_counted: Mapping[str, int]
    """Drifted key -> the latest ``archived_ms`` of its countings (is it quiet enough for a reset repair?)."""
    started_ms: int
    finished_ms: int
    not_landed: tuple[str, ...] = ()
    """The fenced batches records written before their deltas landed name that no header read saw landed (all of
    them when the audit read no headers): only a copy written after the landing places their countings, and the
    values a counting not so placed touches are unsettled."""

    def with_verdict(self, *verdicts: Verdict) -> list[Finding]:
        return [finding for finding in self.findings if finding.verdict in verdicts]

    @property
    def keys(self) -> int:
        return len({finding.slot.key for finding in self.findings})

    def repair_generations(self) -> dict[tuple[str, str, int | None], int]:
        """(key, counter, time) -> repairs of it in the archive (``tally.audit.repairs``)."""
        seen: dict[tuple[str, str, int | None], set[str]] = {}
        for record in self.repairs:
            for slot in repair_slots(record):
                seen.setdefault(slot, set()).add(record.id)
        return {slot: len(ids) for slot, ids in seen.items()}


class Auditor:
    """One audit of one deployment's archive (``client``, ``bucket``, ``prefix``) against its counters table."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        archive_prefix: str,
        reader: CounterReader,
        settings: AuditSettings,
        *,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        sleep: Callable[[float], object] = time.sleep,
        progress: Progress = NO_PROGRESS,
        waiting: Callable[[set[str]], Mapping[str, int]] | None = None,
        landings: Landings | None = None,
    ) -> None:
        self.client, self.bucket, self.archive_prefix = client, bucket, archive_prefix
        self.reader = reader
        self.settings = settings
        self.clock, self.sleep, self.progress, self.waiting = clock, sleep, progress, waiting
        self.landings = landings
        """None: no header can be read (no markers table known), and a counting written before its deltas landed
        is never placed before a read (its values stay unsettled, never drift)."""
        self._before_landing: dict[str, set[str]] = {}
        """Commit (a fenced batch) -> the keys its records written before the landing touch."""
        self._landed: dict[str, int] = {}
        """Commit -> the time (this clock) by which a header read saw it landed; final once there."""
        self.bodies: list[bytes] = []
        """The first listing's objects, as stored."""
        self.later: list[ArchiveRecord] = []
        """The records of the objects listed later (repairs apart)."""
        self.repairs: list[ArchiveRecord] = []
        self.objects: set[str] = set()
        self._decoded: list[ArchiveRecord] | None = None
        self._identities: list[tuple[str, str, str]] = []
        self._last: dict[str, int] = {}
        self._read_count = 0
        self.started_ms = 0
        self._listed_ms = 0
        self._findings: dict[str, list[Finding]] = {}
        self._reads: dict[str, int] = {}
        self._mismatches: set[str] = set()
        self._uncertain_until_ms = 0
        """A read that starts after this places every counting found uncertain so far (its ``archived_ms`` plus
        the clocks' tolerance): the next look waits for it."""

    # ------------------------------------------------------------------------------------------ the audit
    def run(self) -> AuditReport:
        settings = self.settings
        self.started_ms = self.clock()
        since = settings.scope.since_ms
        self._listed_ms = self.started_ms
        self.progress.phase("listing the archive")
        if since is None:
            keys = list(archive_keys(self.client, self.bucket, self.archive_prefix))
        else:
            start = max(0, since - settings.spec.future_tolerance_ms)
            keys = list(written_since(self.client, self.bucket, self.archive_prefix, start))
        self.bodies = self._fetch(keys)
        first = self._recount_shares()
        wanted = {key for key in _recount_keys(first) if owner_key(key).startswith(settings.prefix)}
        if settings.scope.all_time and since is None:
            self.progress.phase("scanning the table")
            scanned = self.reader.all_time_totals(views=True)
            wanted |= {key for key in scanned if owner_key(key).startswith(settings.prefix)}
        states, reads = self._read_states(sorted(wanted))
        new = self._read_new()
        earliest = min((read.start_ms for read in reads.values()), default=self.clock())
        late = {key for key, archived in self._last.items() if archived + settings.tolerance_ms >= earliest}
        touched = _keys_of(new, settings.views) | late | self._unlanded_keys()
        dirty = {key for key in states if key in touched or owner_key(key) in touched}
        for key, state in states.items():
            if key not in dirty:
                self._findings[key] = self._compare(state, first)
        self._judge_dirty({key: states[key] for key in dirty}, reads)
        for key in states:
            self._reads[key] = 1
        self._look_again(set(states))
        return self._report()

    def recheck(self, keys: Iterable[str], ids: Iterable[str], *, wait_s: float) -> tuple[AuditReport, set[str]]:
        """Wait (up to ``wait_s``) until the archive holds every id of ``ids``, then judge ``keys`` again; the
        report, and the ids still missing."""
        missing = set(ids)
        deadline = time.monotonic() + wait_s
        while True:
            self._read_new()
            missing -= {record.id for record in (*self.later, *self.repairs)}
            if not missing or time.monotonic() >= deadline:
                break
            self.sleep(min(self.settings.settle_s, max(0.0, deadline - time.monotonic())))
        wanted = set(keys)
        states, reads = self._read_states(sorted(wanted))
        self.sleep(self.settings.settle_s)
        self._read_new()
        self._judge_dirty(states, reads)
        self._look_again(wanted)
        return self._report(), missing

    # ---------------------------------------------------------------------------------------- the steps
    def _fetch(self, keys: Sequence[str]) -> list[bytes]:
        """The objects of ``keys`` not read before, as stored, ``workers`` at a time."""
        fresh = [key for key in keys if key not in self.objects]
        self.objects.update(fresh)
        self.progress.phase("reading the archive", len(fresh))
        bodies = []
        for body in read_bodies(self.client, self.bucket, fresh, workers=self.settings.workers):
            bodies.append(body)
            self.progress.advance()
        return bodies

    def _recount_shares(self) -> Recount:
        """The first recount: every record of the first listing, in ``processes`` shares of keys."""
        settings = self.settings
        size = sum(len(body) for body in self.bodies)
        processes = settings.processes or (min(os.cpu_count() or 1, MAX_PROCESSES) if size >= SHARE_BYTES else 1)
        shared = ShareSettings(
            processes, settings.spec, settings.defaults, settings.prefix, settings.recount_tolerance_ms, settings.views
        )
        self.progress.phase(f"recounting ({processes} processes)" if processes > 1 else "recounting")
        if processes == 1:
            shares = [recount_share(self.bodies, 0, shared)]
        else:
            with ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn")) as pool:
                shares = list(
                    pool.map(recount_share, [self.bodies] * processes, range(processes), [shared] * processes)
                )
        for share in shares:
            self.repairs.extend(share.repairs)
            self._identities.extend(share.identities)
            for key, archived in share.last_archived.items():
                self._last[key] = max(self._last.get(key, 0), archived)
            for commit, keys in share.before_landing.items():
                self._before_landing.setdefault(commit, set()).update(keys)
        merged = merge(shares)
        self._mismatches.update(merged.digest_mismatches)
        self._read_count = merged.records
        return merged

    def _read_new(self) -> list[ArchiveRecord]:
        """What the archive gained since the last listing began: its records under the prefix, repairs apart."""
        listed = self.clock()
        since = max(0, self._listed_ms - WRITE_SLACK_MS)
        self._listed_ms = listed
        keys = list(written_since(self.client, self.bucket, self.archive_prefix, since))
        prefix = self.settings.prefix
        found: list[ArchiveRecord] = []
        for body in self._fetch(keys):
            for record in decode_records(body):
                if not any(event.key.startswith(prefix) for event in record.events):
                    continue
                self._read_count += 1
                (self.repairs if is_repair(record) else found).append(record)
        self.later.extend(found)
        for record in found:
            self._identities.append((record.id, record.commit, record.digest))
            for key in _keys_of([record], self.settings.views):
                self._last[key] = max(self._last.get(key, 0), record.archived_ms)
            if record.before_landing:
                self._before_landing.setdefault(record.commit, set()).update(event.key for event in record.events)
        return found

    def _touching(self, keys: set[str]) -> list[ArchiveRecord]:
        """Every record read (the first listing's decoded again, once) that touches one of ``keys``."""
        if self._decoded is None:
            prefix = self.settings.prefix
            with gc_paused():
                self._decoded = [
                    record
                    for body in self.bodies
                    for record in decode_records(body)
                    if not is_repair(record) and any(event.key.startswith(prefix) for event in record.events)
                ]
        views = self.settings.views
        return [record for record in (*self._decoded, *self.later) if not keys.isdisjoint(_keys_of([record], views))]

    def _recount(self, records: Iterable[ArchiveRecord]) -> Recount:
        settings = self.settings
        recounted = recount(
            records,
            windows=settings.spec,
            defaults=settings.defaults,
            clock_tolerance_ms=settings.recount_tolerance_ms,
            views=settings.views,
        )
        self._mismatches.update(recounted.digest_mismatches)
        return recounted

    def _read_states(self, keys: Sequence[str]) -> tuple[dict[str, KeyState], dict[str, ReadInterval]]:
        """Every key's state, ``keys_per_read`` keys a read, ``readers`` reads at once; each key's read interval."""
        self._learn_landings()
        size = self.settings.keys_per_read
        groups = [keys[start : start + size] for start in range(0, len(keys), size)]
        self.progress.phase("reading the table", len(keys))

        def read(group: Sequence[str]) -> tuple[dict[str, KeyState], ReadInterval]:
            started = self.clock()
            states = self.reader.states(group)
            return states, ReadInterval(started, self.clock())

        states: dict[str, KeyState] = {}
        reads: dict[str, ReadInterval] = {}
        with ThreadPoolExecutor(max_workers=self.settings.readers, thread_name_prefix="audit-read") as pool:
            for group_states, interval in pool.map(read, groups):
                states.update(group_states)
                reads.update(dict.fromkeys(group_states, interval))
                self.progress.advance(len(group_states))
        return states, reads

    def _learn_landings(self) -> None:
        """Read the headers of the batches written before their landing and not seen landed yet: those landed now
        are placed by the time this read ended (before any table read that follows it)."""
        waiting = [commit for commit in self._before_landing if commit not in self._landed]
        if not waiting or self.landings is None:
            return
        self.progress.phase("reading journal headers", len(waiting))
        landed = self.landings(waiting)
        seen_ms = self.clock()
        for commit in landed:
            self._landed[commit] = seen_ms

    def _unlanded_keys(self) -> set[str]:
        """The keys touched by a counting whose deltas no header read has seen landed yet."""
        return {key for commit, keys in self._before_landing.items() if commit not in self._landed for key in keys}

    def _compare(self, state: KeyState, recounted: Recount, unsettled: Iterable[Slot] = ()) -> list[Finding]:
        settings = self.settings
        return compare_key(
            state,
            recounted,
            scope=settings.scope,
            spec=settings.spec,
            now_ms=self.started_ms,
            unsettled=frozenset(unsettled),
        )

    def _judge_dirty(self, states: Mapping[str, KeyState], reads: Mapping[str, ReadInterval]) -> None:
        """Judge keys against the countings their own read can hold: per read, one recount of the records that
        touch its keys (so a record touching many keys is recounted once per read, not once per key)."""
        if not states:
            return
        by_read: dict[ReadInterval, list[str]] = {}
        for key in states:
            by_read.setdefault(reads[key], []).append(key)
        wanted = set(states)
        touching: dict[str, list[ArchiveRecord]] = {}
        for record in self._touching(wanted):
            for key in _keys_of([record], self.settings.views) & wanted:
                touching.setdefault(key, []).append(record)
        self.progress.phase("recounting what changed", len(states))
        for interval, keys in by_read.items():
            records = list({id(r): r for key in keys for r in touching.get(key, [])}.values())
            parted = split(records, interval, self.settings.tolerance_ms, self._landed)
            latest = max((record.archived_ms for record in parted.uncertain), default=0)
            self._uncertain_until_ms = max(self._uncertain_until_ms, latest + self.settings.tolerance_ms + 1)
            before = self._recount(parted.before)
            raced = recounted_slots(self._recount(parted.uncertain), keys) if parted.uncertain else {}
            for key in keys:
                self._findings[key] = self._compare(states[key], before, raced)
                self.progress.advance()

    def _look_again(self, keys: set[str]) -> None:
        """Read the keys with a drifted or unsettled value again, after a pause, up to ``attempts`` reads."""
        for _ in range(1, self.settings.attempts):
            again = sorted(
                key
                for key in keys
                if any(f.verdict in {Verdict.DRIFT, Verdict.UNSETTLED} for f in self._findings.get(key, ()))
            )
            if not again:
                return
            # A read begun within the tolerance of a counting's archive write cannot place it, however often
            # it is repeated: the next one starts once the countings found uncertain so far can be placed.
            self.sleep(max(0, self._uncertain_until_ms - self.clock()) / 1000)
            states, reads = self._read_states(again)
            self.progress.phase(f"settling ({len(again)} keys read again)")
            self.sleep(self.settings.settle_s)  # what committed before the read is archived by now
            self._read_new()
            self._judge_dirty(states, reads)
            for key in again:
                self._reads[key] = self._reads.get(key, 1) + 1

    def _report(self) -> AuditReport:
        findings = [finding for key in sorted(self._findings) for finding in self._findings[key]]
        drifted = {f.slot.key for f in findings if f.verdict is Verdict.DRIFT}
        if drifted and self.waiting is not None:
            findings = with_pending(findings, self.waiting(drifted))
        last = {key: self._last[key] for key in drifted if key in self._last}
        for record in self.repairs:
            for key in _keys_of([record], self.settings.views) & drifted:
                last[key] = max(last.get(key, 0), record.archived_ms)
        with gc_paused():
            twice, reused, countings = _identities(self._identities)
        return AuditReport(
            findings=tuple(findings),
            objects=len(self.objects),
            records=self._read_count,
            countings=countings,
            repairs=tuple(self.repairs),
            digest_mismatches=tuple(sorted(self._mismatches)),
            recounted_twice=twice,
            reused_ids=reused,
            reads=max(self._reads.values(), default=0),
            last_counted=last,
            started_ms=self.started_ms,
            finished_ms=self.clock(),
            not_landed=tuple(sorted(commit for commit in self._before_landing if commit not in self._landed)),
        )


def _recount_keys(recounted: Recount) -> set[str]:
    return {*recounted.counters, *recounted.windows, *recounted.gauges, *recounted.distinct}


def _keys_of(records: Iterable[ArchiveRecord], views: CounterViews) -> set[str]:
    """The keys ``records`` touch: their events' keys and the view items they count in (or reset)."""
    return {key for record in records for event in record.events for key in (event.key, *event_keys(event, views))}


def _identities(records: Iterable[tuple[str, str, str]]) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """(ids counted more than once with the same content, ids counted more than once with other content,
    countings) of records' (id, commit, digest): one pass, keeping one (commit, digest) per id and the rest only
    for ids with several."""
    first: dict[str, tuple[str, str]] = {}
    several: dict[str, dict[str, str]] = {}
    for message_id, commit_of, digest_of in records:
        commit, digest = first.setdefault(message_id, (commit_of, digest_of))
        if commit != commit_of:
            several.setdefault(message_id, {commit: digest}).setdefault(commit_of, digest_of)
    countings = len(first) + sum(len(commits) - 1 for commits in several.values())
    twice = sorted(i for i, commits in several.items() if len(set(commits.values())) == 1)
    reused = sorted(i for i, commits in several.items() if len(set(commits.values())) > 1)
    return tuple(twice), tuple(reused), countings
