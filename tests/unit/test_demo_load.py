"""The demo's load plan: exact totals of distinct events, re-sends with the same ids, poison that is poison."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from tally.core.decode import decode_message
from tally.core.model import Message, Rejection
from tally_local.load import HOUR_MS, DemoLoad, plan_load, poison_bodies

NOW_MS = 1_795_320_000_000


@pytest.fixture(scope="module")
def load() -> DemoLoad:
    return plan_load(3_000, ["sqs", "kinesis", "sqs"], keys=40, seed=5, now_ms=NOW_MS, duplicate_rate=0.05)


def test_totals_are_the_sum_of_the_distinct_planned_events(load: DemoLoad) -> None:
    # GIVEN every event of every planned message (re-sends excluded)
    summed: dict[str, dict[str, Decimal]] = {}
    for plan in load.producers:
        for message in plan.messages:
            for event in message.events:
                counters = summed.setdefault(event.key, {})
                for name, delta in event.deltas.items():
                    counters[name] = counters.get(name, Decimal(0)) + delta
    # THEN they add up to the plan's expected totals, and there are as many as asked for
    assert summed == load.expected
    assert load.events == 3_000


def test_each_producer_mixes_single_and_packed_messages_and_resends_some(load: DemoLoad) -> None:
    for plan in load.producers:
        kinds = Counter(message.packed for message in plan.messages)
        assert kinds[True] > 0
        assert kinds[False] > 0
        # re-sends are some of its own messages, unchanged: same ids, same bodies
        assert plan.resends
        bodies = {message.message_id: message.body for message in plan.messages}
        assert all(bodies[resend.message_id] == resend.body for resend in plan.resends)
    ids = [message.message_id for plan in load.producers for message in plan.messages]
    assert len(ids) == len(set(ids))


def test_the_plan_is_reproducible_from_its_seed() -> None:
    one = plan_load(500, ["sqs", "kinesis"], keys=10, seed=9, now_ms=NOW_MS)
    two = plan_load(500, ["sqs", "kinesis"], keys=10, seed=9, now_ms=NOW_MS)
    assert one.expected == two.expected
    assert [len(p.messages) for p in one.producers] == [len(p.messages) for p in two.producers]


def test_every_poison_body_is_refused_with_its_code() -> None:
    for poison in poison_bodies("producer-0", NOW_MS):
        decoded = decode_message(poison.body)
        if poison.code == "ts_in_future":
            # refused by the pipeline against its clock, not by the decoder
            assert isinstance(decoded, Message)
            assert decoded.events[0].ts_ms is not None
            assert decoded.events[0].ts_ms > NOW_MS + HOUR_MS
        else:
            assert isinstance(decoded, Rejection), poison.body
            assert str(decoded.code) == poison.code
