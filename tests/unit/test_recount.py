"""The recount (``tally.audit.recount``): archive records -> what every counter, window, gauge and distinct count
must hold, with the core that counts; what cannot be recounted exactly is said, never guessed silently."""

from __future__ import annotations

from decimal import Decimal

from tally.audit.recount import countings, recount
from tally.core.archive import ArchiveRecord, archive_record
from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.digest import content_digest
from tally.core.items import ALL_TIME, view_item_key
from tally.core.ledger import Commit
from tally.core.limits import WIRE_LIMITS
from tally.core.model import GaugeKind, Message, SourceRecord
from tally.core.views import parse_counter_views
from tally.core.windows import parse_window_spec

HOUR = 3_600_000
T0 = 1_764_633_600_000  # 2025-12-02T00:00:00Z
WINDOWS = parse_window_spec("hour,day")
VIEWS = parse_counter_views("api*=customer,customer+route")


def record(
    body: str,
    *,
    committed: int = T0,
    archived: int | None = None,
    batch: str | None = None,
    delivery: str = "d1",
    seq: int = 0,
    here: bool = True,
    received: int | None = None,
    placed: int | None = None,
    before_landing: bool = False,
) -> ArchiveRecord:
    body = body.replace("TS", str(T0))
    message = decode_message(body, WIRE_LIMITS, views=VIEWS)
    assert isinstance(message, Message), message
    source = SourceRecord(f"r-{seq}", body, committed - 10 if received is None else received)
    return archive_record(
        message,
        Commit.of_marker(committed, batch, placed),
        source,
        digest=content_digest(message),
        archived_ms=committed + 50 if archived is None else archived,
        delivery=delivery,
        seq=seq,
        counted_here=here,
        before_landing=before_landing,
    )


def test_copies_of_one_counting_count_once_and_a_second_commit_counts_again() -> None:
    # GIVEN a message archived by the invocation that counted it, again by a retry of that write, again by a
    # redelivery that met its marker; and a message re-sent past the horizon: counted twice, two commits
    first = record('{"id": "a", "key": "k", "delta": 1}')
    records = [
        first,
        first,
        record('{"id": "a", "key": "k", "delta": 1}', archived=T0 + HOUR, delivery="d2", here=False),
        record('{"id": "p", "key": "k", "delta": 10}', committed=T0, seq=1),
        record('{"id": "p", "key": "k", "delta": 10}', committed=T0 + 40 * 24 * HOUR, delivery="d3"),
    ]
    # WHEN they are recounted
    result = recount(records)
    # THEN "a" counts once, "p" twice, and nothing is in doubt
    assert result.counters == {"k": {"count": 21}}
    assert (result.records, result.messages, result.inexact, result.digest_mismatches) == (5, 3, {}, ())
    # AND the copy kept for "a" is the committing invocation's, its landing time the earliest copy's
    (kept,) = [c for c in countings(records) if c.record.id == "a"]
    assert (kept.record.delivery, kept.copies, kept.hi_ms) == ("d1", 3, T0 + 50)


def test_windows_come_from_ts_or_from_the_receive_time_of_the_committing_delivery() -> None:
    records = [
        record(f'{{"id": "a", "key": "k", "delta": 2, "ts": {T0 - HOUR + 5}}}'),
        # no ts: placed by the receive time of the delivery that committed it, not by a later copy's
        record('{"id": "b", "key": "k", "delta": 3}', received=T0 + 5, seq=1),
        record('{"id": "b", "key": "k", "delta": 3}', received=T0 + 2 * HOUR, delivery="d2", here=False),
    ]
    result = recount(records, windows=WINDOWS)
    assert result.counters == {"k": {"count": 5}}
    assert result.windows == {
        "k": {
            "h#2025-12-01T23:00Z": {"count": 2},
            "d#2025-12-01": {"count": 2},
            "h#2025-12-02T00:00Z": {"count": 3},
            "d#2025-12-02": {"count": 3},
        }
    }
    assert result.inexact == {}


def test_a_window_placed_only_by_a_later_delivery_is_not_recounted_exactly() -> None:
    # GIVEN a message without ts whose committing invocation never archived it (a crash), archived by later
    # deliveries: a producer's re-send received at another time, then the redelivery of the counted record
    records = [
        record('{"id": "b", "key": "k", "delta": 3}', received=T0 + 2 * HOUR, here=False, delivery="d2"),
        record('{"id": "b", "key": "k", "delta": 3}', received=T0, here=False, delivery="d3"),
        record('{"id": "c", "key": "k", "delta": 1, "ts": TS}', here=False, delivery="d3", seq=1),
    ]
    result = recount(records, windows=WINDOWS)
    # THEN the all-time value is exact, and the key's windows are said not to be recountable (which window the
    # event without ts went to is unknown)
    assert result.counters == {"k": {"count": 4}}
    assert result.inexact == {}
    assert set(result.unplaced) == {"k"}
    assert "later delivery" in result.unplaced["k"]


