"""What the demo publishes: events from several producers, producer re-sends, poison, and the exact totals.

Pure: given a seed and the clock (read once by the caller), it plans every message before anything is
sent. Events come from ``tally.cli.synthetic.generate`` (Zipf-skewed keys, a ``count`` and a
two-decimal ``amount`` per event, totals summed there, independently of any counting code path). Each
producer gets its share: some as single-event messages, the rest packed (the producer library's
packing, ids assigned once); a few percent of its messages are planned a second time as producer
re-sends with the same ids and bodies (which must count once), and it sends a handful of poison
bodies, each with the ``tally.error_code`` the consumer must dead-letter it with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from tally.cli.synthetic import generate
from tally.producer import PackLimits, build_messages, new_message_id
from tally.producer.sqs import DEFAULT_MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from decimal import Decimal

    from tally.producer import OutgoingMessage

Source = Literal["sqs", "kinesis"]

KEY_PREFIX: Final = "demo:"
HOUR_MS: Final = 3_600_000
DEFAULT_SINGLE_RATES: Final[Mapping[Source, float]] = {"sqs": 0.01, "kinesis": 0.05}
"""Fewer single-event messages on SQS: moto's SQS costs milliseconds per message (and more as the
queue grows), its Kinesis microseconds; a deployment would be fine with either."""


@dataclass(frozen=True, slots=True)
class Poison:
    """A body the consumer must refuse, and the reason it must give."""

    body: str
    code: str


def poison_bodies(tag: str, now_ms: int) -> tuple[Poison, ...]:
    """One poison body per kind of mistake; ``tag`` keeps the ids of different producers apart."""
    return (
        Poison("this is not JSON", "malformed_json"),
        Poison(f'{{"id":"{tag}-p1","key":"{KEY_PREFIX}x","delta":"1"}}', "invalid_number"),
        Poison(f'{{"id":"{tag}-p2","key":"{KEY_PREFIX}x","detla":1}}', "invalid_field"),
        Poison(f'{{"key":"{KEY_PREFIX}x","delta":1}}', "missing_id"),
        Poison(f'{{"id":"{tag}-p3","key":"{KEY_PREFIX}x","delta":1e999}}', "number_out_of_range"),
        Poison(f'{{"id":"{tag}-p4","key":"{KEY_PREFIX}x","delta":1,"ts":{now_ms + 3 * HOUR_MS}}}', "ts_in_future"),
        Poison(f'{{"id":"{tag}-p5","key":"{KEY_PREFIX}x\\u001f1","delta":1}}', "invalid_key"),
        Poison(f'{{"id":"{tag}-p6","key":"{KEY_PREFIX}x","delta":1,"ts":"2026-01-01T00:00:00"}}', "invalid_ts"),
        Poison(f'{{"id":"{tag}-p7","events":[]}}', "empty_message"),
    )


@dataclass(frozen=True, slots=True)
class ProducerPlan:
    """Everything one producer sends, in order: messages, then re-sends, with poison mixed in."""

    name: str
    source: Source
    messages: tuple[OutgoingMessage, ...]
    resends: tuple[OutgoingMessage, ...]
    poison: tuple[Poison, ...]

    @property
    def events(self) -> int:
        return sum(len(message.events) for message in self.messages)

    @property
    def records(self) -> int:
        """Messages (SQS) or records (Kinesis) this producer puts on its source."""
        return len(self.messages) + len(self.resends) + len(self.poison)


@dataclass(frozen=True, slots=True)
class DemoLoad:
    producers: tuple[ProducerPlan, ...]
    expected: dict[str, dict[str, Decimal]]
    """Key -> counter -> exact total of every distinct event (re-sends and poison count nothing)."""

    @property
    def events(self) -> int:
        return sum(plan.events for plan in self.producers)

    @property
    def resent_messages(self) -> int:
        return sum(len(plan.resends) for plan in self.producers)

    @property
    def resent_events(self) -> int:
        return sum(len(message.events) for plan in self.producers for message in plan.resends)

    @property
    def poison(self) -> tuple[Poison, ...]:
        return tuple(poison for plan in self.producers for poison in plan.poison)

    def records(self, source: Source) -> int:
        return sum(plan.records for plan in self.producers if plan.source == source)


def plan_load(
    events: int,
    sources: Sequence[Source],
    *,
    keys: int,
    seed: int,
    now_ms: int,
    duplicate_rate: float = 0.03,
    single_rates: Mapping[Source, float] = DEFAULT_SINGLE_RATES,
    pack_events: int = 500,
) -> DemoLoad:
    """``events`` events over ``keys`` keys, one producer per entry of ``sources``; ``single_rates`` of
    each source's events go as single-event messages, the rest packed ``pack_events`` to a message."""
    if not sources:
        raise ValueError("at least one producer")
    rng = random.Random(seed)
    load = generate(events, keys, seed=rng.randrange(2**32), now_ms=now_ms, prefix=KEY_PREFIX)
    limits = PackLimits(max_bytes=DEFAULT_MAX_MESSAGE_BYTES, max_events=pack_events)
    plans = []
    for index, source in enumerate(sources):
        share = load.events[index :: len(sources)]
        singles = round(len(share) * single_rates[source])
        messages = build_messages(share[:singles], None, new_message_id) + build_messages(
            share[singles:], limits, new_message_id
        )
        rng.shuffle(messages)  # singles and packs interleaved, as real producers would send them
        resends = rng.sample(messages, round(len(messages) * duplicate_rate))
        tag = f"producer-{index}"
        plans.append(ProducerPlan(tag, source, tuple(messages), tuple(resends), poison_bodies(tag, now_ms)))
    return DemoLoad(tuple(plans), load.totals)
