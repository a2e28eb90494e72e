"""``tally.cost.model``: the bill of a traffic description, against figures worked out by hand.

Each case is small enough to bill on paper from the protocol's rules: a direct transaction writes one
marker per message and one ADD per item (2 write units each, every item under 1 KB); the journal adds
its header, applied-records, pages and finish. The planner itself is ``tally.core.plan`` (tested in
test_plan.py): these tests pin what the model makes of its plans.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from tally.core.write_cost import planner_page_bytes
from tally.cost.model import (
    PROXY_TO_MODEL_DURATION,
    SECONDS_PER_MONTH,
    Latencies,
    Prices,
    Traffic,
    bill_batch,
    floor,
    keys_per_message,
    price,
    published_latencies,
    recommend,
    simulate,
    window_moves,
)
from tally.store.pages import encode_page
from tests.support.events import sqs_event

if TYPE_CHECKING:
    from tally.core.aggregate import Totals


@pytest.mark.parametrize(
    ("traffic", "batch", "write_units", "read_units"),
    [
        # GIVEN every event on one key: the whole batch is one unit, one transaction: 10 markers + 1 ADD
        (Traffic(100, keys=1, windows=()), 10, 2 * (10 + 1) / 10, 0.0),
        # the template's windows: hour and day ride on the key's item: 1 item per key, plus the
        # moves of ended windows (window_moves, added below); minutes are items of their own
        (Traffic(100, keys=1), 10, 2 * (10 + 1) / 10, 0.0),
        (Traffic(100, keys=1, windows=("minute", "hour", "day")), 10, 2 * (10 + 2) / 10, 0.0),
        # one packed message of 100 events on one key: 1 marker + 1 ADD for 100 events
        (Traffic(100, keys=1, events_per_message=100, windows=()), 1, 2 * (1 + 1) / 100, 0.0),
        # re-sends: 10 records, 8 new messages; every record's marker read at half a unit, per new event
        (Traffic(100, keys=1, windows=(), resend_rate=0.25), 10, 2 * (8 + 1) / 8, 0.5 * 10 / 8),
    ],
)
def test_units_per_event_match_the_hand_bill(
    traffic: Traffic, batch: int, write_units: float, read_units: float
) -> None:
    units = simulate(traffic, batch, batches=3)
    move_writes, move_reads = window_moves(traffic)
    assert units.write_units == pytest.approx(write_units + move_writes)
    assert units.read_units == pytest.approx(read_units + move_reads)


def test_window_moves_cost_a_key_item_and_a_day_item_per_active_key_day() -> None:
    # GIVEN one key, busy every hour: a move at least once a day, at most every few hours (MOVE_AT_BYTES)
    busy = Traffic(1, keys=1)
    writes, reads = window_moves(busy)
    per_day = 24 * 3600
    assert 2 * 2 / per_day <= writes <= 24 * 2 * 2 / per_day
    assert reads == pytest.approx(24 / per_day)  # one check read per key-hour
    # AND nothing without hour or day windows; minutes alone move nothing
    assert window_moves(Traffic(1, keys=1, windows=())) == (0.0, 0.0)
    assert window_moves(Traffic(1, keys=1, windows=("minute",))) == (0.0, 0.0)
    # AND the per-event share falls as the rate rises (the same key-days carry more events)
    assert window_moves(Traffic(1000, keys=1000))[0] < window_moves(Traffic(10, keys=1000))[0] / 10


def test_a_months_window_moves_once_a_month_not_once_a_day() -> None:
    # GIVEN one key busy every hour, counted in month windows alone, and in day windows alone
    monthly = window_moves(Traffic(1, keys=1, windows=("month",)))
    daily = window_moves(Traffic(1, keys=1, windows=("day",)))
    # THEN the month moves off the key's item once, after it ends: a thirtieth of the days' moves
    assert monthly[0] == pytest.approx(daily[0] / 30)
    # AND the mover's check reads are the same (one per key and hour, whatever the unit)
    assert monthly[1] == daily[1]
    # AND with day windows too, the month rides the move of its last day: only its own item's write is added
    both = window_moves(Traffic(1, keys=1, windows=("day", "month")))
    assert daily[0] < both[0] < daily[0] * (1 + 1 / 30)


def test_single_events_over_many_keys_cost_a_marker_and_an_add_per_distinct_key() -> None:
    # GIVEN single events on uniform keys far more numerous than a batch: (almost) every event its own key
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, windows=(), fenced_apply=False)
    units = simulate(traffic, 50, batches=4)
    # THEN 2 x (marker + ADD) per event, in one transaction of 100 actions per batch
    assert units.write_units == pytest.approx(4.0, rel=0.01)
    assert units.transactions_per_batch == 1
    assert units.journal_share == 0


def test_single_events_take_the_fenced_journal_where_it_costs_less() -> None:
    # GIVEN the same single events with journal batches fenced (the default)
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, windows=())
    units = simulate(traffic, 50, batches=4)
    # THEN each batch is one journal unit: one claim transaction (50 markers and the header, 2 units each), a page of
    # 50 x (17-byte key + 2 x (2 + 48)) + 60 bytes (6 units), the commit and DONE (1 each), 50 fenced writes (1 each)
    assert units.write_units == pytest.approx((102 + 6 + 2 + 50) / 50)
    assert units.journal_share == 1
    assert units.transactions_per_batch == 1
    assert units.single_writes_per_batch == 50 + 2


def test_a_message_with_more_keys_than_a_transaction_goes_through_the_journal_chunked() -> None:
    # GIVEN 10 messages of 100 events, each event its own key: 10 key-disjoint units of 1 message and
    # 100 keys, each one action too many for a transaction, so each goes through the journal (FencedApply=false)
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, events_per_message=100, windows=(), fenced_apply=False)
    units = simulate(traffic, 10, batches=2)
    assert units.journal_share == 1
    # per unit: open (header + 1 marker) 4; commit (header, applied-record, 98 ADDs) 200; chunk 1
    # (applied-record + 2 ADDs) 6; finish 1 (the header alone, a plain UpdateItem); pages at the planner's bound
    # (98 x 120 + 60 bytes: 12 units; 2 x 120 + 60 bytes: 1 unit)
    assert units.write_units == pytest.approx(10 * (4 + 200 + 6 + 1 + 12 + 1) / 1000)
    assert units.transactions_per_batch == 10 * 3
    # the range check reads chunk 1's two items once, strongly consistent
    assert units.read_units == pytest.approx(10 * 2 / 1000)
    assert units.single_writes_per_batch == 10


def test_a_journal_unit_applied_fenced_bills_each_key_once_at_1_unit_per_kb() -> None:
    # GIVEN the same units, the fenced apply on (the template's default)
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, events_per_message=100, windows=())
    units = simulate(traffic, 10, batches=2)
    assert units.journal_share == 1
    # per unit: open (header + 1 marker) 4 in a transaction; pages 12 + 1; the commit alone 1; 100 plain writes of
    # an item with its ten marks (112 + 190 bytes: 1 unit each); DONE 1; no applied-record, no finish transaction
    assert units.write_units == pytest.approx(10 * (4 + 13 + 1 + 100 + 1) / 1000)
    assert (units.transactions_per_batch, units.single_writes_per_batch) == (10 * 1, 10 * 102)
    # the range check reads every item once, strongly consistent (112 bytes: 1 unit)
    assert units.read_units == pytest.approx(10 * 100 / 1000)
    # items written: open 2, pages 2, 100 fenced writes, the commit and DONE
    assert units.items_per_batch == 10 * (2 + 2 + 100 + 2)


def test_the_fenced_apply_prices_u_within_10_percent_of_the_measured() -> None:
    # bench.fenced_apply measured, write units per event on DynamoDB Local, 1,000 Zipf keys, numbered ids, hour and day
    # windows (docs/journal.md, "Measured: fenced vs chunked apply", 2026-12-04: pages compressed, markers keeping
    # placing times, a chunked batch's id 22 characters): packed messages of 100 events in batches of 700 records
    # 0.01591 (fenced) and 0.03053 (chunked); single events in batches of 100, 0.73445 and 1.22890
    # (one simulated batch of 700 records: two gave 0.01763 against one's 0.01760, at twice the CPU)
    def priced(traffic: Traffic, records: int, batches: int) -> float:
        units = simulate(traffic, records, batches=batches, page_bytes=lambda c: len(encode_page(c)), moves=False)
        return units.write_units

    packed = Traffic(3500, keys=1000, events_per_message=100, numbered_ids=True)
    assert priced(packed, 700, 1) == pytest.approx(0.01591, rel=0.10)
    assert priced(replace(packed, fenced_apply=False), 700, 1) == pytest.approx(0.03053, rel=0.10)
    single = Traffic(3500, keys=1000, numbered_ids=True)
    assert priced(single, 100, 2) == pytest.approx(0.73445, rel=0.10)
    assert priced(replace(single, fenced_apply=False), 100, 2) == pytest.approx(1.22890, rel=0.10)


@pytest.mark.slow  # simulates many large batches: seconds of CPU
def test_pages_are_billed_at_the_size_the_encoder_gives() -> None:
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, events_per_message=100, windows=())
    small = simulate(traffic, 10, batches=1, page_bytes=lambda _: 0)
    large = simulate(traffic, 10, batches=1, page_bytes=lambda _: 10 * 1024)
    pages = 10 * 2
    assert (large.write_units - small.write_units) * 1000 == pytest.approx(pages * 10)


def test_the_planner_bound_on_a_page_counts_key_window_and_counter_names() -> None:
    # an all-time item's window id is "all"
    assert planner_page_bytes({"abc": {"units": 1, "cost": 2}}) == 3 + 3 + (5 + 48) + (4 + 48)


def test_a_batch_with_no_new_message_writes_nothing() -> None:
    bill = bill_batch([], 0, Traffic(1, keys=1))
    assert (bill.write_units, bill.read_units, bill.transactions) == (0, 0, 0)


def test_the_monthly_bill_is_the_units_times_the_prices() -> None:
    traffic = Traffic(10, keys=1, windows=(), latency_budget_s=600)
    prices = Prices(write_unit=1e-6, read_unit=1e-6, lambda_gb_second=1e-5, lambda_request=1e-6)
    bill = price(traffic, 10, prices=prices)
    events = 10 * SECONDS_PER_MONTH
    assert bill.events_per_month == events
    assert bill.dynamodb_usd_month == pytest.approx(events * bill.units.write_units * 1e-6)
    invocations = events / bill.records_per_batch
    assert bill.invocations_per_month == pytest.approx(invocations)
    assert bill.lambda_gb_s_month == pytest.approx(invocations * bill.handler_s * 512 / 1024)
    assert bill.lambda_usd_month == pytest.approx(bill.lambda_gb_s_month * 1e-5 + invocations * 1e-6)


def test_handler_duration_adds_each_request_and_the_cpu_at_the_memorys_share() -> None:
    traffic = Traffic(10, keys=1, windows=(), memory_mb=1769)
    latencies = Latencies(
        transact_write_ms=100, cpu_us_per_request=2000, cpu_us_per_item=1000, cpu_us_per_event_item=10
    )
    # one request, a transaction: 10 markers + 1 ADD; 10 events, 1 item each
    bill = price(traffic, 10, latencies=latencies)
    assert bill.handler_s == pytest.approx(0.1 + 0.002 + 11 * 0.001 + 10 * 0.00001)
    half = price(Traffic(10, keys=1, windows=(), memory_mb=884), 10, latencies=latencies)
    assert half.handler_s == pytest.approx(0.1 + (0.002 + 11 * 0.001 + 10 * 0.00001) * 1769 / 884)


def test_items_written_count_every_action_and_page() -> None:
    # 10 journal units of 1 message and 100 keys, chunked: open (header + marker) 2, pages 2, commit (header,
    # applied-record, 98 ADDs) 100, chunk 1 (applied-record + 2 ADDs) 3, finish 1
    traffic = Traffic(100, keys=10_000_000, zipf_s=0, events_per_message=100, windows=(), fenced_apply=False)
    assert simulate(traffic, 10, batches=1).items_per_batch == 10 * (2 + 2 + 100 + 3 + 1)
    # one direct transaction: 10 markers + 1 ADD
    assert simulate(Traffic(100, keys=1, windows=()), 10, batches=1).items_per_batch == 11


@pytest.mark.parametrize(
    ("rate", "batch", "window", "records"),
    [
        (100, 100, 1, 100),  # fills in a second
        (10, 100, 10, 100),  # fills in ten
        (1, 100, 60, 60),  # the template's 60 s window cuts it at 60 records
        (1000, 1, 0, 1),  # one record: no window
    ],
)
def test_the_batching_window_is_what_fills_the_batch_capped_by_the_template(
    rate: float, batch: int, window: int, records: int
) -> None:
    bill = price(Traffic(rate, keys=10, windows=(), latency_budget_s=600), batch)
    assert bill.parameters.batching_window_s == window
    assert bill.records_per_batch == records


def test_a_batch_is_cut_to_lambdas_6_mb_payload() -> None:
    traffic = Traffic(10_000, keys=10, events_per_message=1000, windows=())
    bill = price(traffic, 10_000)
    assert bill.parameters.batch_size * traffic.message_bytes <= 6 * 1024 * 1024
    assert bill.parameters.batch_size < 10_000


def test_the_6_mb_cut_counts_each_record_as_lambda_delivers_it() -> None:
    """A packed body is JSON-escaped inside the event and carries the record's envelope (receipt handle,
    attributes): counting the body alone recommended 91 records of 1,000 events, 6.7 MB as delivered."""
    traffic = Traffic(10_000, keys=1000, events_per_message=1000, key_bytes=17, windows=())
    event = {"key": "k" * 17, "deltas": {"c0": 123456, "c1": 123456}}
    body = json.dumps({"id": "0" * 32, "events": [event] * 1000}, separators=(",", ":"))
    record = sqs_event([body])["Records"][0]
    record["receiptHandle"] = "A" * 400  # AWS's receipt handles run to a few hundred characters
    bill = price(traffic, 10_000)
    assert bill.parameters.batch_size * len(json.dumps(record)) <= 6 * 1024 * 1024
    assert bill.parameters.batch_size >= 60  # and not far below it


def test_recommend_keeps_within_the_latency_budget_and_is_the_cheapest_that_does() -> None:
    traffic = Traffic(50, keys=1000, latency_budget_s=3)
    chosen = recommend(traffic, batch_sizes=(10, 100, 1000))
    assert chosen.latency_s <= 3
    assert chosen.parameters.batch_size == 100  # 1,000 would wait 20 s for its records
    relaxed = recommend(Traffic(50, keys=1000, latency_budget_s=60), batch_sizes=(10, 100, 1000))
    assert relaxed.parameters.batch_size == 1000
    assert relaxed.usd_month < chosen.usd_month


@pytest.mark.slow  # a search over every allowed setting: seconds of CPU
def test_the_floor_is_the_fewest_write_units_any_allowed_setting_reaches() -> None:
    traffic = Traffic(200, keys=1000, windows=("hour", "day"))
    lowest = floor(traffic, batch_sizes=(10, 100, 1000))
    for size in (1, 10, 100, 1000, 5000, 10_000):
        assert lowest.units.write_units <= price(traffic, size, batches=4).units.write_units + 1e-12
    # the largest batch this traffic fills: 200 records/s for the template's 60 s window, 12,000 records,
    # cut to 10,000 by BatchSize's limit and to 6 MB / 1,144 bytes = 5,499 by Lambda's payload
    assert lowest.records_per_batch == 6 * 1024 * 1024 // traffic.record_bytes
    assert lowest.parameters.batching_window_s == 28


@pytest.mark.slow  # a search over every allowed setting: seconds of CPU
def test_the_floor_ignores_the_latency_budget() -> None:
    hurried = floor(Traffic(20, keys=100, latency_budget_s=1), batch_sizes=(10, 100))
    patient = floor(Traffic(20, keys=100, latency_budget_s=600), batch_sizes=(10, 100))
    assert hurried.units.write_units == patient.units.write_units
    assert hurried.parameters.batching_window_s == 60  # 1,200 records in the template's longest window


@pytest.mark.slow  # a search over every allowed setting: seconds of CPU
@pytest.mark.parametrize(
    "traffic",
    [
        Traffic(10, keys=100, latency_budget_s=120),
        Traffic(100, keys=1000, latency_budget_s=90),
        Traffic(1000, keys=1000, windows=()),
        Traffic(1000, keys=1000, events_per_message=220, latency_budget_s=120),
        Traffic(10_000, keys=1000, events_per_message=1000, windows=()),
        Traffic(500, keys=10_000, zipf_s=0.8, source="Kinesis", latency_budget_s=300),
    ],
    ids=["single-10/s", "single-100/s", "single-1000/s-no-windows", "packed-1000/s", "packed-10k/s", "kinesis"],
)
def test_recommend_is_within_1_2x_of_the_floor_when_the_budget_allows(traffic: Traffic) -> None:
    """The high-volume target: the settings ``tally plan`` recommends cost at most 1.2x the floor's write units."""
    chosen = recommend(traffic, batches=2)
    lowest = floor(traffic, batches=2)
    assert lowest.latency_s <= traffic.latency_budget_s  # the budget allows the floor's settings
    assert chosen.units.write_units <= 1.2 * lowest.units.write_units