def test_a_later_deliverys_copy_places_the_windows_by_the_receive_time_the_marker_kept() -> None:
    # GIVEN the same message archived only by later deliveries, whose markers kept the receive time that placed it
    # (a producer's re-send received two hours later, then the redelivery of the counted record)
    records = [
        record('{"id": "b", "key": "k", "delta": 3}', received=T0 + 2 * HOUR, here=False, delivery="d2", placed=T0),
        record('{"id": "b", "key": "k", "delta": 3}', received=T0, here=False, delivery="d3", placed=T0),
    ]
    # WHEN recounted
    result = recount(records, windows=WINDOWS)
    # THEN its windows are the ones that receive time gives, not the re-send's, and nothing is left unplaced
    assert result.windows == {"k": {"h#2025-12-02T00:00Z": {"count": 3}, "d#2025-12-02": {"count": 3}}}
    assert result.unplaced == {}
    # AND the copy the committing invocation wrote names no placing time of its own: its receive time is it
    own = record('{"id": "b", "key": "k", "delta": 3}', received=T0 + 5, placed=T0 + 5)
    assert own.placed_ms is None
    assert countings([own])[0].placed_ms == T0 + 5


def test_what_no_window_owes_to_a_receive_time_is_placed_whoever_archived_it() -> None:
    # GIVEN messages without ts archived only by a later delivery whose marker kept no placing time: a reset (it
    # sets the all-time value and adds to no window), and a count committed ten days after it was received, whose
    # windows were past their retention (a day) when it counted
    records = [
        record('{"id": "r", "key": "k", "reset": {"count": 5}}', received=T0 + 2 * HOUR, here=False),
        record('{"id": "a", "key": "j", "delta": 1}', committed=T0 + 240 * HOUR, received=T0, here=False, seq=1),
    ]
    kept_a_day = parse_window_spec("hour,day", "hour=1,day=1")
    result = recount(records, windows=kept_a_day)
    # THEN no window depends on the time it lacks: nothing is unplaced
    assert result.unplaced == {}
    # AND with windows that keep it, the count is unplaced, the reset still not
    assert set(recount(records, windows=WINDOWS).unplaced) == {"j"}


def test_start_values_count_once_on_the_all_time_value() -> None:
    defaults = parse_counter_defaults("stock:*#stock=start:100")
    records = [
        record('{"id": "a", "key": "stock:1", "deltas": {"stock": -1}}'),
        record('{"id": "b", "key": "stock:1", "deltas": {"stock": -2}}', seq=1),
    ]
    assert recount(records, defaults=defaults).counters == {"stock:1": {"stock": 97}}


def test_a_reset_keeps_what_committed_after_it_in_one_invocation_by_source_order() -> None:
    records = [
        record('{"id": "a", "key": "k", "deltas": {"n": 5}}', seq=0),
        record('{"id": "r", "key": "k", "reset": {"n": 100}}', seq=1),
        record('{"id": "b", "key": "k", "deltas": {"n": 7}}', seq=2),
        record('{"id": "c", "key": "j", "deltas": {"n": 1}}', seq=3),
    ]
    result = recount(records)
    assert result.counters == {"k": {"n": 107}, "j": {"n": 1}}
    assert result.inexact == {}


def test_a_reset_orders_against_other_invocations_by_their_commit_times() -> None:
    records = [
        record('{"id": "a", "key": "k", "deltas": {"n": 5}}', committed=T0, archived=T0 + 200, delivery="d1"),
        record(
            '{"id": "r", "key": "k", "reset": {"n": 100}}', committed=T0 + 1_000, archived=T0 + 1_200, delivery="d2"
        ),
        record('{"id": "b", "key": "k", "deltas": {"n": 7}}', committed=T0 + 2_000, archived=T0 + 2_100, delivery="d3"),
    ]
    result = recount(records)
    assert result.counters == {"k": {"n": 107}}
    assert result.inexact == {}


def test_a_reset_that_overlaps_another_commit_is_not_recounted_exactly() -> None:
    # GIVEN a message whose invocation began before the reset's ended and ended after the reset's began
    records = [
        record('{"id": "a", "key": "k", "deltas": {"n": 5, "m": 1}}', committed=T0, archived=T0 + 1_500, delivery="d1"),
        record(
            '{"id": "r", "key": "k", "reset": {"n": 100}}', committed=T0 + 1_000, archived=T0 + 1_200, delivery="d2"
        ),
    ]
    result = recount(records)
    # THEN the reset counter is in doubt (never reported as drift), the other counter is exact
    assert set(result.inexact) == {("k", ALL_TIME, "n")}
    assert "cannot be ordered" in result.inexact[("k", ALL_TIME, "n")]
    assert result.counters["k"]["m"] == 1


