"""The seeded load of a chaos run, and its reference sums, computed without tally's code.

Valid messages are single events (the ``delta`` shorthand or named ``deltas``) and packed messages, on
several counters, with integer and two-decimal deltas written as exact literals. Every event adds 1 to
``count`` (so ``count`` only grows: the Jepsen-style monitor checks it) and may add signed ``units`` and
``amount``. Some events carry a ``ts`` (epoch ms or ISO 8601 with ``Z``). Poison bodies come from a table
of kinds, each with the reason code README.md documents for it; every poison body is unique, so a dead
letter can be traced back to the poison message it came from.

The messages injected as unrecoverable ("doomed") are valid but can never be counted: a setup message,
applied before the run, brings a counter near DynamoDB's largest Number, and the doomed message would push
it past it, so DynamoDB refuses the ADD and the pipeline dead-letters it with ``counter_out_of_range``.
The precision-doomed ones (issue 14, defect 3) are packed: 40 events on ordinary keys, then one adding
``1E-20`` to a counter a setup message set to ``1E+20`` (41 digits). With the windows, the message alone
holds more than 98 counter items, so that counter falls in a later journal apply chunk.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.chaos.config import ChaosConfig

TRACER: Final = "count"
"""The counter every event adds 1 to: lost and doubled events are read off it."""
PRECISION_BASE: Final = Decimal("1E+20")
PRECISION_DELTA: Final = Decimal("1E-20")
"""``PRECISION_BASE + PRECISION_DELTA`` needs 41 significant digits: DynamoDB refuses the ADD."""
PRECISION_KEYS: Final = 40
"""Distinct keys before the precision counter in a precision-doomed message (x3 items with two windows):
ordinary ``k:`` keys, shared with valid messages, padded with keys of its own when there are fewer."""
EDGE_DELTA: Final = Decimal("9E+125")
"""Twice this is past DynamoDB's largest Number (9.99...E+125): the second ADD is refused."""
DOOMED_CODE: Final = "counter_out_of_range"
DAY_MS: Final = 86_400_000


class Source(StrEnum):
    SQS = "sqs"
    KINESIS = "kinesis"


Sums = dict[str, dict[str, Decimal]]
"""key -> counter -> exact sum."""


@dataclass(frozen=True, slots=True)
class ValidMessage:
    message_id: str
    body: str
    partition_key: str
    events: int
    sums: Sums
    doomed: bool = False
    """Injected as unrecoverable: it pushes a counter out of DynamoDB's Number range, so it is refused."""


@dataclass(frozen=True, slots=True)
class PoisonMessage:
    body: str
    code: str
    """The ``tally.error_code`` README.md documents for this kind of body."""


@dataclass(frozen=True, slots=True)
class Publication:
    """One message as a producer sends it (a re-send is a new publication of the same body)."""

    source: Source
    body: str
    partition_key: str
    resend: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    valid: dict[str, ValidMessage]
    """By message id."""
    by_body: dict[str, ValidMessage]
    poison: dict[str, PoisonMessage]
    """By body."""
    setup: tuple[ValidMessage, ...]
    """Applied before the run, without faults (the counters the doomed messages overflow)."""
    publications: tuple[Publication, ...]
    expected: Sums
    """Sum over distinct valid messages, doomed ones excepted (they are never counted)."""

    @property
    def precision_doomed(self) -> tuple[ValidMessage, ...]:
        """The doomed messages whose sum needs more than 38 digits in a later journal chunk."""
        return tuple(m for m in self.valid.values() if m.doomed and "-prec-doomed-" in m.message_id)

    @property
    def events(self) -> int:
        return sum(message.events for message in self.valid.values() if not message.doomed)