@pytest.mark.slow  # a search over every allowed setting: seconds of CPU
def test_packed_u_reaches_0_03_write_units_per_event_with_the_high_volume_settings() -> None:
    """The high-volume target: 1,000 events per message (the producer's key cap raised), the 6 MB batch."""
    traffic = Traffic(10_000, keys=1000, events_per_message=1000, windows=())
    chosen = recommend(traffic)
    assert chosen.units.write_units <= 0.03
    assert chosen.parameters.batch_size * traffic.record_bytes <= 6 * 1024 * 1024
    # with the producer's default 99-key cap, a message holds about 220 events: the fenced apply (the default)
    # reaches 0.03 there too; chunk transactions do not
    assert keys_per_message(Traffic(1, keys=1000, events_per_message=220)) == pytest.approx(99, abs=1)
    capped = Traffic(10_000, keys=1000, events_per_message=220, windows=())
    assert floor(capped).units.write_units <= 0.03
    assert floor(replace(capped, fenced_apply=False)).units.write_units > 0.03


@pytest.mark.slow  # simulates many large batches: seconds of CPU
def test_kinesis_gets_shards_for_its_record_rate_and_batches_fill_per_shard() -> None:
    bill = price(Traffic(5000, keys=1000, source="Kinesis", windows=()), 10_000)
    template = bill.parameters.as_template()
    assert template["Source"] == "Kinesis"
    assert template["ShardCount"] == "5"
    # one shard takes 1,000 records a second: a 1 s window gathers 1,000, not the stream's 5,000
    assert bill.records_per_batch <= 10_000
    assert int(template["StreamBatchingWindowSeconds"]) * 1000 >= bill.records_per_batch


