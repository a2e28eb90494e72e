"""``tally audit --fix``'s plan (``tally.audit.repairs``) and ``tally void``'s (``tally.audit.voids``): the
corrections that move exactly the drifted values, under ids that make running them twice a duplicate."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tally.audit.compare import Finding, Kind, Slot, Verdict
from tally.audit.corrections import REPAIR_PREFIX, is_repair, void_id
from tally.audit.recount import countings
from tally.audit.repairs import plan_repairs
from tally.audit.voids import VoidRefused, plan_void
from tally.core.items import ALL_TIME
from tally.core.windows import DAY_MS, parse_window_spec
from tests.unit.test_recount import HOUR, T0, record

NOW = T0 + 2 * DAY_MS
D = Decimal


def counter(window: str, stored: int | None, recounted: int | None, key: str = "k", name: str = "count") -> Finding:
    verdict = Verdict.EXACT if (stored or 0) == (recounted or 0) else Verdict.DRIFT
    return Finding(Slot(key, window, Kind.COUNTER, name), stored, recounted, verdict)


def test_a_lost_event_is_repaired_in_its_hour_and_so_in_its_day_and_all_time() -> None:
    spec = parse_window_spec("hour,day")
    findings = [
        counter(ALL_TIME, 4, 5),
        counter("h#2025-12-02T00:00Z", 2, 3),
        counter("h#2025-12-02T01:00Z", 2, 2),
        counter("d#2025-12-02", 4, 5),
    ]
    plan = plan_repairs(findings, spec=spec, now_ms=NOW)
    assert [(c.key, dict(c.deltas), c.ts_ms) for c in plan.corrections] == [("k", {"count": 1}, T0)]
    assert plan.unrepairable == ()
    assert plan.corrections[0].message_id.startswith(REPAIR_PREFIX)


def test_an_all_time_value_edited_by_hand_is_repaired_at_a_time_whose_windows_are_gone() -> None:
    spec = parse_window_spec("hour,day", "hour=7,day=30")
    plan = plan_repairs([counter(ALL_TIME, 10, 5), counter("d#2025-12-02", 5, 5)], spec=spec, now_ms=NOW)
    ((correction),) = plan.corrections
    assert dict(correction.deltas) == {"count": -5}
    windows, _late = spec.windows_of(correction.ts_ms or 0, NOW)
    assert windows == []  # it lands in no window: they are past their retention


def test_the_all_time_value_alone_is_reset_when_days_are_kept_forever_and_the_key_is_quiet() -> None:
    forever = parse_window_spec("hour,day")  # no time lies in no window: no correction moves the all-time alone
    plan = plan_repairs([counter(ALL_TIME, 10, 5)], spec=forever, now_ms=NOW, last_counted=lambda _k: NOW - 120_000)
    assert [(dict(c.deltas), c.reset) for c in plan.corrections] == [({"count": 5}, True)]
    busy = plan_repairs([counter(ALL_TIME, 10, 5)], spec=forever, now_ms=NOW, last_counted=lambda _k: NOW - 5_000)
    assert busy.corrections == ()
    assert "quiet" in busy.unrepairable[0].reason
    # with windows to repair too, the corrections go first and the rest waits for the next run
    both = plan_repairs(
        [counter(ALL_TIME, 10, 6), counter("h#2025-12-02T00:00Z", 0, 1), counter("d#2025-12-02", 0, 1)],
        spec=forever,
        now_ms=NOW,
    )
    assert [(dict(c.deltas), c.reset) for c in both.corrections] == [({"count": 1}, False)]
    assert "again" in both.unrepairable[0].reason


def test_what_operator_messages_cannot_repair_is_said_never_guessed() -> None:
    forever = parse_window_spec("hour,day")
    # a day that differs by more than its hours explain, while the hours are still kept
    days = plan_repairs(
        [counter(ALL_TIME, 5, 6), counter("h#2025-12-02T00:00Z", 5, 5), counter("d#2025-12-02", 5, 6)],
        spec=forever,
        now_ms=NOW,
    )
    assert days.corrections == ()
    assert "hour" in days.unrepairable[0].reason
    gauge = Finding(Slot("k", ALL_TIME, Kind.GAUGE, "max:peak"), 3, 9, Verdict.DRIFT)
    assert "gauge" in plan_repairs([gauge], spec=forever, now_ms=NOW).unrepairable[0].reason
    doubtful = Finding(Slot("k", "d#2025-12-02", Kind.COUNTER, "count"), 1, 2, Verdict.UNSETTLED)
    assert (
        "unsettled"
        in plan_repairs([counter(ALL_TIME, 1, 2), doubtful], spec=forever, now_ms=NOW).unrepairable[0].reason
    )


def test_repair_ids_are_the_same_for_the_same_drift_and_new_once_a_repair_is_archived() -> None:
    spec = parse_window_spec("")
    findings = [counter(ALL_TIME, 4, 5)]
    first = plan_repairs(findings, spec=spec, now_ms=NOW).corrections
    again = plan_repairs(findings, spec=spec, now_ms=NOW + HOUR).corrections
    assert [c.message_id for c in first] == [c.message_id for c in again]
    later = plan_repairs(findings, spec=spec, now_ms=NOW, generations={("k", "count", None): 1}).corrections
    assert later[0].message_id != first[0].message_id


def test_a_counter_the_table_lost_whole_is_repaired_less_its_start_value() -> None:
    plan = plan_repairs(
        [counter(ALL_TIME, None, 97, key="stock:1", name="stock")],
        spec=parse_window_spec(""),
        now_ms=NOW,
        starts=lambda key: {"stock": 100} if key.startswith("stock:") else {},
    )
    assert dict(plan.corrections[0].deltas) == {"stock": -3}


# ---------------------------------------------------------------------------------------------------- void
def test_a_void_negates_each_event_in_the_windows_of_its_time() -> None:
    # GIVEN a packed message: two events of one key at one time, one of another key without ts
    body = (
        f'{{"id": "m", "events": [{{"key": "a", "deltas": {{"n": 2, "v": 1.5}}, "ts": {T0 + 5}}}, '
        f'{{"key": "a", "delta": 3, "ts": {T0 + 5}}}, {{"key": "b", "delta": 1}}]}}'
    )
    found = countings([record(body, received=T0 + 7 * HOUR)])
    plan = plan_void("m", found)
    assert [(c.message_id, c.key, dict(c.deltas), c.ts_ms) for c in plan.corrections] == [
        (void_id("m", found[0].record.commit, 0), "a", {"n": -2, "v": D("-1.5"), "count": -3}, T0 + 5),
        (void_id("m", found[0].record.commit, 1), "b", {"count": -1}, T0 + 7 * HOUR),  # its receive time
    ]


def test_a_void_of_a_message_archived_only_by_a_later_delivery_negates_where_its_receive_time_placed_it() -> None:
    # GIVEN a message without ts counted at T0 whose committing invocation never archived it (a crash); a producer's
    # re-send received seven hours later met its marker and archived it
    body = '{"id": "m", "key": "k", "delta": 2}'
    kept = countings([record(body, received=T0 + 7 * HOUR, here=False, delivery="d2", placed=T0 + 5)])
    # THEN the void goes where the counting went (the marker's placing time), not to the re-send's hour
    assert [(c.key, dict(c.deltas), c.ts_ms) for c in plan_void("m", kept).corrections] == [
        ("k", {"count": -2}, T0 + 5)
    ]
    # AND with a marker that kept no placing time (written before markers kept it), where it went is unknown:
    # refused, never guessed
    unknown = countings([record(body, received=T0 + 7 * HOUR, here=False, delivery="d2")])
    with pytest.raises(VoidRefused, match="which window"):
        plan_void("m", unknown)


def test_voiding_twice_voids_once_and_a_void_already_counted_is_refused() -> None:
    found = countings([record('{"id": "m", "key": "k", "delta": 4}')])
    first = plan_void("m", found)
    assert plan_void("m", found).corrections == first.corrections  # the same ids: a duplicate
    done = {correction.message_id for correction in first.corrections}
    with pytest.raises(VoidRefused, match="already voided"):
        plan_void("m", found, archived_ids=done)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"id": "r", "key": "k", "reset": {"count": 1}}', "reset"),
        ('{"id": "g", "key": "k", "delta": 1, "gauges": {"peak": {"max": 3}}}', "additive-only"),
        ('{"id": "d", "key": "k", "delta": 1, "distinct": {"u": "x"}}', "additive-only"),
        ('{"id": "z", "key": "k", "delta": 0}', "nothing to void"),
        ('{"id": "tally-repair:0f", "key": "k", "delta": 1, "correction": true}', "repair"),
    ],
)
def test_what_a_correction_cannot_undo_is_refused_with_the_reason(body: str, why: str) -> None:
    found = countings([record(body)])
    with pytest.raises(VoidRefused, match=why):
        plan_void(found[0].record.id, found)


def test_with_additive_only_the_deltas_are_voided_and_the_rest_named() -> None:
    found = countings([record('{"id": "g", "key": "k", "delta": 1, "gauges": {"peak": {"max": 3}}}')])
    plan = plan_void("g", found, additive_only=True)
    assert [dict(c.deltas) for c in plan.corrections] == [{"count": -1}]
    assert plan.left_out == ("gauge max:peak of 'k'",)


def test_a_message_counted_twice_or_not_at_all_or_reset_since_is_refused() -> None:
    twice = countings(
        [
            record('{"id": "p", "key": "k", "delta": 1}'),
            record('{"id": "p", "key": "k", "delta": 1}', committed=T0 + 40 * DAY_MS, delivery="d2"),
        ]
    )
    with pytest.raises(VoidRefused, match="--commit"):
        plan_void("p", twice)
    assert plan_void("p", twice, commit=twice[1].record.commit).commit == twice[1].record.commit
    with pytest.raises(VoidRefused, match="not in the archive"):
        plan_void("nope", [])
    keyed = countings(
        [
            record('{"id": "a", "key": "k", "delta": 1}', committed=T0, archived=T0 + 100),
            record('{"id": "r", "key": "k", "reset": {"count": 0}}', committed=T0 + 5_000, delivery="d2"),
        ]
    )
    with pytest.raises(VoidRefused, match="reset after it"):
        plan_void("a", [keyed[0]], key_countings=keyed)


def test_only_repairs_are_repairs() -> None:
    assert is_repair(record('{"id": "tally-repair:ab", "key": "k", "delta": 1, "correction": true}'))
    assert not is_repair(record('{"id": "tally-void:ab:0", "key": "k", "delta": 1, "correction": true}'))
