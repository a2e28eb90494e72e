"""The audit's comparison: what the archive's recount says each stored value must be, against what it is.

``compare_key`` takes one key's recount (``tally.audit.recount.Recount``) and what the counters table holds
for it (``tally.reader.KeyState``, or anything shaped like it: ``StoredState``) and judges every value either
side has, one ``Finding`` per value (a ``Slot``: the key, ``all`` or a window id, a counter, a gauge or a
distinct-count set), with a ``Verdict``:

- ``exact``: stored equals recounted (a counter or distinct count absent on one side is 0 there);
- ``drift``: they differ, and the recount is exact;
- ``inexact``: the recount cannot be exact (``Recount.inexact``: a reset that cannot be ordered against another
  counting of its key; an event without ``ts`` whose copies disagree on its receive time): never drift;
- ``unsettled``: a counting that may or may not have committed before the table was read touches it
  (``tally.audit.cut``): nothing can be concluded from this read (``tally audit`` reads again);
- ``pending`` is decided later, by the caller that knows the dead-letter queue (``with_pending``).

What is compared is the ``Scope``: all-time values (counters, gauges, all-time distinct counts), and the windows
of some units whose start lies in a range. A window past its retention is never compared (DynamoDB may still
hold it until TTL deletes it; the recount skips what was already expired at its commit).

Pure: no I/O, no clock (``now_ms`` is passed in).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Protocol

from tally.core.items import ALL_TIME
from tally.core.windows import HOUR_MS, parse_window_id

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping
    from decimal import Decimal

    from tally.audit.recount import Recount
    from tally.core.numbers import Number
    from tally.core.windows import WindowSpec

EXPIRY_MARGIN_MS: Final = HOUR_MS
"""A window whose retention ends within this margin of the audit's start is not compared: DynamoDB's TTL or the
recount's late-window rule may take it during the audit."""


class Verdict(StrEnum):
    """What an audit concludes about one stored value (the module says each)."""

    EXACT = "exact"
    DRIFT = "drift"
    INEXACT = "inexact"
    PENDING = "pending"
    UNSETTLED = "unsettled"


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    DISTINCT = "distinct"


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """One stored value: ``window`` is ``all`` or a window id; ``name`` a counter, a gauge (``max:temp``) or a
    distinct-count set."""

    key: str
    window: str
    kind: Kind
    name: str


@dataclass(frozen=True, slots=True)
class Finding:
    slot: Slot
    stored: Number | str | None
    """None: the table has no such value (or, a counter, holds nothing for it)."""
    recounted: Number | str | None
    verdict: Verdict
    reason: str = ""

    @property
    def difference(self) -> Number | None:
        """recounted - stored, for a counter or a distinct count (what a repair adds); None for a gauge."""
        if self.slot.kind is Kind.GAUGE or isinstance(self.stored, str) or isinstance(self.recounted, str):
            return None
        return (self.recounted or 0) - (self.stored or 0)


class StoredState(Protocol):
    """What the counters table holds for one key: ``tally.reader.KeyState``'s shape."""

    @property
    def key(self) -> str: ...
    @property
    def values(self) -> Mapping[str, Decimal]: ...
    @property
    def windows(self) -> Mapping[str, Mapping[str, Decimal]]: ...
    @property
    def gauges(self) -> Mapping[str, Mapping[str, Decimal | str]]: ...
    @property
    def distinct(self) -> Mapping[str, Mapping[str, Decimal]]: ...


@dataclass(frozen=True, slots=True)
class Scope:
    """What an audit compares: all-time values, and windows of ``units`` (None: every unit the deployment
    counts) whose start is within ``since_ms``..``until_ms`` (None: unbounded)."""

    all_time: bool = True
    units: frozenset[str] | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @property
    def full(self) -> bool:
        """Everything: what ``--fix`` needs (a repair moves the all-time value and every window of its time)."""
        return self.all_time and self.units is None and self.since_ms is None and self.until_ms is None

    def covers(self, window: str, spec: WindowSpec, now_ms: int) -> bool:
        """Whether the value of ``window`` (``all`` or a window id) is compared."""
        if window == ALL_TIME:
            return self.all_time
        try:
            name, start = parse_window_id(window)
        except ValueError:
            return False
        if self.units is not None and name not in self.units:
            return False
        if (self.since_ms is not None and start < self.since_ms) or (
            self.until_ms is not None and start > self.until_ms
        ):
            return False
        return window_kept(spec, name, start, now_ms)


def window_kept(spec: WindowSpec, unit_name: str, start_ms: int, now_ms: int) -> bool:
    """Whether a window of a counted unit is within its retention, with ``EXPIRY_MARGIN_MS`` to spare (a unit
    the deployment does not count is never compared: nothing counts into it now)."""
    for unit in spec.units:
        if unit.name == unit_name:
            expires = unit.expires_at_s(start_ms)
            return expires is None or expires * 1000 > now_ms + EXPIRY_MARGIN_MS
    return False