def test_sqs_parameters_name_the_templates_parameters() -> None:
    bill = price(Traffic(100, keys=10, windows=("hour",)), 100)
    assert bill.parameters.as_template() == {
        "Source": "SQS",
        "BatchSize": "100",
        "BatchingWindowSeconds": "1",
        "MaximumConcurrency": "2",
        "Windows": "hour",
        "MemorySize": "512",
    }


def test_hot_keys_are_recommended_only_when_batches_overlap() -> None:
    quiet = price(Traffic(10, keys=100), 10)
    assert quiet.parameters.hot_keys == 0
    busy = price(Traffic(20_000, keys=100, memory_mb=128), 100, latencies=Latencies(transact_write_ms=200))
    assert busy.parameters.hot_keys > 0
    assert 2 <= busy.parameters.hot_key_shards <= 16


@pytest.mark.parametrize(
    "bad",
    [
        {"events_per_second": 0, "keys": 1},
        {"events_per_second": 1, "keys": 0},
        {"events_per_second": 1, "keys": 1, "source": "SNS"},
        {"events_per_second": 1, "keys": 1, "resend_rate": 1.0},
    ],
)
def test_an_impossible_traffic_description_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must"):
        Traffic(**bad)  # type: ignore[arg-type]


def test_numbered_ids_are_billed_one_marker_item_per_block() -> None:
    # GIVEN one key and a batch of 50 single events: 50 markers + 1 ADD under random ids; numbered ids
    # (one producer session, in order: 4 blocks of up to 16) write 4 marker items + 1 ADD
    random_ids = simulate(Traffic(100, keys=1, windows=()), 50, batches=1)
    numbered = simulate(Traffic(100, keys=1, windows=(), numbered_ids=True), 50, batches=1)
    assert random_ids.write_units == pytest.approx(2 * (50 + 1) / 50)
    assert numbered.write_units == pytest.approx(2 * (4 + 1) / 50)


