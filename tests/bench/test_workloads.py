"""Unit tests for ``bench.workloads``: seeded streams, their reference sums and the write floor."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from bench.workloads import (
    HOT_KEY,
    Delivery,
    Event,
    WorkloadSpec,
    batch_footprints,
    deliver,
    hot_events,
    lambda_event,
    usage_events,
    write_floor,
)

from tally.core.decode import decode_message
from tally.core.model import Message
from tally.sources.sqs import records_from_event

SPEC = WorkloadSpec(events=2_000, keys=50, resend_rate=0.05, pack=100, resend_window=200, seed=7)


def test_streams_are_reproducible_from_the_seed() -> None:
    # GIVEN the same spec twice WHEN the streams are built THEN every record is identical
    first = deliver("U", usage_events(SPEC), SPEC, packed=False)
    second = deliver("U", usage_events(SPEC), SPEC, packed=False)
    assert first.deliveries == second.deliveries


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed"])
def test_resends_repeat_an_earlier_message_in_a_new_record(packed: bool) -> None:
    # GIVEN a stream with 5% producer re-sends
    stream = deliver("U", usage_events(SPEC), SPEC, packed=packed)
    messages = SPEC.events // (SPEC.pack if packed else 1)
    resends = [d for d in stream.deliveries if d.resend]
    # THEN exactly 5% of the messages come again, later, with the same body and a new SQS record id
    assert len(resends) == round(messages * SPEC.resend_rate)
    position = {d.record_id: i for i, d in enumerate(stream.deliveries)}
    originals = {d.message_id: d for d in stream.deliveries if not d.resend}
    for resend in resends:
        original = originals[resend.message_id]
        assert resend.body == original.body
        assert resend.record_id != original.record_id
        assert position[resend.record_id] > position[original.record_id]
    assert len({d.record_id for d in stream.deliveries}) == len(stream.deliveries)


def test_expected_counts_each_message_once_and_delivered_counts_the_resends_too() -> None:
    # GIVEN the single and packed deliveries of the same events
    events = usage_events(SPEC)
    single = deliver("U", events, SPEC, packed=False)
    packed = deliver("U", events, SPEC, packed=True)
    # THEN both expect the plain sum of the events, and the re-sent share is the difference to "delivered"
    plain = Counter[str]()
    for event in events:
        plain[event.key] += event.units
    assert {key: counters["units"] for key, counters in single.expected().items()} == plain
    assert single.expected() == packed.expected()
    resent_units = sum(events[d.first_event].units for d in single.deliveries if d.resend)
    delivered = sum(c["units"] for c in single.delivered().values())
    expected = sum(c["units"] for c in single.expected().values())
    assert delivered - expected == resent_units > 0
    assert single.distinct_events == packed.distinct_events == SPEC.events


def test_usage_keys_are_zipf_and_the_hot_workload_has_one_key() -> None:
    counts = Counter(event.key for event in usage_events(SPEC))
    ranked = [count for _, count in counts.most_common()]
    assert counts["usage:tenant-0000"] == ranked[0] > 3 * counts["usage:tenant-0009"]
    assert {event.key for event in hot_events(SPEC)} == {HOT_KEY}
    # The hot workload draws the same deltas, so per-event figures compare.
    assert [e.units for e in hot_events(SPEC)] == [e.units for e in usage_events(SPEC)]


def test_prefix_keeps_the_first_messages_and_their_resends() -> None:
    stream = deliver("U", usage_events(SPEC), SPEC, packed=False)
    prefix = stream.prefix(300)
    assert prefix.distinct_events == 300
    assert all(d.first_event < 300 for d in prefix.deliveries)
    assert [d for d in stream.deliveries if d.first_event < 300] == list(prefix.deliveries)


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed"])
def test_every_record_is_valid_tally_input_with_the_generated_deltas(packed: bool) -> None:
    # GIVEN the Lambda event of a batch WHEN tally's own source adapter and decoder read it
    events = usage_events(SPEC)
    stream = deliver("U", events, SPEC, packed=packed)
    batch = stream.batches(100)[0]
    records = records_from_event(lambda_event(batch, 1_700_000_000_000))
    # THEN each body decodes to exactly the generated events, decimals exact
    for delivery, record in zip(batch, records, strict=True):
        message = decode_message(record.body)
        assert isinstance(message, Message)
        assert message.message_id == delivery.message_id
        generated = events[delivery.first_event : delivery.first_event + delivery.event_count]
        assert [(e.key, dict(e.deltas)) for e in message.events] == [
            (g.key, {"units": g.units, "cost": g.cost}) for g in generated
        ]
        assert all(isinstance(e.deltas["cost"], Decimal) for e in message.events)


def _delivery(message_id: str, first: int, count: int = 1) -> Delivery:
    return Delivery(f"r-{message_id}-{first}", message_id, "{}", first, count, resend=False)


def test_write_floor_counts_new_messages_and_distinct_items_per_batch() -> None:
    # GIVEN events on keys a, a, b, c and two batches, the second re-sending message m0
    events = [Event(key, 1, Decimal(0)) for key in ("a", "a", "b", "c")]
    batches = [
        (_delivery("m0", 0), _delivery("m1", 1), _delivery("m2", 2)),  # 3 messages, keys {a, b}
        (_delivery("m0", 0), _delivery("m3", 3)),  # m0 already applied; 1 new message, key {c}
    ]
    # THEN the floor is 2 x (3 + 2) + 2 x (1 + 1), and windows multiply the counter items
    assert write_floor(batches, events) == 14
    assert write_floor(batches, events, items_per_key=3) == 2 * (3 + 6) + 2 * (1 + 3)
    # AND with the fenced apply each item is a plain write: 1 unit, markers still 2
    assert write_floor(batches, events, item_units=1) == (2 * 3 + 2) + (2 * 1 + 1)
    assert batch_footprints(batches, events) == [(3, 2, 0), (1, 1, 1)]
