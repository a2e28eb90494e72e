"""Seeded workloads, identical for every peer, with reference sums computed without tally's code.

- **U, usage metering**: ``events`` events over ``keys`` keys drawn Zipf (rank ``k`` with weight
  ``1 / k**s``), each with an integer counter (``units``) and a decimal one (``cost``).
- **H, one hot key**: the same deltas, all on one key.

Each stream is delivered twice over: as single-event messages, and packed (``pack`` consecutive events
per message). In both, a share ``resend_rate`` of the messages is re-sent by the producer: the same body
(so the same ``id``) in a new SQS record, a little later in the stream (within ``resend_window``
records: often in a later batch, sometimes in the same one). Peers that make a request per event may run
on a prefix of the stream (``Stream.prefix``): the messages of its first N events and their re-sends.

``Stream.expected`` sums each distinct message once: what an exactly-once counter must show.
``Stream.delivered`` sums every delivery: what a counter that cannot tell a re-send from new data shows.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

from tally.core.numbered_ids import numbered_id
from tally_local.kit.lambda_events import sqs_event

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

Number = int | Decimal
Totals = dict[str, dict[str, Decimal]]

QUEUE_ARN: Final = "arn:aws:sqs:us-east-1:123456789012:tally-bench-EventsQueue"
HOT_KEY: Final = "usage:hot"
PACK: Final = 100
"""Events per packed message, unless told otherwise."""


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """The shape of the workloads; ``seed`` makes every stream reproducible."""

    events: int = 200_000
    keys: int = 1_000
    zipf_s: float = 1.1
    resend_rate: float = 0.05
    pack: int = 100
    resend_window: int = 1_000
    seed: int = 20_261_121


@dataclass(frozen=True, slots=True)
class Event:
    """One counter event: a key and its deltas (``units`` an integer, ``cost`` a decimal)."""

    key: str
    units: int
    cost: Decimal

    @property
    def deltas(self) -> dict[str, Number]:
        return {"units": self.units, "cost": self.cost}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One SQS record: a message (the producer's id and body) delivered once more or for the first time."""

    record_id: str
    """The SQS messageId: new for every delivery, re-sends included."""
    message_id: str
    """The producer's id, in the body: the same on every re-send."""
    body: str
    first_event: int
    event_count: int
    resend: bool


@dataclass(frozen=True)
class Stream:
    """A workload delivered one way (single-event or packed messages), in delivery order."""

    workload: str
    packed: bool
    events: Sequence[Event]
    deliveries: tuple[Delivery, ...]

    @property
    def name(self) -> str:
        return f"{self.workload}/{'packed' if self.packed else 'single'}"

    @cached_property
    def distinct_events(self) -> int:
        """Events in the distinct messages of this stream (the denominator of every per-event figure)."""
        return sum(delivery.event_count for delivery in self.first_deliveries())

    @cached_property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted({self.events[i].key for d in self.deliveries for i in _range(d)}))

    def prefix(self, events: int) -> Stream:
        """The messages whose events all lie in the first ``events`` events, with their re-sends."""
        kept = tuple(d for d in self.deliveries if d.first_event + d.event_count <= events)
        return Stream(self.workload, self.packed, self.events, kept)

    def without_resends(self) -> Stream:
        """The same messages, each delivered once: a stream without producer re-sends."""
        return Stream(self.workload, self.packed, self.events, tuple(self.first_deliveries()))

    def batches(self, size: int) -> list[tuple[Delivery, ...]]:
        """Lambda-style batches of ``size`` records, in delivery order."""
        return [self.deliveries[i : i + size] for i in range(0, len(self.deliveries), size)]

    def expected(self) -> Totals:
        """Each distinct message counted once."""
        return event_sums(self.events, self.first_deliveries())

    def first_deliveries(self) -> list[Delivery]:
        """The first delivery of each message id, in order."""
        seen: set[str] = set()
        first: list[Delivery] = []
        for delivery in self.deliveries:
            if delivery.message_id not in seen:
                seen.add(delivery.message_id)
                first.append(delivery)
        return first

    def delivered(self) -> Totals:
        """Every delivery counted, re-sends included."""
        return event_sums(self.events, self.deliveries)


def usage_events(spec: WorkloadSpec) -> list[Event]:
    """U: keys drawn Zipf(s) over ``spec.keys`` ranks, integer and decimal deltas."""
    rng = random.Random(f"{spec.seed}/keys")
    cumulative = list(accumulate(1.0 / rank**spec.zipf_s for rank in range(1, spec.keys + 1)))
    ranks = rng.choices(range(spec.keys), cum_weights=cumulative, k=spec.events)
    return [
        Event(f"usage:tenant-{rank:04d}", units, cost) for rank, (units, cost) in zip(ranks, _deltas(spec), strict=True)
    ]


def hot_events(spec: WorkloadSpec) -> list[Event]:
    """H: the same volume, with the same deltas, on one key."""
    return [Event(HOT_KEY, units, cost) for units, cost in _deltas(spec)]


def _deltas(spec: WorkloadSpec) -> list[tuple[int, Decimal]]:
    """The deltas of every event, drawn from their own seeded generator (U and H share them)."""
    rng = random.Random(f"{spec.seed}/deltas")
    return [(rng.randint(1, 20), Decimal(rng.randint(1, 99_999)).scaleb(-5)) for _ in range(spec.events)]


