"""The audit's judgement (``tally.audit.compare``) and what a read of the table can hold (``tally.audit.cut``):
every value exact, drifted, inexact, unsettled or pending; never drift for what the archive cannot decide."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.audit.auditor import _identities
from tally.audit.compare import (
    Kind,
    Scope,
    Slot,
    Verdict,
    compare_key,
    recounted_slots,
    stored_slots,
    summarise,
    with_pending,
)
from tally.audit.cut import Place, ReadInterval, Split, place, split
from tally.audit.recount import recount
from tally.audit.shares import ShareSettings, merge, recount_share, share_of
from tally.core.archive import LANDING_VERSION, ArchiveFormatError, ArchiveRecord, decode_records, encode_records
from tally.core.defaults import NO_DEFAULTS
from tally.core.items import ALL_TIME
from tally.core.windows import parse_window_spec
from tally.reader import KeyState
from tests.unit.test_recount import HOUR, T0, WINDOWS, record

NOW = T0 + 2 * HOUR
D = Decimal


def findings_of(state: KeyState, records: list, **options: object) -> dict[Slot, tuple[object, object, Verdict]]:
    result = recount(records, windows=WINDOWS)
    found = compare_key(state, result, scope=options.pop("scope", Scope()), spec=WINDOWS, now_ms=NOW, **options)  # type: ignore[arg-type]
    return {f.slot: (f.stored, f.recounted, f.verdict) for f in found}


def test_every_value_either_side_has_is_judged() -> None:
    # GIVEN two messages archived, and a table whose hour window lost one of them, with a counter the archive
    # knows nothing of
    records = [
        record(f'{{"id": "a", "key": "k", "delta": 2, "ts": {T0 + 5}}}'),
        record(f'{{"id": "b", "key": "k", "delta": 3, "ts": {T0 + 7}}}', seq=1),
    ]
    state = KeyState(
        "k",
        {"count": D(5), "extra": D(1)},
        {"h#2025-12-02T00:00Z": {"count": D(2)}, "d#2025-12-02": {"count": D(5)}},
    )
    # WHEN the key is compared
    found = findings_of(state, records)
    # THEN each value has its verdict: exact, or drift with what is stored and what the archive says
    assert found == {
        Slot("k", ALL_TIME, Kind.COUNTER, "count"): (5, 5, Verdict.EXACT),
        Slot("k", ALL_TIME, Kind.COUNTER, "extra"): (1, None, Verdict.DRIFT),
        Slot("k", "d#2025-12-02", Kind.COUNTER, "count"): (5, 5, Verdict.EXACT),
        Slot("k", "h#2025-12-02T00:00Z", Kind.COUNTER, "count"): (2, 5, Verdict.DRIFT),
    }


def test_a_counter_that_nets_to_zero_is_exact_whether_stored_or_not() -> None:
    records = [record('{"id": "a", "key": "k", "delta": 2}'), record('{"id": "b", "key": "k", "delta": -2}', seq=1)]
    stored_zero = findings_of(KeyState("k", {"count": D(0)}), records)
    absent = findings_of(KeyState("k"), records)
    assert {verdict for *_, verdict in stored_zero.values()} == {Verdict.EXACT}
    assert {verdict for *_, verdict in absent.values()} == {Verdict.EXACT}


def test_what_the_recount_cannot_order_is_inexact_never_drift() -> None:
    # GIVEN a reset whose commit overlaps another counting's of its key
    records = [
        record('{"id": "a", "key": "k", "deltas": {"n": 5}}', committed=T0, archived=T0 + 1_500, delivery="d1"),
        record(
            '{"id": "r", "key": "k", "reset": {"n": 100}}', committed=T0 + 1_000, archived=T0 + 1_200, delivery="d2"
        ),
    ]
    found = findings_of(KeyState("k", {"n": D(100)}), records, scope=Scope(units=frozenset()))
    assert found == {Slot("k", ALL_TIME, Kind.COUNTER, "n"): (100, 100, Verdict.INEXACT)}  # the order assumed


def test_the_scope_chooses_the_values_compared() -> None:
    records = [record(f'{{"id": "a", "key": "k", "delta": 2, "ts": {T0 + 5}}}')]
    state = KeyState("k", {"count": D(9)}, {"h#2025-12-02T00:00Z": {"count": D(2)}, "d#2025-12-02": {"count": D(7)}})
    hours = findings_of(state, records, scope=Scope(all_time=False, units=frozenset({"hour"})))
    assert {slot.window for slot in hours} == {"h#2025-12-02T00:00Z"}
    later = findings_of(state, records, scope=Scope(all_time=False, since_ms=T0 + HOUR))
    assert later == {}


def test_a_window_past_its_retention_is_never_compared() -> None:
    spec = parse_window_spec("hour,day", "hour=1")
    records = [record(f'{{"id": "a", "key": "k", "delta": 2, "ts": {T0 + 5}}}')]
    state = KeyState("k", {"count": D(2)}, {"h#2025-12-02T00:00Z": {"count": D(7)}})
    found = compare_key(state, recount(records, windows=spec), scope=Scope(), spec=spec, now_ms=T0 + 3 * 86_400_000)
    assert {f.slot.window for f in found} == {ALL_TIME, "d#2025-12-02"}


def test_values_a_racing_counting_touches_are_unsettled_and_the_others_still_judged() -> None:
    records = [record('{"id": "a", "key": "k", "deltas": {"n": 2, "m": 1}}')]
    racing = {Slot("k", ALL_TIME, Kind.COUNTER, "n")}
    found = findings_of(KeyState("k", {"n": D(3), "m": D(1)}), records, unsettled=racing)
    assert found[Slot("k", ALL_TIME, Kind.COUNTER, "n")][2] is Verdict.UNSETTLED
    assert found[Slot("k", ALL_TIME, Kind.COUNTER, "m")][2] is Verdict.EXACT


def test_a_value_only_a_racing_counting_touches_is_unsettled_though_neither_side_holds_it() -> None:
    # GIVEN a key the table does not hold yet, whose one counting raced the read (or is still landing): the recount
    # placed before the read holds nothing of it either
    racing = {Slot("k", ALL_TIME, Kind.COUNTER, "n"), Slot("j", ALL_TIME, Kind.COUNTER, "n")}
    # WHEN the key is compared
    found = findings_of(KeyState("k"), [], unsettled=racing)
    # THEN its value is reported unsettled (never silently left out), and only its own key's slots are
    assert found == {Slot("k", ALL_TIME, Kind.COUNTER, "n"): (None, None, Verdict.UNSETTLED)}


def test_gauges_and_distinct_counts_are_compared() -> None:
    records = [
        record(
            f'{{"id": "a", "key": "k", "delta": 1, "gauges": {{"peak": {{"max": 3}}}}, "distinct": {{"u": "x"}}, "ts": {T0}}}'
        )
    ]
    state = KeyState("k", {"count": D(1)}, {}, {"max": {"peak": D(3)}}, {ALL_TIME: {"u": D(2)}})
    found = findings_of(state, records, scope=Scope(units=frozenset()))
    assert found[Slot("k", ALL_TIME, Kind.GAUGE, "max:peak")] == (3, 3, Verdict.EXACT)
    assert found[Slot("k", ALL_TIME, Kind.DISTINCT, "u")] == (2, 1, Verdict.DRIFT)


def test_drift_on_a_key_with_dead_letters_is_pending_and_the_summary_counts_keys_by_their_worst() -> None:
    records = [record('{"id": "a", "key": "k", "delta": 1}'), record('{"id": "b", "key": "j", "delta": 1}', seq=1)]
    result = recount(records)
    found = [
        *compare_key(KeyState("k", {"count": D(2)}), result, scope=Scope(), spec=WINDOWS, now_ms=NOW),
        *compare_key(KeyState("j", {"count": D(3)}), result, scope=Scope(), spec=WINDOWS, now_ms=NOW),
    ]
    marked = with_pending(found, {"k": 1})
    assert [f.verdict for f in marked] == [Verdict.PENDING, Verdict.DRIFT]
    assert "redrive" in marked[0].reason
    assert summarise(marked).keys == {Verdict.PENDING: 1, Verdict.DRIFT: 1}


def test_a_counting_is_before_after_or_uncertain_against_a_read() -> None:
    read = ReadInterval(T0 + 10_000, T0 + 10_100)
    assert place(T0, T0 + 9_000, read, tolerance_ms=500) is Place.BEFORE
    assert place(T0 + 10_700, T0 + 10_800, read, tolerance_ms=500) is Place.AFTER
    assert place(T0 + 9_000, T0 + 9_800, read, tolerance_ms=500) is Place.UNCERTAIN  # within the clocks' doubt
    assert place(T0, T0 + 10_050, read, tolerance_ms=0) is Place.UNCERTAIN  # its deltas landed during the read


def test_copies_of_a_counting_are_placed_together_by_the_earliest() -> None:
    first = record('{"id": "a", "key": "k", "delta": 1}', committed=T0, archived=T0 + 100)
    repair = record(
        '{"id": "a", "key": "k", "delta": 1}', committed=T0, archived=T0 + 60_000, delivery="d2", here=False
    )
    late = record('{"id": "b", "key": "k", "delta": 1}', committed=T0 + 90_000, archived=T0 + 90_100, seq=1)
    parted = split([first, repair, late], ReadInterval(T0 + 30_000, T0 + 30_100), tolerance_ms=0)
    assert (parted.before, parted.uncertain) == ([first, repair], [])


FENCED_BATCH = "0011223344556677" + "0000002a"
"""A fenced journal batch's id (an epoch's 8 bytes, then its sequence): the commit of a record written before its
deltas landed."""


def test_a_counting_archived_before_its_deltas_landed_is_placed_by_when_its_batch_was_seen_landed() -> None:
    # GIVEN a counting whose record was written beside its batch's item writes, long before a read of the table
    early = record('{"id": "a", "key": "k", "delta": 1}', committed=T0, batch=FENCED_BATCH, before_landing=True)
    read = ReadInterval(T0 + 30_000, T0 + 30_100)
    # WHEN no header read saw its batch landed, THEN the record's time places nothing: uncertain, not before
    assert split([early], read, tolerance_ms=0) == Split([], [early])
    assert split([early], read, tolerance_ms=0, landed={"another": T0}) == Split([], [early])
    # WHEN a header read that ended before the table read saw it DONE (or gone), THEN it is before
    assert split([early], read, tolerance_ms=500, landed={FENCED_BATCH: T0 + 30_000}) == Split([early], [])
    # WHEN the header read saw it landed only after the table read began, THEN the read may or may not hold it
    assert split([early], read, tolerance_ms=0, landed={FENCED_BATCH: T0 + 30_001}) == Split([], [early])
    # WHEN the counting began after the read, THEN it is after, landed or not
    later = record(
        '{"id": "b", "key": "k", "delta": 1}', committed=T0 + 31_000, batch=FENCED_BATCH, before_landing=True
    )
    assert split([later], read, tolerance_ms=0) == Split([], [])


def test_a_copy_written_after_the_landing_places_a_counting_whose_first_record_came_before_it() -> None:
    # GIVEN the record written before the landing, and a redelivery's copy written after it finished the batch
    early = record('{"id": "a", "key": "k", "delta": 1}', committed=T0, batch=FENCED_BATCH, before_landing=True)
    repair = record(
        '{"id": "a", "key": "k", "delta": 1}', committed=T0, archived=T0 + 20_000, batch=FENCED_BATCH, here=False
    )
    # WHEN a read after the copy's write is split, no header having been read
    parted = split([early, repair], ReadInterval(T0 + 30_000, T0 + 30_100), tolerance_ms=0)
    # THEN the copy's time places both (one counting); before the copy's write, neither's early time does
    assert parted == Split([early, repair], [])
    assert split([early, repair], ReadInterval(T0 + 10_000, T0 + 10_100), tolerance_ms=0) == Split([], [early, repair])


def test_a_record_written_before_its_landing_names_a_fenced_batch_or_is_refused() -> None:
    fenced = record('{"id": "a", "key": "k", "delta": 1}', batch=FENCED_BATCH, before_landing=True)
    assert fenced.v == LANDING_VERSION
    assert decode_records(encode_records([fenced])) == [fenced]
    direct = record('{"id": "a", "key": "k", "delta": 1}', before_landing=True)  # a direct marker's commit
    with pytest.raises(ArchiveFormatError, match="no fenced journal batch"):
        decode_records(encode_records([direct]))


def test_ids_counted_twice_are_told_apart_by_their_content() -> None:
    records = [
        record('{"id": "p", "key": "k", "delta": 1}', committed=T0),
        record('{"id": "p", "key": "k", "delta": 1}', committed=T0 + 40 * 86_400_000, delivery="d2"),
        record('{"id": "q", "key": "k", "delta": 1}', committed=T0, seq=1),
        record('{"id": "q", "key": "other", "delta": 5}', committed=T0 + 40 * 86_400_000, delivery="d2", seq=1),
        record('{"id": "r", "key": "k", "delta": 1}', committed=T0, seq=2),
        record('{"id": "r", "key": "k", "delta": 1}', committed=T0, seq=2, delivery="d3", here=False),
    ]
    assert _identities((r.id, r.commit, r.digest) for r in records) == (("p",), ("q",), 5)


def test_the_recount_split_in_shares_of_keys_is_the_recount() -> None:
    # GIVEN records of a reset, a packed message over keys of different shares, copies and windows
    records = [
        record('{"id": "a", "key": "k1", "delta": 2}'),
        record(
            '{"id": "m", "events": [{"key": "k1", "delta": 1}, {"key": "k2", "delta": 3}, {"key": "k3", "delta": 5}]}',
            seq=1,
        ),
        record('{"id": "r", "key": "k2", "reset": {"count": 10}}', seq=2),
        record('{"id": "b", "key": "k3", "delta": 7}', seq=3),
        record('{"id": "b", "key": "k3", "delta": 7}', seq=3, delivery="d2", here=False),
    ]
    body = encode_records(records)
    whole = recount(records, windows=WINDOWS)
    assert len({share_of(key, 3) for key in ("k1", "k2", "k3")}) > 1  # the keys are in more than one share
    settings = {shares: ShareSettings(shares, WINDOWS, NO_DEFAULTS, "", 100) for shares in (1, 2, 3)}
    for shares in (1, 2, 3):
        parts = [recount_share([body], index, settings[shares]) for index in range(shares)]
        merged = merge(parts)
        # THEN every key's values are the whole recount's, wherever its share
        assert (merged.counters, merged.windows, merged.inexact) == (whole.counters, whole.windows, whole.inexact)
        assert sum(len(part.identities) for part in parts) >= len(records)
        assert merged.records == len(records)


@st.composite
def _countings_around_a_read(draw: st.DrawFn) -> tuple[list[ArchiveRecord], dict[str, int]]:
    """Up to six countings of keys k and j, each committed and archived around a read of T0 + 10 s to + 10.1 s,
    some written before their fenced batch landed (each batch drawn landed, by a header read at some time, or not)."""
    records = []
    landed: dict[str, int] = {}
    for seq in range(draw(st.integers(0, 6))):
        key, name = draw(st.sampled_from(("k", "j"))), draw(st.sampled_from(("a", "b", "c")))
        committed = T0 + draw(st.integers(0, 20_000))
        body = f'{{"id": "m{seq}", "key": "{key}", "deltas": {{"{name}": {draw(st.integers(-3, 3))}}}, "ts": {T0}}}'
        if draw(st.booleans()):
            batch = f"0011223344556677{seq + 1:08x}"
            records.append(record(body, committed=committed, batch=batch, before_landing=True, seq=seq))
            if draw(st.booleans()):
                landed[batch] = committed + draw(st.integers(0, 20_000))
        else:
            records.append(record(body, committed=committed, archived=committed + draw(st.integers(1, 200)), seq=seq))
    return records, landed


@given(
    _countings_around_a_read(),
    st.dictionaries(st.sampled_from(("a", "b", "d")), st.integers(-5, 5).map(Decimal), max_size=3),
)
def test_every_value_a_side_holds_or_a_racing_counting_touches_has_one_finding(
    countings: tuple[list[ArchiveRecord], dict[str, int]], stored: dict[str, Decimal]
) -> None:
    # GIVEN countings placed against a read of key k (before it, after it, or racing it), and what the read found
    records, landed = countings
    parted = split(records, ReadInterval(T0 + 10_000, T0 + 10_100), 0, landed)
    before = recount(parted.before, windows=WINDOWS)
    racing = recounted_slots(recount(parted.uncertain, windows=WINDOWS), ("k", "j"))
    state = KeyState("k", stored)
    # WHEN k is compared
    found = compare_key(state, before, scope=Scope(), spec=WINDOWS, now_ms=NOW, unsettled=frozenset(racing))
    # THEN one finding per value the table holds, the recount before the read gives, or a racing counting of k
    # touches (none left out, whatever side holds it), in slot order; each value a racing counting touches is
    # unsettled, never drift
    slots = [finding.slot for finding in found]
    assert slots == sorted(set(slots))
    assert set(slots) == set(recounted_slots(before, ("k",))) | set(stored_slots(state)) | {
        slot for slot in racing if slot.key == "k"
    }
    assert all(f.verdict is Verdict.UNSETTLED for f in found if f.slot in racing)
    assert all(f.verdict is not Verdict.UNSETTLED for f in found if f.slot not in racing)