def _poison_kinds(base_ms: int) -> list[tuple[str, Callable[[str], str]]]:
    """(expected code, body maker from a unique tag): one entry per documented reason."""
    return [
        ("malformed_json", lambda tag: f'{{"id":"{tag}","key":"k",'),
        ("malformed_json", lambda tag: f'{{"id":"{tag}","key":"k","delta":NaN}}'),
        ("malformed_json", lambda tag: f'{{"id":"{tag}","key":"k","delta":' + "[" * 3000 + "]" * 3000 + "}"),
        ("lone_surrogate", lambda tag: f'{{"id":"{tag}","key":"k\\ud800","delta":1}}'),
        ("invalid_field", lambda tag: f'{{"id":"{tag}","key":"k","delta":1,"detla":1}}'),
        ("invalid_number", lambda tag: f'{{"id":"{tag}","key":"k","delta":"1"}}'),
        ("invalid_number", lambda tag: f'{{"id":"{tag}","key":"k","delta":true}}'),
        ("missing_id", lambda tag: f'{{"key":"{tag}","delta":1}}'),
        ("missing_key", lambda tag: f'{{"id":"{tag}","delta":1}}'),
        ("key_too_long", lambda tag: f'{{"id":"{tag}","key":"{"x" * 2001}","delta":1}}'),
        ("invalid_key", lambda tag: f'{{"id":"{tag}","key":"k\\u001f1","delta":1}}'),
        ("number_out_of_range", lambda tag: f'{{"id":"{tag}","key":"k","delta":{"9" * 39}}}'),
        ("invalid_ts", lambda tag: f'{{"id":"{tag}","key":"k","delta":1,"ts":"2026-01-01T00:00:00"}}'),
        ("empty_message", lambda tag: f'{{"id":"{tag}","events":[]}}'),
        ("too_old", lambda tag: f'{{"id":"{tag}","key":"k","delta":1,"ts":{base_ms - 40 * DAY_MS}}}'),
        ("ts_in_future", lambda tag: f'{{"id":"{tag}","key":"k","delta":1,"ts":{base_ms + 10 * DAY_MS}}}'),
    ]


def _event_json(key: str, deltas: dict[str, Decimal], ts: int | str | None) -> str:
    parts = [f'"key":{json.dumps(key)}', '"deltas":{' + ",".join(f'"{n}":{v}' for n, v in deltas.items()) + "}"]
    if ts is not None:
        parts.append(f'"ts":{json.dumps(ts)}')
    return ",".join(parts)


def _nonzero(rng: random.Random, low: int, high: int) -> int:
    value = 0
    while value == 0:
        value = rng.randint(low, high)
    return value


def generate(config: ChaosConfig, base_ms: int) -> Workload:
    """The load: ``base_ms`` (epoch ms) is the run's start on its virtual clock; ``ts`` values lie before it."""
    rng = random.Random(f"{config.seed}:workload")
    valid = _valid_messages(config, base_ms, rng)
    setup, doomed = _edge_messages(config)
    precision_setup, precision_doomed = _precision_messages(config)
    setup += precision_setup
    doomed += precision_doomed
    poison = _poison_messages(config, base_ms, len(valid))

    def source() -> Source:
        return Source.SQS if rng.random() < config.sqs_share else Source.KINESIS

    publications = [Publication(source(), m.body, m.partition_key) for m in [*valid.values(), *doomed]]
    publications += [Publication(source(), body, f"poison-{index}") for index, body in enumerate(poison)]
    rng.shuffle(publications)
    for message in rng.sample(list(valid.values()), int(len(valid) * config.resend_share)):
        # A re-send goes out after the original (anywhere later), possibly to the other source.
        original = next(i for i, p in enumerate(publications) if p.body == message.body)
        position = rng.randint(original + 1, len(publications))
        publications.insert(position, Publication(source(), message.body, message.partition_key, resend=True))

    everything = {m.message_id: m for m in [*valid.values(), *setup, *doomed]}
    expected: Sums = defaultdict(lambda: defaultdict(Decimal))
    for message in everything.values():
        if message.doomed:
            continue
        for key, counters in message.sums.items():
            for name, value in counters.items():
                expected[key][name] += value
    return Workload(
        valid=everything,
        by_body={message.body: message for message in everything.values()},
        poison=poison,
        setup=tuple(setup),
        publications=tuple(publications),
        expected={key: dict(counters) for key, counters in expected.items()},
    )