def test_a_redelivered_reset_is_ordered_by_its_original_commit() -> None:
    # GIVEN a reset whose invocation crashed before its archive write: only the redelivery's copy exists,
    # and a message counted between the crash and the redelivery
    records = [
        record(
            '{"id": "r", "key": "k", "reset": {"n": 100}}',
            committed=T0,
            archived=T0 + 600_000,
            delivery="d2",
            here=False,
        ),
        record(
            '{"id": "a", "key": "k", "deltas": {"n": 5}}', committed=T0 + 900_000, archived=T0 + 900_100, delivery="d3"
        ),
    ]
    # THEN the reset is before the message: its deltas had landed by its redelivery, before the message began
    assert recount(records).counters == {"k": {"n": 105}}


def test_gauges_and_distinct_counts() -> None:
    records = [
        record('{"id": "a", "key": "k", "delta": 1, "gauges": {"peak": {"max": 3}}, "distinct": {"u": "x"}, "ts": TS}'),
        record(
            '{"id": "b", "key": "k", "delta": 1, "gauges": {"peak": {"max": 9}}, "distinct": {"u": "y"}, "ts": TS}',
            seq=1,
        ),
        record('{"id": "c", "key": "k", "delta": 1, "gauges": {"peak": {"max": 4}}, "distinct": {"u": "x"}}', seq=2),
    ]
    result = recount(records, windows=WINDOWS)
    assert result.gauges == {"k": {(GaugeKind.MAX, "peak"): 9}}
    assert result.distinct["k"][(ALL_TIME, "u")] == 2
    assert result.distinct["k"][("h#2025-12-02T00:00Z", "u")] == 2  # "c" has no ts: all-time only


def test_content_that_does_not_match_its_digest_is_reported() -> None:
    genuine = record('{"id": "a", "key": "k", "delta": 1}')
    edited = ArchiveRecord(**{**{f: getattr(genuine, f) for f in genuine.__struct_fields__}, "digest": "00" * 16})
    result = recount([edited])
    assert result.digest_mismatches == ("a",)


def test_exact_sums_beyond_a_double() -> None:
    records = [
        record('{"id": "a", "key": "k", "delta": 12345678901234567890123456789012345678}'),
        record('{"id": "b", "key": "k", "delta": 0.1}', seq=1),
        record('{"id": "c", "key": "k", "delta": 0.2}', seq=2),
    ]
    assert recount(records).counters["k"]["count"] == Decimal("12345678901234567890123456789012345678.3")


def test_views_recount_from_the_archived_dims_as_the_commit_derived_them() -> None:
    # GIVEN events with dims, archived and read back (the dims are part of the archived content), then a reset of one
    # view item, then a later event
    acme = '"dims": {"customer": "acme", "route": "/a"}'
    globex = '"dims": {"customer": "globex", "route": "/a"}'
    records = [
        record(f'{{"id": "a", "key": "api", "deltas": {{"calls": 2}}, "ts": TS, {acme}}}'),
        record(
            f'{{"id": "b", "events": [{{"key": "api", "deltas": {{"calls": 3}}, {globex}}}, '
            f'{{"key": "api", "deltas": {{"calls": 1}}, {acme}}}]}}',
            seq=1,
        ),
        record(
            '{"id": "r", "key": "api", "reset": {"calls": 10}, "dims": {"customer": "acme"}}',
            committed=T0 + HOUR,
            delivery="d2",
        ),
        record(
            f'{{"id": "c", "key": "api", "deltas": {{"calls": 4}}, {acme}}}', committed=T0 + 2 * HOUR, delivery="d3"
        ),
    ]
    # WHEN they are recounted with the views in force
    result = recount(records, windows=WINDOWS, views=VIEWS)
    # THEN each view item holds what the commit's derivation puts there; the reset set acme's item only
    customer = {name: view_item_key("customer", "api", (name,)) for name in ("acme", "globex")}
    assert result.counters["api"] == {"calls": 10}
    assert result.counters[customer["acme"]] == {"calls": 14}  # reset to 10, then 4
    assert result.counters[customer["globex"]] == {"calls": 3}
    assert result.counters[view_item_key("customer+route", "api", ("acme", "/a"))] == {"calls": 7}
    assert result.windows[customer["acme"]]["d#2025-12-02"] == {"calls": 6}  # b was received the day before
    assert result.digest_mismatches == ()
    assert not result.inexact