def test_single_event_u_with_numbered_ids_is_priced_under_the_numbered_ids_target() -> None:
    # GIVEN workload U's shape (1,000 Zipf keys, two counters, windows off) at batches of 100
    traffic = Traffic(100, keys=1000, windows=(), numbered_ids=True)
    # THEN the model prices it at <= 1.3 write units per event (bench.plan_check --numbered measures it)
    assert simulate(traffic, 100, batches=8).write_units <= 1.3


# The latency proxy's measurements (docs/explanation/costs.md, "Handler duration through the latency proxy":
# python -m bench duration --proxy --batches 2 --write-concurrency 1 --write-concurrency 4, 512 MB, the fenced apply
# on), two runs: (events per message, records per batch, handler seconds per batch at TALLY_WRITE_CONCURRENCY 4, the
# default the model prices single-item writes at).
def _store_page_bytes(increments: Totals) -> int:
    """A journal page as the store encodes it (as tally plan prices it)."""
    return len(encode_page(increments))


PROXY_MEASURED = [
    # the first run (the clients validating parameters client-side)
    (1, 10_000, 19.432),
    (1, 100, 0.889),
    (100, 786, 17.801),
    (100, 100, 7.098),
    # the second (without that validation; the same code otherwise)
    (1, 10_000, 19.608),
    (1, 100, 0.956),
    (100, 786, 16.557),
    (100, 100, 10.408),
]


@pytest.mark.parametrize(("pack", "records", "measured_s"), PROXY_MEASURED)
def test_the_proxy_measured_the_duration_within_the_range_the_plan_prints(
    pack: int, records: int, measured_s: float
) -> None:
    """tally plan prints the range PROXY_TO_MODEL_DURATION: per event, what the proxy measured over what the
    model predicts for the same traffic (workload U: 1,000 Zipf keys, 2 counters, hour and day windows)."""
    traffic = Traffic(
        float(records * pack),
        keys=1000,
        events_per_message=pack,
        counters=2,
        key_bytes=17,
        numbered_ids=False,
    )
    bill = price(traffic, records, latencies=published_latencies(), page_bytes=_store_page_bytes, batches=2)
    ratio = (measured_s / (records * pack)) / (bill.handler_s / bill.units.events_per_batch)
    low, high = PROXY_TO_MODEL_DURATION
    assert low <= ratio <= high