def _valid_messages(config: ChaosConfig, base_ms: int, rng: random.Random) -> dict[str, ValidMessage]:
    keys = ["hot:0", *(f"k:{index}" for index in range(config.keys - 1))]

    def pick_key() -> str:
        return keys[0] if rng.random() < 0.08 else keys[rng.randrange(1, len(keys))]

    def pick_ts() -> int | str | None:
        roll = rng.random()
        if roll < 0.15:
            return base_ms - rng.randrange(20 * 60_000)
        if roll < 0.25:
            moment = datetime.fromtimestamp((base_ms - rng.randrange(20 * 60_000)) // 1000, UTC)
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        return None

    def pick_deltas() -> dict[str, Decimal]:
        deltas = {TRACER: Decimal(1)}
        if rng.random() < 0.7:
            deltas["units"] = Decimal(_nonzero(rng, -5, 20))
        if rng.random() < 0.5:
            deltas["amount"] = Decimal(_nonzero(rng, -5_000, 99_999)).scaleb(-2)
        return deltas

    valid: dict[str, ValidMessage] = {}
    events = 0
    while events < config.events:
        message_id = f"c{config.seed}-{len(valid)}"
        packed = rng.random() < config.packed_share
        parts = [
            (pick_key(), pick_deltas(), pick_ts())
            for _ in range(rng.randint(2, config.max_packed_events) if packed else 1)
        ]
        key, deltas, ts = parts[0]
        if packed:
            body = f'{{"id":"{message_id}","events":[' + ",".join("{" + _event_json(*p) + "}" for p in parts) + "]}"
        elif len(deltas) == 1 and ts is None and rng.random() < 0.5:
            body = f'{{"id":"{message_id}","key":{json.dumps(key)},"delta":1}}'  # the shorthand: count += 1
        else:
            body = f'{{"id":"{message_id}",' + _event_json(key, deltas, ts) + "}"
        sums: Sums = defaultdict(lambda: defaultdict(Decimal))
        for event_key, event_deltas, _ in parts:
            for name, delta in event_deltas.items():
                sums[event_key][name] += delta
        valid[message_id] = ValidMessage(
            message_id, body, message_id if packed else key, len(parts), {k: dict(v) for k, v in sums.items()}
        )
        events += len(parts)
    return valid


def _edge_messages(config: ChaosConfig) -> tuple[list[ValidMessage], list[ValidMessage]]:
    """Per doomed message, a setup message that brings a counter near DynamoDB's largest Number, and the
    doomed message that would push it past (applied before the run, and published, respectively)."""
    setup: list[ValidMessage] = []
    doomed: list[ValidMessage] = []
    for index in range(config.doomed):
        key = f"edge:{index}"
        for role, out in (("setup", setup), ("doomed", doomed)):
            message_id = f"c{config.seed}-{role}-{index}"
            deltas = {TRACER: Decimal(1), "big": EDGE_DELTA}
            body = f'{{"id":"{message_id}",' + _event_json(key, deltas, None) + "}"
            out.append(ValidMessage(message_id, body, key, 1, {key: deltas}, doomed=role == "doomed"))
    return setup, doomed


def _precision_messages(config: ChaosConfig) -> tuple[list[ValidMessage], list[ValidMessage]]:
    """Per precision-doomed message, a setup message storing ``1E+20`` in ``fine`` of its own key, and the
    packed doomed message: ``PRECISION_KEYS`` ordinary events, then ``1E-20`` on that counter."""
    setup: list[ValidMessage] = []
    doomed: list[ValidMessage] = []
    for index in range(config.precision_doomed):
        key = f"prec:{index}"
        message_id = f"c{config.seed}-prec-setup-{index}"
        deltas = {TRACER: Decimal(1), "fine": PRECISION_BASE}
        body = f'{{"id":"{message_id}",' + _event_json(key, deltas, None) + "}"
        setup.append(ValidMessage(message_id, body, key, 1, {key: deltas}))
        message_id = f"c{config.seed}-prec-doomed-{index}"
        ordinary = [f"k:{1 + (index * 7 + n) % (config.keys - 1)}" for n in range(min(PRECISION_KEYS, config.keys - 1))]
        padding = [f"{key}:pad-{n}" for n in range(PRECISION_KEYS - len(ordinary))]  # few keys: its own ones
        parts = [(event_key, {TRACER: Decimal(1)}) for event_key in ordinary + padding]
        parts.append((key, {TRACER: Decimal(1), "fine": PRECISION_DELTA}))
        sums: Sums = defaultdict(lambda: defaultdict(Decimal))
        for event_key, event_deltas in parts:
            for name, delta in event_deltas.items():
                sums[event_key][name] += delta
        body = (
            f'{{"id":"{message_id}","events":[' + ",".join("{" + _event_json(k, d, None) + "}" for k, d in parts) + "]}"
        )
        sums_plain = {k: dict(v) for k, v in sums.items()}
        doomed.append(ValidMessage(message_id, body, message_id, len(parts), sums_plain, doomed=True))
    return setup, doomed


def _poison_messages(config: ChaosConfig, base_ms: int, valid_messages: int) -> dict[str, PoisonMessage]:
    kinds = _poison_kinds(base_ms)
    poison: dict[str, PoisonMessage] = {}
    for index in range(int(valid_messages * config.poison_share)):
        code, make = kinds[index % len(kinds)]
        body = make(f"p{config.seed}-{index}")
        poison[body] = PoisonMessage(body, code)
    return poison
