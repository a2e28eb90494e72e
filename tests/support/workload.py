"""Seeded synthetic workloads with their own reference sums, computed without tally's code."""

from __future__ import annotations

import json
import random
import zlib
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from tally.core.model import SourceRecord

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SENT_MS = 4_102_444_800_000


@dataclass(frozen=True)
class Workload:
    records: tuple[SourceRecord, ...]
    expected: dict[str, dict[str, Decimal]]
    """key -> counter -> exact sum over distinct message ids (first body of each id)."""


def generate(
    seed: int,
    messages: int,
    keys: int = 20,
    *,
    packed_every: int = 4,
    resend_rate: float = 0.1,
    prefix: str = "m",
    numbered: bool = False,
) -> Workload:
    """Single and packed messages with int and decimal deltas; some ids are re-sent as new records.

    ``numbered``: the ids are the producer library's numbered ids (``<session>.<seq>``, one session per
    seed and prefix, seqs in order of creation), whose markers share block items.
    """
    session = f"{zlib.crc32(prefix.encode()):08x}{seed:024x}"[-32:]
    rng = random.Random(seed)
    bodies: list[tuple[str, str]] = []
    expected: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for number in range(messages):
        message_id = f"{session}.{number}" if numbered else f"{prefix}-{seed}-{number}"
        events = []
        for _ in range(rng.randint(2, 6) if number % packed_every == 0 else 1):
            key = f"key-{rng.randrange(keys)}"
            deltas = {"count": Decimal(rng.randint(-3, 9))}
            if rng.random() < 0.5:
                deltas["amount"] = Decimal(rng.randint(-999, 99_999)).scaleb(-2)
            events.append((key, deltas))
            for name, delta in deltas.items():
                expected[key][name] += delta
        bodies.append((message_id, message_body(message_id, events)))
    resends = [bodies[rng.randrange(len(bodies))] for _ in range(int(messages * resend_rate))]
    everything = bodies + resends
    rng.shuffle(everything)
    records = tuple(
        SourceRecord(record_id=f"{prefix}-rec-{seed}-{index}", body=body, received_ms=SENT_MS)
        for index, (_, body) in enumerate(everything)
    )
    return Workload(records, {key: dict(counters) for key, counters in expected.items()})


def message_body(message_id: str, events: Sequence[tuple[str, Mapping[str, Decimal | int]]]) -> str:
    """A single-event message for one (key, deltas) event, a packed message for more; every delta written as
    its exact literal."""
    if len(events) == 1:
        key, deltas = events[0]
        return f'{{"id":{json.dumps(message_id)},"key":{json.dumps(key)},"deltas":{_deltas_json(deltas)}}}'
    packed = ",".join(f'{{"key":{json.dumps(k)},"deltas":{_deltas_json(ds)}}}' for k, ds in events)
    return f'{{"id":{json.dumps(message_id)},"events":[{packed}]}}'


def _deltas_json(deltas: Mapping[str, Decimal | int]) -> str:
    """JSON for the deltas with each Decimal written as its exact literal (never through a float)."""
    return "{" + ",".join(f"{json.dumps(name)}:{value}" for name, value in deltas.items()) + "}"