def deliver(
    workload: str, events: Sequence[Event], spec: WorkloadSpec, *, packed: bool, numbered: bool = False
) -> Stream:
    """The stream of SQS records for ``events``: messages, re-sends inserted a little later.

    ``numbered``: the messages carry the producer library's numbered ids (``NumberedIds``: one session,
    seqs in order), whose markers the consumer keeps 16 to a block item.
    """
    rng = random.Random(f"{spec.seed}/{workload}/{'packed' if packed else 'single'}")
    size = spec.pack if packed else 1
    messages: list[tuple[str, str, int, int]] = []
    session = uuid.UUID(int=random.Random(f"{spec.seed}/{workload}/session").getrandbits(128), version=4).hex
    for number, first in enumerate(range(0, len(events), size)):
        chunk = events[first : first + size]
        if numbered:
            message_id = numbered_id(session, number)
        else:
            message_id = f"{workload}-{spec.seed}-{'p' if packed else 's'}{number:07d}"
        body = _packed_body(message_id, chunk) if packed else _single_body(message_id, chunk[0])
        messages.append((message_id, body, first, len(chunk)))
    resent = rng.sample(range(len(messages)), round(len(messages) * spec.resend_rate))
    order: list[tuple[float, int, bool]] = [(float(index), index, False) for index in range(len(messages))]
    order += [(index + rng.randint(1, spec.resend_window) + 0.5, index, True) for index in resent]
    order.sort()
    deliveries = tuple(
        Delivery(
            record_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            message_id=messages[index][0],
            body=messages[index][1],
            first_event=messages[index][2],
            event_count=messages[index][3],
            resend=resend,
        )
        for _, index, resend in order
    )
    return Stream(workload, packed, events, deliveries)


def u_stream(
    events: int, *, packed: bool, keys: int = 1000, seed: int = 20_261_124, pack: int = PACK, numbered: bool = False
) -> Stream:
    """U with each message delivered once: what the cost experiments run (a producer re-send costs reads, not
    writes, and a re-send the gate lets through costs a cancelled transaction, which is the suite's subject)."""
    spec = WorkloadSpec(events=events, keys=keys, resend_rate=0.0, pack=pack, seed=seed)
    return deliver("U", usage_events(spec), spec, packed=packed, numbered=numbered).without_resends()


def lambda_event(batch: Iterable[Delivery], sent_ms: int) -> dict[str, Any]:
    """A Lambda SQS event for one batch, shaped like the files in ``events/`` (``tally_local.kit.lambda_events``)."""
    return sqs_event([_received(delivery, sent_ms) for delivery in batch], QUEUE_ARN, "us-east-1")


def _received(delivery: Delivery, sent_ms: int) -> dict[str, Any]:
    """The delivery as SQS's ``ReceiveMessage`` returns it, with its system attributes."""
    attributes = {"ApproximateReceiveCount": "1", "SentTimestamp": str(sent_ms), "SenderId": "AIDAIENQZJOLO23YVJ4VO"}
    return {
        "MessageId": delivery.record_id,
        "ReceiptHandle": "AQEB" + delivery.record_id.replace("-", ""),
        "Body": delivery.body,
        "Attributes": {**attributes, "ApproximateFirstReceiveTimestamp": str(sent_ms + 40)},
        "MD5OfBody": hashlib.md5(delivery.body.encode("utf-8"), usedforsecurity=False).hexdigest(),
    }


def _deltas_json(event: Event) -> str:
    # Decimals written as their exact literal, never through a float.
    return f'{{"units":{event.units},"cost":{event.cost:f}}}'


def _single_body(message_id: str, event: Event) -> str:
    return f'{{"id":{json.dumps(message_id)},"key":{json.dumps(event.key)},"deltas":{_deltas_json(event)}}}'


def _packed_body(message_id: str, events: Sequence[Event]) -> str:
    packed = ",".join(f'{{"key":{json.dumps(event.key)},"deltas":{_deltas_json(event)}}}' for event in events)
    return f'{{"id":{json.dumps(message_id)},"events":[{packed}]}}'


def _range(delivery: Delivery) -> range:
    return range(delivery.first_event, delivery.first_event + delivery.event_count)


def event_sums(events: Sequence[Event], deliveries: Iterable[Delivery]) -> Totals:
    """Each counter of each key summed over the events of ``deliveries`` (a re-sent message as often as delivered)."""
    totals: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for delivery in deliveries:
        for index in _range(delivery):
            event = events[index]
            counters = totals[event.key]
            counters["units"] += event.units
            counters["cost"] += event.cost
    return {key: dict(counters) for key, counters in totals.items()}


def batch_footprints(batches: Iterable[Sequence[Delivery]], events: Sequence[Event]) -> list[tuple[int, int, int]]:
    """Per batch as delivered: (new messages, distinct keys they touch, messages applied in an earlier batch).
    Those re-sends are not new and touch nothing."""
    applied: set[str] = set()
    footprints = []
    for batch in batches:
        new = {delivery.message_id: delivery for delivery in batch if delivery.message_id not in applied}
        keys = {events[index].key for delivery in new.values() for index in _range(delivery)}
        resent = {delivery.message_id for delivery in batch if delivery.message_id in applied}
        footprints.append((len(new), len(keys), len(resent)))
        applied.update(new)
    return footprints


def write_floor(
    batches: Iterable[Sequence[Delivery]], events: Sequence[Event], items_per_key: int = 1, item_units: int = 2
) -> int:
    """The design's floor in write units: 2 x new messages + ``item_units`` x distinct counter items, per batch.

    One marker per new message (a transactional write: 2 units) and one write per distinct counter item per batch
    (``items_per_key`` items per key: the all-time item and one per time window), each item under 1 KB:
    ``item_units`` is 2 where items are written in transactions, 1 where the fenced apply writes them plainly.
    Messages applied in an earlier batch (re-sends) write nothing.
    """
    return sum(
        2 * messages + item_units * items_per_key * keys for messages, keys, _ in batch_footprints(batches, events)
    )
