"""``tally audit --fix``: the operator messages that bring each drifted counter back to what the archive recounts.

A correction at time ``t`` adds its delta to the key's all-time value and to the window of ``t`` of every unit
still within its retention (``WindowSpec.windows_of``). So for each drifted (key, counter), ``plan_repairs``
solves, finest unit first: one correction at the start of each drifted window of the finest unit, by its
difference; then, for each coarser window the finer ones do not explain, one at a time inside it whose finer
windows are past their retention; then, for what the all-time value still lacks, one at a time whose windows
are all past their retention. Every correction's effect is then simulated on every compared value of the
counter: a plan that would move a value the audit found exact, or leave a drift, is refused for that counter
(``Unrepairable``, with the reason), never published.

**The all-time value alone.** When a window unit is kept forever (the template's default keeps days), every
correction lands in a window, so none can move the all-time value alone, which is what a hand edit of it needs.
Such a counter, when its windows are exact, is repaired by a **reset** to its recounted value (a reset sets the
all-time value only). A reset also overwrites what commits between the audit's read and the reset, so it is
planned only for a key no counting has touched for ``quiet_ms`` (``last_counted``); one that did commit in
between shows as drift again at the next audit (repairs are not recounted: ``tally.audit.corrections``), and
is repaired then. When windows drift too, their corrections go first and the all-time remainder waits for the
next ``--fix`` (a reset committing before a correction would be overwritten by it, or the other way round).

What no operator message can carry is not repaired: gauges and distinct counts (``Unrepairable``). A start
value (``CounterDefaults``) is added by the store the first time a counter is written: a correction of a counter
the table does not hold at all is smaller by it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tally.audit.compare import Kind, Verdict, window_kept
from tally.audit.corrections import PlannedCorrection, repair_id
from tally.core.items import ALL_TIME, view_parts
from tally.core.numbers import add
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from tally.audit.compare import Finding
    from tally.core.numbers import Number
    from tally.core.windows import WindowSpec, WindowUnit

_OLDEST_MONTH_MS: Final = 31 * DAY_MS
DEFAULT_QUIET_MS: Final = 60_000
"""How long a key must have been quiet (no counting archived) for ``--fix`` to reset it."""


@dataclass(frozen=True, slots=True)
class Unrepairable:
    key: str
    window: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class RepairPlan:
    corrections: tuple[PlannedCorrection, ...]
    unrepairable: tuple[Unrepairable, ...]


@dataclass(frozen=True, slots=True)
class _Counter:
    """One drifted (key, counter): what each compared value must gain, and the context of the plan."""

    key: str
    name: str
    wanted: dict[str, Number]
    """Window id or ``all`` -> recounted - stored (the drifted ones only)."""
    recounted_all_time: Number | str | None


def plan_repairs(
    findings: Iterable[Finding],
    *,
    spec: WindowSpec,
    now_ms: int,
    starts: Callable[[str], Mapping[str, Number]] = lambda _key: {},
    generations: Mapping[tuple[str, str, int | None], int] | None = None,
    last_counted: Callable[[str], int | None] = lambda _key: None,
    quiet_ms: int = DEFAULT_QUIET_MS,
) -> RepairPlan:
    """The repairs of every drifted counter among ``findings`` (those of a full audit: every value of each
    counter, exact ones included). ``starts(key)`` are the key's start values; ``generations`` how many repairs
    of each (key, counter, time) the archive already holds; ``last_counted(key)`` when the archive last shows a
    counting of the key (epoch ms)."""
    by_counter: dict[tuple[str, str], list[Finding]] = {}
    unrepairable: list[Unrepairable] = []
    for finding in findings:
        slot = finding.slot
        if slot.kind is Kind.COUNTER:
            by_counter.setdefault((slot.key, slot.name), []).append(finding)
        elif finding.verdict is Verdict.DRIFT:
            what = "a gauge" if slot.kind is Kind.GAUGE else "a distinct count"
            reason = f"{what}: no operator message carries one"
            unrepairable.append(Unrepairable(slot.key, slot.window, slot.name, reason))
    corrections: list[PlannedCorrection] = []
    for (key, name), counted in sorted(by_counter.items()):
        if not any(finding.verdict is Verdict.DRIFT for finding in counted):
            continue
        doubtful = [f for f in counted if f.verdict not in {Verdict.EXACT, Verdict.DRIFT}]
        if doubtful:
            reason = f"{doubtful[0].verdict} beside its drift: audit again"
            unrepairable.append(Unrepairable(key, doubtful[0].slot.window, name, reason))
            continue
        if view_parts(key) is not None:
            reason = "a view's item: a correction of its key would count in the key and every view; see its events"
            unrepairable.append(Unrepairable(key, counted[0].slot.window, name, reason))
            continue
        drifted = _drifted(key, name, counted, starts(key).get(name))
        planned, left = _corrections(drifted, spec, now_ms)
        if left is not None:
            unrepairable.append(left)
            continue
        for ts_ms, delta in planned:
            generation = (generations or {}).get((key, name, ts_ms), 0)
            corrections.append(
                PlannedCorrection(repair_id(key, name, ts_ms, delta, generation), key, {name: delta}, ts_ms)
            )
        remainder = add(drifted.wanted.get(ALL_TIME, 0), -sum_deltas(planned))
        if not remainder:
            continue
        reset, why = _reset(drifted, planned, now_ms, last_counted(key), quiet_ms)
        if reset is None:
            unrepairable.append(Unrepairable(key, ALL_TIME, name, why))
            continue
        generation = (generations or {}).get((key, name, None), 0)
        message_id = repair_id(key, name, None, reset, generation, reset=True)
        corrections.append(PlannedCorrection(message_id, key, {name: reset}, None, reset=True))
    return RepairPlan(tuple(corrections), tuple(unrepairable))


def _drifted(key: str, name: str, findings: Sequence[Finding], start: Number | None) -> _Counter:
    wanted: dict[str, Number] = {}
    stored_all: Number | str | None = None
    recounted_all: Number | str | None = None
    for finding in findings:
        if finding.slot.window == ALL_TIME:
            stored_all, recounted_all = finding.stored, finding.recounted
        difference = finding.difference
        if difference:
            wanted[finding.slot.window] = difference
    if ALL_TIME in wanted and stored_all is None and start:
        wanted[ALL_TIME] = add(wanted[ALL_TIME], -start)  # the store adds the start to a first write
    return _Counter(key, name, wanted, recounted_all)


def _corrections(
    drifted: _Counter, spec: WindowSpec, now_ms: int
) -> tuple[list[tuple[int | None, Number]], Unrepairable | None]:
    """(time, delta) of each correction: the windows' first, then one for the all-time remainder if some time
    lies in no kept window; or why the windows cannot be repaired."""
    key, name, wanted = drifted.key, drifted.name, drifted.wanted
    units = sorted(spec.units, key=lambda unit: unit.duration_ms or _OLDEST_MONTH_MS)
    planned: list[tuple[int | None, Number]] = []
    for index, unit in enumerate(units):
        for window, difference in sorted(wanted.items()):
            if window == ALL_TIME or parse_window_id(window)[0] != unit.name:
                continue
            start_ms = parse_window_id(window)[1]
            left = add(difference, -_effect(planned, spec, now_ms).get(window, 0))
            if not left:
                continue
            finer = units[:index]
            if any(_kept(f, f.start_ms(start_ms), now_ms) for f in finer):
                names = ", ".join(f.name for f in finer)
                return [], Unrepairable(key, window, name, f"window {window} differs by more than its {names} explain")
            planned.append((start_ms, left))
    remainder = add(wanted.get(ALL_TIME, 0), -sum_deltas(planned))
    if remainder:
        possible, ts_ms = _time_in_no_window(units, now_ms)
        if possible:
            planned.append((ts_ms, remainder))
    effect = _effect(planned, spec, now_ms)
    compared = {window: value for window, value in effect.items() if value and _compared(window, spec, now_ms)}
    if compared != {window: value for window, value in wanted.items() if window != ALL_TIME}:
        return [], Unrepairable(key, ALL_TIME, name, "no set of corrections moves exactly the drifted windows")
    return planned, None


def _reset(
    drifted: _Counter, planned: Sequence[object], now_ms: int, last_ms: int | None, quiet_ms: int
) -> tuple[Number | None, str]:
    """The value to reset the counter to (its recounted all-time value), or why not now."""
    if planned:
        return None, "the all-time value also differs alone: run --fix again once these corrections are counted"
    if isinstance(drifted.recounted_all_time, str):
        return None, "not a number"
    if last_ms is not None and now_ms - last_ms < quiet_ms:
        return None, (
            f"only the all-time value differs (a reset repairs it), but the key counted {(now_ms - last_ms) // 1000} s"
            f" ago: a reset would overwrite what commits meanwhile; run --fix again once it has been quiet"
            f" {quiet_ms // 1000} s"
        )
    return drifted.recounted_all_time or 0, ""


def _compared(window: str, spec: WindowSpec, now_ms: int) -> bool:
    """Whether the audit compares ``window`` (a window about to expire is not: ``compare.window_kept``)."""
    if window == ALL_TIME:
        return True
    name, start = parse_window_id(window)
    return window_kept(spec, name, start, now_ms)


def _kept(unit: WindowUnit, start_ms: int, now_ms: int) -> bool:
    expires = unit.expires_at_s(start_ms)
    return expires is None or expires * 1000 > now_ms


def _effect(planned: Iterable[tuple[int | None, Number]], spec: WindowSpec, now_ms: int) -> dict[str, Number]:
    """Window id -> what the planned corrections add to it (as the commit places them at ``now_ms``)."""
    effect: dict[str, Number] = {}
    for ts_ms, delta in planned:
        if ts_ms is None:
            continue
        spans, _late = spec.windows_of(ts_ms, now_ms)
        for unit, start in spans:
            window = unit.window_id(start)
            effect[window] = add(effect.get(window, 0), delta)
    return effect


def sum_deltas(planned: Iterable[tuple[int | None, Number]]) -> Number:
    total: Number = 0
    for _ts, delta in planned:
        total = add(total, delta)
    return total


def _time_in_no_window(units: Sequence[WindowUnit], now_ms: int) -> tuple[bool, int | None]:
    """(whether one exists, a time whose windows are all past their retention): None when no unit is counted
    (any time will do), none when a unit is kept forever."""
    if not units:
        return True, None
    if any(unit.retention_ms is None for unit in units):
        return False, None
    oldest = max(unit.retention_ms or 0 for unit in units) + _OLDEST_MONTH_MS + DAY_MS
    ts_ms = now_ms - oldest
    ts_ms -= ts_ms % HOUR_MS
    possible = ts_ms >= 0 and not any(_kept(unit, unit.start_ms(ts_ms), now_ms) for unit in units)
    return possible, ts_ms