def recounted_slots(recount: Recount, keys: Collection[str]) -> dict[Slot, Number | str]:
    """Every value the recount gives the ``keys``, by slot."""
    found: dict[Slot, Number | str] = {}
    for key in keys:
        for name, value in recount.counters.get(key, {}).items():
            found[Slot(key, ALL_TIME, Kind.COUNTER, name)] = value
        for window, counters in recount.windows.get(key, {}).items():
            for name, value in counters.items():
                found[Slot(key, window, Kind.COUNTER, name)] = value
        for (kind, name), reading in recount.gauges.get(key, {}).items():
            found[Slot(key, ALL_TIME, Kind.GAUGE, f"{kind}:{name}")] = reading
        for (window, name), members in recount.distinct.get(key, {}).items():
            found[Slot(key, window, Kind.DISTINCT, name)] = members
    return found


def stored_slots(state: StoredState) -> dict[Slot, Number | str]:
    """Every value the table holds for one key, by slot."""
    key = state.key
    found: dict[Slot, Number | str] = {}
    for name, value in state.values.items():
        found[Slot(key, ALL_TIME, Kind.COUNTER, name)] = value
    for window, counters in state.windows.items():
        for name, value in counters.items():
            found[Slot(key, window, Kind.COUNTER, name)] = value
    for kind, readings in state.gauges.items():
        for name, reading in readings.items():
            found[Slot(key, ALL_TIME, Kind.GAUGE, f"{kind}:{name}")] = reading
    for window, sets in state.distinct.items():
        for name, members in sets.items():
            found[Slot(key, window, Kind.DISTINCT, name)] = members
    return found


def compare_key(
    state: StoredState,
    recount: Recount,
    *,
    scope: Scope,
    spec: WindowSpec,
    now_ms: int,
    unsettled: Collection[Slot] = (),
) -> list[Finding]:
    """One finding per value of ``state.key`` either side has, or a racing counting touches, within ``scope``, in
    slot order. ``unsettled`` are the slots a counting that raced the read touches (``tally.audit.cut``)."""
    key = state.key
    recounted = recounted_slots(recount, (key,))
    stored = stored_slots(state)
    inexact = {
        Slot(key, window, Kind.COUNTER, name): why
        for (doubted, window, name), why in recount.inexact.items()
        if doubted == key
    }
    # A value only a racing counting touches is held by neither side yet (a key's first counting, still landing):
    # reported unsettled, never left out.
    racing = {slot for slot in unsettled if slot.key == key}
    findings = []
    for slot in sorted(recounted.keys() | stored.keys() | racing):
        if not scope.covers(slot.window, spec, now_ms):
            continue
        have, want = stored.get(slot), recounted.get(slot)
        if slot in unsettled:
            verdict, reason = (
                Verdict.UNSETTLED,
                "a counting committed, or its deltas still landing, while the table was read",
            )
        elif slot in inexact:
            verdict, reason = Verdict.INEXACT, inexact[slot]
        elif _same(slot, have, want):
            verdict, reason = Verdict.EXACT, ""
        else:
            verdict, reason = Verdict.DRIFT, ""
        findings.append(Finding(slot, have, want, verdict, reason))
    return findings


def _same(slot: Slot, stored: Number | str | None, recounted: Number | str | None) -> bool:
    if slot.kind is Kind.GAUGE:
        if stored is None or recounted is None or isinstance(stored, str) != isinstance(recounted, str):
            return stored is None and recounted is None
        return stored == recounted
    return (stored or 0) == (recounted or 0)


def with_pending(findings: Iterable[Finding], waiting: Mapping[str, int]) -> list[Finding]:
    """Drift on a key the dead-letter queue holds messages of (``waiting``: key -> letters) is ``pending``: a
    message counted whose archive write kept failing sits there (no reason), or one whose gauge or member was
    refused (``gauge_refused``, ``members_refused``); the audit cannot tell them from drift until they are
    redriven."""
    marked = []
    for finding in findings:
        letters = waiting.get(finding.slot.key, 0)
        if finding.verdict is Verdict.DRIFT and letters:
            reason = f"{letters} dead letter(s) of this key: redrive them (tally dlq redrive), then audit again"
            marked.append(replace(finding, verdict=Verdict.PENDING, reason=reason))
        else:
            marked.append(finding)
    return marked


@dataclass(frozen=True, slots=True)
class Tally:
    """How many values and keys of each verdict: the audit's summary line."""

    values: Mapping[Verdict, int] = field(default_factory=dict)
    keys: Mapping[Verdict, int] = field(default_factory=dict)
    """A key counts once, under its worst verdict (drift, pending, unsettled, inexact, exact, in that order)."""


WORST_FIRST: Final = (Verdict.DRIFT, Verdict.PENDING, Verdict.UNSETTLED, Verdict.INEXACT, Verdict.EXACT)


def summarise(findings: Iterable[Finding], key_of: Callable[[Finding], str] = lambda f: f.slot.key) -> Tally:
    values: dict[Verdict, int] = {}
    per_key: dict[str, set[Verdict]] = {}
    for finding in findings:
        values[finding.verdict] = values.get(finding.verdict, 0) + 1
        per_key.setdefault(key_of(finding), set()).add(finding.verdict)
    keys: dict[Verdict, int] = {}
    for verdicts in per_key.values():
        worst = next(verdict for verdict in WORST_FIRST if verdict in verdicts)
        keys[worst] = keys.get(worst, 0) + 1
    return Tally(values, keys)
