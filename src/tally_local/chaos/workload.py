"""The seeded load of a chaos run, and its reference sums, computed without tally's code.

Valid messages are single events (the ``delta`` shorthand or named ``deltas``) and packed messages, on
several counters, with integer and two-decimal deltas written as exact literals. Every event adds 1 to
``count`` (so ``count`` only grows: the Jepsen-style monitor checks it) and may add signed ``units`` and
``amount``. Some events carry a ``ts`` (epoch ms or ISO 8601 with ``Z``). Poison bodies come from a table
of kinds, each with the reason code docs/reference/event-format.md documents for it; every poison body is
unique, so a dead
letter can be traced back to the poison message it came from.

Two shapes aim at the journal's edges. Wide messages put 100 counter names (the per-event maximum) on one of a few
keys, so that an item gets hundreds of names, more than one DynamoDB ADD's 4 KB expression can carry;
every third one is packed (400 names on one key in one message). Long-decimal messages add a 37-digit
decimal to the hot key, whose shards must then be summed on read to more than 28 digits. The reference
sums are taken in a 100-digit context: Python's default one would round them.

The messages injected as unrecoverable ("doomed") are valid but can never be counted: a setup message,
applied before the run, brings a counter near DynamoDB's largest Number, and the doomed message would push
it past it, so DynamoDB refuses the ADD and the pipeline dead-letters it with ``counter_out_of_range``.

Ids reused with other content (``ChaosConfig.reuse_share``): a second producer (or a buggy one) sends
other events under an id another message already uses: the same keys and ``count`` (so the Jepsen bounds
hold whichever counts), other ``units`` and sometimes another ``ts``. Exactly one of the two contents may
count; the other must end in the dead-letter queue as ``id_conflict``. Which one is a race (the stream
or queue decides what arrives first), so ``expected`` holds the first content's sums and the check swaps
in the other's when the first is the one dead-lettered. Some re-sends spell the same content differently
(``respell_share``: the ``delta`` shorthand written out, ``1.0`` for ``1``, trailing zeros, spaces): those
are duplicates, and must never be taken for a conflict.

Numbered ids (``ChaosConfig.numbered_share``): half the ordinary messages come from
producers that number their ids as the producer library does (``<session>.<seq>``, three sessions), so
their markers share block items, which concurrent consumers of both sources write at once under every
fault the run draws; re-sends, respellings and reused ids apply to them as to the others.

The precision-doomed ones are packed: 40 events on ordinary keys, then one adding
``1E-20`` to a counter a setup message set to ``1E+20`` (41 digits). With the windows, the message alone
holds more than 98 counter items, so that counter falls in a later journal apply chunk.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Context, Decimal, localcontext
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from tally.core.windows import parse_window_spec
from tally.producer.packing import NumberedIds
from tally_local.chaos.patterns import (
    BIG_SEAT_STEP,
    LEVEL,
    GaugeReading,
    GaugeTable,
    GaugeValue,
    default_deltas,
    expected_distinct,
    expected_gauges,
    fold_levels,
    refused_keys,
    with_starts,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from tally.core.windows import WindowSpec
    from tally_local.chaos.config import ChaosConfig

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
ID_CONFLICT_CODE: Final = "id_conflict"
DAY_MS: Final = 86_400_000
WIDE_NAMES_PER_EVENT: Final = 99
"""Besides ``count``: 100 counters, the decoder's per-event maximum."""
LONG_DECIMAL: Final = Decimal("1234567890123456789012345678.901234567")
"""37 significant digits: a sum of two already needs more than Python's default 28."""
REFERENCE: Final = Context(prec=100)
"""The reference sums' context: wide enough that no sum here is ever rounded."""


class Source(StrEnum):
    SQS = "sqs"
    KINESIS = "kinesis"


Sums = dict[str, dict[str, Decimal]]
"""key -> counter -> exact sum."""
DimensionedEvent = tuple[str, dict[str, str], dict[str, Decimal], int]
"""One event with dimensions: key, dims, deltas, ts."""
ViewSlot = tuple[str, str, tuple[str, ...], str]
"""(key, view, its values in the view's order, window id or ``all``): one view item's value."""
VIEWS: Final = (("customer",), ("route",), ("customer", "route"))
"""The views the run declares for ``v:`` keys (``ChaosConfig.counter_views``), their dimensions in order."""
VIEW_CUSTOMERS: Final = ("acme", "globex", "initech", "a,b", "x=y]", "ü")
"""Values with the characters a view's text spelling uses (``,``, ``=``, ``]``): a value is never told apart by
text, only by its place in the view item's key."""
VIEW_ROUTES: Final = ("/v1/users", "/v1/orders", "/", "/v2/a b")
Part = tuple[str, dict[str, Decimal], int | str | None]
"""One event: key, deltas, ts."""


@dataclass(frozen=True, slots=True)
class ValidMessage:
    message_id: str
    body: str
    partition_key: str
    events: int
    sums: Sums
    doomed: bool = False
    """Injected as unrecoverable: it pushes a counter out of DynamoDB's Number range, so it is refused."""
    parts: tuple[Part, ...] = ()
    """Its events (key, deltas, ts), for the other content of a reused id."""
    reused: bool = False
    """The second content under an id (``Workload.alternates``)."""
    gauges: tuple[GaugeReading, ...] = ()
    """Its gauge readings: judged against ``Workload.expected_gauges``."""
    members: tuple[tuple[str, str, str], ...] = ()
    """Its distinct-count members (key, set, member): judged against ``Workload.expected_distinct``."""
    bounded: bool = False
    """It steps a bounded counter: a bound may refuse it whole; its sums are not in ``Workload.expected``."""
    level_step: tuple[str, str, Decimal] | None = None
    """A reset or a delta of an ``r:`` key's ``level`` (key, ``reset``/``add``, amount): published on Kinesis
    only, judged by ``fold_levels`` in the shard's order, never summed into ``Workload.expected``."""
    dimensioned: tuple[DimensionedEvent, ...] = ()
    """Its events with dimensions (``v:`` keys): judged against ``Workload.expected_views``."""


@dataclass(frozen=True, slots=True)
class PoisonMessage:
    body: str
    code: str
    """The ``tally.error_code`` docs/reference/event-format.md documents for this kind of body."""


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
    """Sum over distinct valid messages, doomed ones excepted (they are never counted), counting the first
    content of each reused id."""
    alternates: dict[str, ValidMessage] = field(default_factory=dict)
    """By message id: the other content a producer sent under an id of ``valid`` (``by_body`` has both)."""
    expected_gauges: dict[str, GaugeTable] = field(default_factory=dict)
    """key -> gauge kind -> name -> the value the distinct gauge messages leave (``tally_local.chaos.patterns``)."""
    expected_distinct: dict[str, dict[str, int]] = field(default_factory=dict)
    """key -> set -> distinct members of the counted messages (all-time)."""
    expected_levels: dict[str, Decimal] = field(default_factory=dict)
    """``r:`` key -> its ``level`` after its resets and deltas in the order of the shard that holds them."""
    expected_windows: dict[tuple[str, str], dict[str, Decimal]] = field(default_factory=dict)
    """(``win:`` key, hour or day window id) -> counter -> the sum of the window messages' events in it."""
    expected_views: dict[ViewSlot, dict[str, Decimal]] = field(default_factory=dict)
    """Every view item's value, all-time and per window: the sum over the distinct messages' events of its key
    with its values, computed here by hand (never with ``tally.core.views``)."""
    refused_keys: frozenset[str] = frozenset()
    """Keys whose gauge and member writes DynamoDB refuses for good (``tally_local.chaos.patterns.refused_keys``)."""
    sessions: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Body -> (session: its partition key, whether it is the session's big message) of the bounded sessions'
    messages (``ChaosConfig.bounded_sessions``): the big one and the sales share a block marker item."""

    @property
    def bounded(self) -> tuple[ValidMessage, ...]:
        """The messages on bounded counters: counted or refused as the order of commits decides."""
        return tuple(message for message in self.valid.values() if message.bounded)

    @property
    def digit_steps(self) -> tuple[ValidMessage, ...]:
        """The bounded messages stepping a seat by a 36-digit amount (``ChaosConfig.digit_bound_steps``)."""
        return tuple(m for m in self.valid.values() if f"-{DIGIT_STEP}" in m.message_id)

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
    valid |= _wide_messages(config, rng) | _split_unit_messages(config, rng) | _long_decimal_messages(config)
    first_on_kinesis = _claim_unit_messages(config) | _kinesis_big_messages(config)
    valid |= first_on_kinesis
    patterns = _pattern_messages(config, base_ms)
    valid |= patterns
    windowed, expected_windows = _window_messages(config, base_ms)
    valid |= windowed
    valid |= (dimensioned := _view_messages(config, base_ms))
    setup, doomed = _edge_messages(config)
    precision_setup, precision_doomed = _precision_messages(config)
    setup += precision_setup
    doomed += precision_doomed
    poison = _poison_messages(config, base_ms, len(valid))

    def source() -> Source:
        return Source.SQS if rng.random() < config.sqs_share else Source.KINESIS

    def source_of(message: ValidMessage) -> Source:  # one shard keeps their order
        return Source.KINESIS if message.level_step is not None or message.message_id in first_on_kinesis else source()

    publications = [Publication(source_of(m), m.body, m.partition_key) for m in [*valid.values(), *doomed]]
    publications += [Publication(source(), body, f"poison-{index}") for index, body in enumerate(poison)]
    rng.shuffle(publications)
    _keep_pairs_together(publications, valid)
    publications = _claim_units_first(publications, first_on_kinesis)
    respelled: dict[str, ValidMessage] = {}
    reuse_rng = random.Random(f"{config.seed}:reuse")  # its own stream: the rest of the load stays as it was
    for message in rng.sample(list(valid.values()), int(len(valid) * config.resend_share)):
        # A re-send goes out after the original (anywhere later), possibly to the other source.
        original = next(i for i, p in enumerate(publications) if p.body == message.body)
        position = rng.randint(original + 1, len(publications))
        body = message.body
        if reuse_rng.random() < config.respell_share and message.parts:  # wide messages are not respelled
            body = _respell(body)
            respelled[body] = message
        publications.insert(position, Publication(source_of(message), body, message.partition_key, resend=True))
    alternates = _reuse_ids(config, _reusable(valid, patterns, windowed, first_on_kinesis, dimensioned), reuse_rng)
    for alternate in alternates.values():
        # Half right next to the first content (same source and partition key: often the same batch), half
        # anywhere (before or after it: which content arrives first is left to the race).
        original = next(i for i, p in enumerate(publications) if p.body == valid[alternate.message_id].body)
        if reuse_rng.random() < 0.5:
            position = original + reuse_rng.randint(0, 1)
            where = publications[original].source
        else:
            position, where = reuse_rng.randint(0, len(publications)), source()
        publications.insert(position, Publication(where, alternate.body, alternate.partition_key))

    # Drawn last, from a stream of their own, so that without them the load is what it was.
    sessions = _bounded_session_messages(config, base_ms)
    _publish_sessions(publications, sessions, random.Random(f"{config.seed}:sessions"), config.sqs_share)
    valid |= sessions
    valid |= _publish_anywhere(publications, _fenced_messages(config), config, "fenced")
    everything = {m.message_id: m for m in [*valid.values(), *setup, *doomed]}
    expected: Sums = defaultdict(lambda: defaultdict(Decimal))
    with localcontext(REFERENCE):
        for message in everything.values():
            if message.doomed or message.bounded:
                continue
            for key, counters in message.sums.items():
                for name, value in counters.items():
                    expected[key][name] += value
    return Workload(
        valid=everything,
        by_body={message.body: message for message in [*everything.values(), *alternates.values()]} | respelled,
        poison=poison,
        setup=tuple(setup),
        publications=tuple(publications),
        expected=with_starts(expected),
        alternates=alternates,
        expected_gauges=expected_gauges(
            reading for message in everything.values() if not message.doomed for reading in message.gauges
        ),
        expected_distinct=expected_distinct(
            member for message in everything.values() if not message.doomed for member in message.members
        ),
        expected_levels=_levels(publications, everything),
        expected_windows=expected_windows,
        expected_views=_expected_views(everything.values(), parse_window_spec(config.windows, config.window_retention)),
        refused_keys=refused_keys(config.seed, config.pattern_keys, config.refused_keys),
        sessions={message.body: (message.partition_key, not message.bounded) for message in sessions.values()},
    )


def _reusable(valid: Mapping[str, ValidMessage], *kept: Mapping[str, ValidMessage]) -> dict[str, ValidMessage]:
    """The valid messages whose id a producer may reuse: not those judged on a reference of their own."""
    return {mid: message for mid, message in valid.items() if not any(mid in group for group in kept)}


def _levels(publications: Sequence[Publication], messages: dict[str, ValidMessage]) -> dict[str, Decimal]:
    """Each ``r:`` key's ``level``, folding its messages in the order their first copies are published (on
    Kinesis, under the key as partition key: the order its shard holds and delivers them in)."""
    by_body = {message.body: message for message in messages.values() if message.level_step is not None}
    seen: set[str] = set()
    steps = []
    for publication in publications:
        message = by_body.get(publication.body)
        if message is not None and message.message_id not in seen and message.level_step is not None:
            seen.add(message.message_id)
            steps.append(message.level_step)
    return fold_levels(steps)


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
    ids = _NumberedProducers(config)
    while events < config.events:
        message_id = ids.next_id() or f"c{config.seed}-{len(valid)}"
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
        valid[message_id] = ValidMessage(
            message_id, body, message_id if packed else key, len(parts), _sums(parts), parts=tuple(parts)
        )
        events += len(parts)
    return valid


class _NumberedProducers:
    """Which ordinary messages carry numbered ids, and which: drawn from a stream of their own, so the rest of
    the load stays as it was. Each numbered producer counts its seqs from 0, in the order messages are made,
    so consecutive seqs of a session share block markers across batches, sources and consumers."""

    def __init__(self, config: ChaosConfig) -> None:
        self._rng = random.Random(f"{config.seed}:numbered")
        self._share = config.numbered_share
        sessions = [f"{self._rng.getrandbits(128):032x}" for _ in range(max(1, config.numbered_sessions))]
        self._producers = [NumberedIds(session) for session in sessions]

    def next_id(self) -> str | None:
        if self._rng.random() >= self._share:
            return None
        return self._rng.choice(self._producers)()


def _wide_messages(config: ChaosConfig, rng: random.Random) -> dict[str, ValidMessage]:
    """Messages of 100 counters on a few wide keys, each message naming 99 counters of its own."""
    messages: dict[str, ValidMessage] = {}
    for index in range(config.wide_messages if config.wide_keys else 0):
        key = f"wide:{index % config.wide_keys}"
        message_id = f"c{config.seed}-wide-{index}"
        events = 4 if index % 3 == 2 else 1
        parts = []
        for event in range(events):
            first = (index * 4 + event) * WIDE_NAMES_PER_EVENT
            deltas = {TRACER: Decimal(1)} | {f"w{first + n}": Decimal(rng.randint(1, 9)) for n in range(99)}
            parts.append(deltas)
        if events == 1:
            body = f'{{"id":"{message_id}",' + _event_json(key, parts[0], None) + "}"
        else:
            body = (
                f'{{"id":"{message_id}","events":['
                + ",".join("{" + _event_json(key, p, None) + "}" for p in parts)
                + "]}"
            )
        sums: dict[str, Decimal] = defaultdict(Decimal)
        for deltas in parts:
            for name, delta in deltas.items():
                sums[name] += delta
        messages[message_id] = ValidMessage(
            message_id, body, key if events == 1 else message_id, events, {key: dict(sums)}
        )
    return messages


SPLIT_UNIT_KEYS: Final = (18, 33, 50, 55)
"""Keys of its own in each message of a split pair, beside the pair's hub, by pair: a pair is a unit just over
one transaction whether hour and day windows are items of their own (3 items a key: 18, 33) or ride on the
key's item (1: 50, 55)."""


def _split_unit_messages(config: ChaosConfig, rng: random.Random) -> dict[str, ValidMessage]:
    """``split_pairs`` pairs of packed messages over keys of their own plus the pair's hub (same partition key,
    so a Kinesis shard keeps them together): too large for one transaction, cheaper split than journaled."""
    messages: dict[str, ValidMessage] = {}
    for pair in range(config.split_pairs):
        hub = f"u:{pair}:hub"
        for side in "ab":
            message_id = f"c{config.seed}-split-{pair}{side}"
            own = SPLIT_UNIT_KEYS[pair % len(SPLIT_UNIT_KEYS)]
            keys = [hub, *(f"u:{pair}:{side}{index}" for index in range(own))]
            parts = {key: {TRACER: Decimal(1), "n": Decimal(rng.randint(1, 9))} for key in keys}
            body = (
                f'{{"id":"{message_id}","events":['
                + ",".join("{" + _event_json(key, deltas, None) + "}" for key, deltas in parts.items())
                + "]}"
            )
            messages[message_id] = ValidMessage(message_id, body, hub, len(keys), parts)
    return messages


DIGIT_STEP: Final = "bounded-digits-"
"""The ids of the 36-digit seat steps (``c<seed>-bounded-digits-<index>``)."""
DIGIT_FILL: Final = "bounded-digit-fill-"
"""The ids of the small steps each 36-digit seat step follows (``c<seed>-bounded-digit-fill-<index>``)."""


def _keep_pairs_together(publications: list[Publication], valid: Mapping[str, ValidMessage]) -> None:
    """The messages published as pairs: split pairs, and each 36-digit seat step behind its seat's small step."""
    _keep_split_pairs_together(publications, valid)
    _keep_digit_fills_before_their_steps(publications, valid)


def _keep_digit_fills_before_their_steps(publications: list[Publication], valid: Mapping[str, ValidMessage]) -> None:
    """Publish each 36-digit seat step right after its seat's small step, on the same source (one batch, often)."""
    for message_id, message in valid.items():
        prefix, found, index = message_id.partition(DIGIT_FILL)
        if found:
            _publish_beside(publications, message.body, valid[f"{prefix}{DIGIT_STEP}{index}"].body, after=False)


def _keep_split_pairs_together(publications: list[Publication], valid: Mapping[str, ValidMessage]) -> None:
    """Publish each split pair's second message right after its first, on the same source (one batch, often)."""
    for message_id, message in valid.items():
        if "-split-" in message_id and message_id.endswith("b"):
            _publish_beside(publications, message.body, valid[message_id[:-1] + "a"].body, after=True)


def _publish_beside(publications: list[Publication], body: str, anchor: str, *, after: bool) -> None:
    """Move ``body``'s publication right after (or before) ``anchor``'s, onto the anchor's source."""
    publication = publications.pop(next(i for i, p in enumerate(publications) if p.body == body))
    place = next(i for i, p in enumerate(publications) if p.body == anchor)
    publications.insert(place + after, replace(publication, source=publications[place].source))


def _window_messages(
    config: ChaosConfig, base_ms: int
) -> tuple[dict[str, ValidMessage], dict[tuple[str, str], dict[str, Decimal]]]:
    """Messages on ``win:`` keys with ``ts`` in the previous UTC day (its hours and the day have ended, so
    the batches that write these keys move them off the key items), and what each window holds. With month
    windows, every other one lies in the last day of the previous month instead, so that ended months are
    moved too. Their own random stream: the rest of the load is drawn as before."""
    rng = random.Random(f"{config.seed}:windows")
    spec = parse_window_spec(config.windows, config.window_retention)
    yesterday = base_ms - base_ms % DAY_MS - DAY_MS
    months = [unit for unit in spec.units if unit.name == "month"]
    last_month_day = months[0].start_ms(base_ms) - DAY_MS if months else yesterday
    messages: dict[str, ValidMessage] = {}
    expected: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for index in range(config.window_messages if config.window_keys else 0):
        key = f"win:{index % config.window_keys}"
        message_id = f"c{config.seed}-win-{index}"
        ts = (yesterday if index % 2 == 0 else last_month_day) + rng.randrange(DAY_MS)
        deltas = {TRACER: Decimal(1), "units": Decimal(rng.randint(1, 9))}
        body = f'{{"id":"{message_id}",' + _event_json(key, deltas, ts) + "}"
        messages[message_id] = ValidMessage(message_id, body, key, 1, {key: dict(deltas)}, parts=((key, deltas, ts),))
        for unit in spec.units:
            if unit.on_key_item:
                window = expected[key, unit.window_id(unit.start_ms(ts))]
                for name, delta in deltas.items():
                    window[name] += delta
    return messages, {window: dict(counters) for window, counters in expected.items()}


def _view_messages(config: ChaosConfig, base_ms: int) -> dict[str, ValidMessage]:
    """Messages on ``v:`` keys whose events carry dimensions (customer and route), a third packed, every event
    with a ``ts``: half of them in the previous UTC day (their ended windows are moved off the view items during
    the run), half in the last 20 minutes. Their own random stream: the rest of the load is drawn as before."""
    rng = random.Random(f"{config.seed}:views")
    yesterday = base_ms - base_ms % DAY_MS - DAY_MS
    messages: dict[str, ValidMessage] = {}
    for index in range(config.view_messages):
        message_id = f"c{config.seed}-view-{index}"
        events: list[DimensionedEvent] = []
        for _ in range(rng.randint(2, 6) if rng.random() < 1 / 3 else 1):
            key = f"v:{rng.randrange(max(1, config.pattern_keys))}"
            dims = {"customer": rng.choice(VIEW_CUSTOMERS), "route": rng.choice(VIEW_ROUTES)}
            deltas = {TRACER: Decimal(1), "units": Decimal(_nonzero(rng, -5, 20))}
            ts = yesterday + rng.randrange(DAY_MS) if rng.random() < 0.5 else base_ms - rng.randrange(20 * 60_000)
            events.append((key, dims, deltas, ts))
        bodies = [_event_json(key, deltas, ts) + ',"dims":' + json.dumps(dims) for key, dims, deltas, ts in events]
        if len(events) == 1:
            body = f'{{"id":"{message_id}",{bodies[0]}}}'
        else:
            body = f'{{"id":"{message_id}","events":[' + ",".join("{" + b + "}" for b in bodies) + "]}"
        parts = tuple((key, deltas, ts) for key, _, deltas, ts in events)
        partition_key = events[0][0] if len(events) == 1 else message_id
        messages[message_id] = ValidMessage(
            message_id, body, partition_key, len(events), _sums(parts), parts=parts, dimensioned=tuple(events)
        )
    return messages


def _expected_views(messages: Iterable[ValidMessage], spec: WindowSpec) -> dict[ViewSlot, dict[str, Decimal]]:
    """Each view item's value (``Workload.expected_views``), all-time and in each hour, day or month window of
    its events' ``ts`` (window ids written here with ``datetime``, not with ``tally.core.windows``)."""
    formats = {"hour": "h#%Y-%m-%dT%H:00Z", "day": "d#%Y-%m-%d", "month": "mo#%Y-%m"}
    units = [formats[unit.name] for unit in spec.units if unit.name in formats]
    expected: dict[ViewSlot, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    with localcontext(REFERENCE):
        for message in messages:
            if message.doomed:
                continue
            for key, dims, deltas, ts in message.dimensioned:
                moment = datetime.fromtimestamp(ts // 1000, UTC)
                for view in VIEWS:
                    values = tuple(dims[dim] for dim in view)
                    for window in ("all", *(moment.strftime(unit) for unit in units)):
                        into = expected[key, "+".join(view), values, window]
                        for name, delta in deltas.items():
                            into[name] += delta
    return {slot: dict(counters) for slot, counters in expected.items()}


def _long_decimal_messages(config: ChaosConfig) -> dict[str, ValidMessage]:
    messages: dict[str, ValidMessage] = {}
    for index in range(config.long_decimals):
        message_id = f"c{config.seed}-long-{index}"
        deltas = {TRACER: Decimal(1), "digits": LONG_DECIMAL}
        body = f'{{"id":"{message_id}",' + _event_json("hot:0", deltas, None) + "}"
        messages[message_id] = ValidMessage(message_id, body, "hot:0", 1, {"hot:0": deltas})
    return messages


CLAIM_UNIT_MESSAGES: Final = 200
"""More than the journal's 99 claims a transaction, and still over 99 in a bisected half of a 250-record batch."""


def _claim_unit_messages(config: ChaosConfig) -> dict[str, ValidMessage]:
    """``ChaosConfig.claim_units`` runs of messages on one key each, every message with an id of its own."""
    messages: dict[str, ValidMessage] = {}
    for unit in range(config.claim_units):
        key = f"claims:{unit}"
        for index in range(CLAIM_UNIT_MESSAGES):
            message_id = f"c{config.seed}-claims-{unit}-{index}"
            deltas = {TRACER: Decimal(1)}
            body = f'{{"id":"{message_id}",' + _event_json(key, deltas, None) + "}"
            messages[message_id] = ValidMessage(message_id, body, f"claims-{unit}", 1, {key: deltas})
    return messages


KINESIS_BIG_KEYS: Final = 100
"""Keys of a big message on Kinesis: with its marker, more than a direct transaction's 100 actions."""


def _kinesis_big_messages(config: ChaosConfig) -> dict[str, ValidMessage]:
    """``ChaosConfig.kinesis_big_messages`` packed messages of ``KINESIS_BIG_KEYS`` keys of their own, on one
    partition key: each is a journal unit (claimed, then committed), one after another in a shard's batch."""
    messages: dict[str, ValidMessage] = {}
    for number in range(config.kinesis_big_messages):
        message_id = f"c{config.seed}-kbig-{number}"
        parts: list[Part] = [(f"kbig:{number}:{n}", {TRACER: Decimal(1)}, None) for n in range(KINESIS_BIG_KEYS)]
        body = f'{{"id":"{message_id}","events":[' + ",".join("{" + _event_json(*p) + "}" for p in parts) + "]}"
        messages[message_id] = ValidMessage(message_id, body, "kbig", KINESIS_BIG_KEYS, _sums(parts))
    return messages


FENCED_KEYS: Final = 120
"""Keys the fenced messages draw from (``hot:0``, a hot key of the run's shards, and ``fence:<n>``)."""
FENCED_MESSAGE_KEYS: Final = 100
"""Keys of one fenced message: with its marker, more than a direct transaction's 100 actions, so a journal unit of its
own; five of six of the pool's keys, so that any two such batches write mostly the same items."""


def _fenced_messages(config: ChaosConfig) -> dict[str, ValidMessage]:
    """``ChaosConfig.fenced_messages`` packed messages of ``FENCED_MESSAGE_KEYS`` keys each, every one with ``hot:0``
    and the others drawn from ``FENCED_KEYS``: journal units on the same items, applied by every container at once
    (fenced writes of several epochs on one item, finishers of each other's batches, prunes). From a random stream of
    their own, so that without them the load is what it was."""
    rng = random.Random(f"{config.seed}:fenced")
    pool = [f"fence:{number}" for number in range(FENCED_KEYS - 1)]
    messages: dict[str, ValidMessage] = {}
    for number in range(config.fenced_messages):
        message_id = f"c{config.seed}-fenced-{number}"
        keys = ["hot:0", *rng.sample(pool, FENCED_MESSAGE_KEYS - 1)]
        parts: list[Part] = [(key, {TRACER: Decimal(1), "units": Decimal(rng.randint(1, 9))}, None) for key in keys]
        body = f'{{"id":"{message_id}","events":[' + ",".join("{" + _event_json(*p) + "}" for p in parts) + "]}"
        messages[message_id] = ValidMessage(message_id, body, f"fenced-{number}", len(parts), _sums(parts))
    return messages


def _publish_anywhere(
    publications: list[Publication], messages: dict[str, ValidMessage], config: ChaosConfig, stream: str
) -> dict[str, ValidMessage]:
    """Each of ``messages`` published once, at a place and to a source drawn from a random stream of their own."""
    rng = random.Random(f"{config.seed}:{stream}-publish")
    for message in messages.values():
        source = Source.SQS if rng.random() < config.sqs_share else Source.KINESIS
        publications.insert(rng.randint(0, len(publications)), Publication(source, message.body, message.partition_key))
    return messages


def _claim_units_first(publications: list[Publication], claim_units: Mapping[str, ValidMessage]) -> list[Publication]:
    """The claim units' messages first on their partition key's shard, in order, then the big Kinesis messages on
    theirs: a shard's first batch holds a whole run (``ChaosConfig.claim_units``, ``kinesis_big_messages``); the
    rest in the order drawn."""
    order = {message.body: index for index, message in enumerate(claim_units.values())}
    return sorted(publications, key=lambda publication: order.get(publication.body, len(order)))


_PatternPart = tuple[str, dict[str, Decimal], dict[str, tuple[str, GaugeValue]], int | None, dict[str, str]]
"""One event of a pattern message: key, deltas (empty: the declared defaults), gauges (name -> kind, value),
ts, distinct members (set -> member)."""


def _literal(value: GaugeValue) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _pattern_messages(config: ChaosConfig, base_ms: int) -> dict[str, ValidMessage]:
    """The messages of the counter patterns (``tally_local.chaos.patterns``), on keys of their own.

    Their own random stream, so the rest of the load stays as it was. Every ``ts`` is distinct (``base_ms``
    minus a distinct number of milliseconds), so the gauges' reference never needs tally's tie-break.
    """
    builder = _PatternBuilder(config, random.Random(f"{config.seed}:patterns"), iter(range(base_ms - 1_000, 0, -3)))
    builder.stock()
    builder.gauges()
    builder.bounded()
    builder.distinct()
    builder.resets()
    return builder.messages


@dataclass
class _PatternBuilder:
    config: ChaosConfig
    rng: random.Random
    stamps: Iterator[int]
    messages: dict[str, ValidMessage] = field(default_factory=dict)

    def _events(self, many: float, most: int) -> range:
        return range(self.rng.randint(2, most) if self.rng.random() < many else 1)

    def _key(self, prefix: str) -> str:
        return f"{prefix}:{self.rng.randrange(self.config.pattern_keys)}"

    def _with_ordinary(self, parts: list[_PatternPart]) -> list[_PatternPart]:
        """A third of the messages also count on an ordinary ``k:`` key: they join the large units the
        journal applies (start values in its chunks, gauges and members after its commit)."""
        if self.rng.random() < 1 / 3:
            parts.append((f"k:{self.rng.randrange(1, self.config.keys)}", {TRACER: Decimal(1)}, {}, None, {}))
        return parts

    def stock(self) -> None:
        """Start values and default deltas: most ``stock:`` events name no delta, some ``views:`` too."""
        rng = self.rng
        for index in range(self.config.stock_messages):
            parts: list[_PatternPart] = []
            for _ in self._events(0.2, 5):
                explicit = rng.random() < 0.3
                deltas = {"stock": Decimal(_nonzero(rng, -3, 5)), TRACER: Decimal(1)} if explicit else {}
                parts.append((self._key("stock"), deltas, {}, None, {}))
            if rng.random() < 0.3:
                parts.append((self._key("views"), {}, {}, None, {}))
            self._add(f"c{self.config.seed}-stock-{index}", self._with_ordinary(parts))

    def gauges(self) -> None:
        """``max``, ``min`` and ``latest`` readings on ``g:`` keys, some events without deltas."""
        rng = self.rng
        for index in range(self.config.gauge_messages):
            parts: list[_PatternPart] = []
            for _ in self._events(0.2, 4):
                ts = next(self.stamps)
                readings: dict[str, tuple[str, GaugeValue]] = {
                    "peak": ("max", Decimal(rng.randint(-50, 500))),
                    "low": ("min", Decimal(rng.randint(-500, 50)).scaleb(-1)),
                    "last": ("latest", f"v-{index}-{ts}" if rng.random() < 0.7 else Decimal(rng.randint(0, 99))),
                }
                readings = dict(rng.sample(sorted(readings.items()), rng.randint(1, 3)))
                deltas = {TRACER: Decimal(1)} if rng.random() < 0.8 else {}
                parts.append((self._key("g"), deltas, readings, ts, {}))
            self._add(f"c{self.config.seed}-gauge-{index}", self._with_ordinary(parts))

    def bounded(self) -> None:
        """Steps of 1 to 4 up and down on ``seats:`` keys' bounded ``taken`` (no tracer: a refusal is legal)."""
        rng, keys = self.rng, self.config.pattern_keys
        for index in range(self.config.bounded_messages):
            seat = rng.randrange(keys)
            parts: list[_PatternPart] = [(f"seats:{seat}", {"taken": Decimal(_nonzero(rng, -4, 4))}, {}, None, {})]
            roll = rng.random()
            if roll < 0.15:  # a second seat: a refusal on either must leave both untouched
                other = (seat + 1 + rng.randrange(keys - 1)) % keys
                parts.append((f"seats:{other}", {"taken": Decimal(_nonzero(rng, -4, 4))}, {}, None, {}))
            elif roll < 0.3:  # an unbounded key beside it: counted only with the seat's step
                parts.append((f"seatlog:{seat}", {"n": Decimal(1)}, {}, None, {}))
            self._add(f"c{self.config.seed}-bounded-{index}", parts, bounded=True)
        digits = random.Random(f"{self.config.seed}:digit-steps")  # a stream of its own: the rest stays as it was
        for index in range(self.config.digit_bound_steps):
            seat = digits.randrange(keys)
            # A small step onto the seat first (published right before it: ``_keep_digit_fills_before_their_steps``):
            # from a seat, and its windows, above 0 the big step's sums need 39 or 40 digits, which DynamoDB refuses
            # before it looks at the bound's condition.
            fill: list[_PatternPart] = [(f"seats:{seat}", {"taken": Decimal(digits.randint(1, 4))}, {}, None, {})]
            self._add(f"c{self.config.seed}-{DIGIT_FILL}{index}", fill, bounded=True)
            parts = [(f"seats:{seat}", {"taken": BIG_SEAT_STEP}, {}, None, {})]
            if index % 2 and keys > 1:  # packed with an ordinary step: the refusal must leave it untouched too
                other = (seat + 1 + digits.randrange(keys - 1)) % keys
                parts.append((f"seats:{other}", {"taken": Decimal(_nonzero(digits, -4, 4))}, {}, None, {}))
            self._add(f"c{self.config.seed}-{DIGIT_STEP}{index}", parts, bounded=True)

    def distinct(self) -> None:
        """Viewers (of 80) and sometimes countries (of 12) on ``page:`` keys, some events with a ``ts``."""
        rng = self.rng
        for index in range(self.config.distinct_messages):
            parts: list[_PatternPart] = []
            for _ in self._events(0.2, 4):
                members = {"viewers": f"u-{rng.randrange(80)}"}
                if rng.random() < 0.3:
                    members["countries"] = f"c-{rng.randrange(12)}"
                ts = next(self.stamps) if rng.random() < 0.3 else None
                parts.append((self._key("page"), {TRACER: Decimal(1)}, {}, ts, members))
            self._add(f"c{self.config.seed}-distinct-{index}", self._with_ordinary(parts))

    def resets(self) -> None:
        """Deltas (a few as corrections) and resets of ``level`` on ``r:`` keys, one message per event."""
        rng, seed = self.rng, self.config.seed
        for index in range(self.config.reset_messages):
            key = f"r:{rng.randrange(self.config.reset_keys)}"
            message_id = f"c{seed}-reset-{index}"
            if rng.random() < 0.12:
                value = Decimal(rng.randint(0, 1000))
                body = f'{{"id":"{message_id}","key":"{key}","reset":{{"{LEVEL}":{value}}}}}'
                step, sums = (key, "reset", value), {}
            else:
                delta = Decimal(_nonzero(rng, -20, 50))
                correction = ',"correction":true' if rng.random() < 0.2 else ""
                deltas = (
                    f'"deltas":{{"{LEVEL}":{delta}}}' if correction else f'"deltas":{{"{LEVEL}":{delta},"{TRACER}":1}}'
                )
                body = f'{{"id":"{message_id}","key":"{key}",{deltas}{correction}}}'
                step, sums = (key, "add", delta), ({} if correction else {key: {TRACER: Decimal(1)}})
            self.messages[message_id] = ValidMessage(message_id, body, key, 1, sums, level_step=step)

    def _add(self, message_id: str, parts: Sequence[_PatternPart], *, bounded: bool = False) -> None:
        events: list[str] = []
        sums: Sums = defaultdict(lambda: defaultdict(Decimal))
        readings: list[GaugeReading] = []
        members: list[tuple[str, str, str]] = []
        for key, deltas, gauges, ts, distinct in parts:
            events.append(_pattern_event_json(key, deltas, gauges, ts, distinct))
            members += [(key, name, member) for name, member in distinct.items()]
            for name, delta in (deltas or default_deltas(key)).items():
                sums[key][name] += delta
            readings += [GaugeReading(key, name, kind, value, ts or 0) for name, (kind, value) in gauges.items()]
        single = len(events) == 1
        body = f'{{"id":"{message_id}",' + (events[0][1:] if single else '"events":[' + ",".join(events) + "]}")
        self.messages[message_id] = ValidMessage(
            message_id,
            body,
            parts[0][0] if single else message_id,
            len(events),
            {key: dict(counters) for key, counters in sums.items()},
            gauges=tuple(readings),
            members=tuple(members),
            bounded=bounded,
        )


def _pattern_event_json(
    key: str,
    deltas: dict[str, Decimal],
    gauges: dict[str, tuple[str, GaugeValue]],
    ts: int | None,
    distinct: dict[str, str],
) -> str:
    fields = [f'"key":{json.dumps(key)}']
    if deltas:
        fields.append('"deltas":{' + ",".join(f'"{n}":{v}' for n, v in deltas.items()) + "}")
    if ts is not None:
        fields.append(f'"ts":{ts}')
    if gauges:
        fields.append('"gauges":{' + ",".join(f'"{n}":{{"{k}":{_literal(v)}}}' for n, (k, v) in gauges.items()) + "}")
    if distinct:
        fields.append('"distinct":' + json.dumps(distinct, separators=(",", ":")))
    return "{" + ",".join(fields) + "}"


def wide_items(workload: Workload, names_per_add: int) -> int:
    """Keys whose all-time item gets more counter names than one ADD carries (the load's figure)."""
    return sum(1 for counters in workload.expected.values() if len(counters) > names_per_add)


def _sums(parts: list[Part] | tuple[Part, ...]) -> Sums:
    sums: Sums = defaultdict(lambda: defaultdict(Decimal))
    for event_key, event_deltas, _ in parts:
        for name, delta in event_deltas.items():
            sums[event_key][name] += delta
    return {key: dict(counters) for key, counters in sums.items()}


def _reuse_ids(config: ChaosConfig, valid: dict[str, ValidMessage], rng: random.Random) -> dict[str, ValidMessage]:
    """Other content under ``reuse_share`` of the valid ids: same keys and ``count``, other ``units``."""
    alternates: dict[str, ValidMessage] = {}
    ordinary = sorted((m for m in valid.values() if m.parts), key=lambda m: m.message_id)  # not the wide ones
    for message in rng.sample(ordinary, int(len(valid) * config.reuse_share)):
        (key, deltas, ts), *rest = message.parts
        changed = {**deltas, "units": deltas.get("units", Decimal(0)) + _nonzero(rng, -5, 20)}
        if isinstance(ts, int) and rng.random() < 0.5:
            ts -= 1  # another event time too (the same hour or day window, or the one before)
        parts = ((key, changed, ts), *rest)
        if len(parts) > 1 or message.partition_key == message.message_id:
            body = (
                f'{{"id":"{message.message_id}","events":['
                + ",".join("{" + _event_json(*p) + "}" for p in parts)
                + "]}"
            )
        else:
            body = f'{{"id":"{message.message_id}",' + _event_json(*parts[0]) + "}"
        alternates[message.message_id] = ValidMessage(
            message.message_id, body, message.partition_key, len(parts), _sums(parts), parts=parts, reused=True
        )
    return alternates


_DECIMAL = re.compile(r'(":-?\d+\.\d+)')
_INT_DELTA = re.compile(r'("(?:units|count)":-?\d+)([,}])')


def _respell(body: str) -> str:
    """The same content written differently: the ``delta`` shorthand spelled out, ints as ``n.0``, a
    trailing zero on every decimal, a space after every comma."""
    body = body.replace('"delta":1}', '"deltas":{"count":1}}')
    body = _DECIMAL.sub(r"\g<1>0", body)
    body = _INT_DELTA.sub(r"\1.0\2", body)
    return body.replace(',"', ', "')


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


SESSION_BIG_KEYS: Final = 120
"""Keys of a bounded session's big message (60 when the run counts minute windows, over two minutes): more
than the 99 counter items a direct transaction holds beside its marker, so the journal's."""
SESSION_SALE_STEP: Final = (15, 40)
"""A sale takes or gives back 15 to 40 seats: often more than the bound lets through."""


def _bounded_session_messages(config: ChaosConfig, base_ms: int) -> dict[str, ValidMessage]:
    """Per bounded session: seq 0 a big packed message of keys of its own, seqs 1.. bounded sales
    on ``seats:`` keys, every other one with an event on a key of the big message (its ``n``, not the
    tracer: a refused sale adds nothing). With minute windows the big message's events alternate between
    two minutes, so 60 keys make 120 items, as the producer library's default of 99 keys per message can."""
    rng = random.Random(f"{config.seed}:sessions")
    minutes = any(unit.name == "minute" for unit in parse_window_spec(config.windows, config.window_retention).units)
    keys = SESSION_BIG_KEYS // 2 if minutes else SESSION_BIG_KEYS
    messages: dict[str, ValidMessage] = {}
    for number in range(config.bounded_sessions):
        ids = NumberedIds(f"{rng.getrandbits(128):032x}")
        big_id, partition = ids(), f"bsession:{number}"
        parts: list[Part] = [
            (f"bs:{number}:{n}", {TRACER: Decimal(1)}, base_ms - 1_000 - 60_000 * (n % 2) if minutes else None)
            for n in range(keys)
        ]
        body = f'{{"id":"{big_id}","events":[' + ",".join("{" + _event_json(*p) + "}" for p in parts) + "]}"
        messages[big_id] = ValidMessage(big_id, body, partition, keys, _sums(parts))
        for sale in range(config.session_sales):
            sale_id = ids()
            step = Decimal(rng.randint(*SESSION_SALE_STEP) * rng.choice((1, -1)))
            sale_parts: list[Part] = [(f"seats:{rng.randrange(config.pattern_keys)}", {"taken": step}, None)]
            if sale % 2:
                sale_parts.append((f"bs:{number}:{rng.randrange(keys)}", {"n": Decimal(1)}, None))
            body = f'{{"id":"{sale_id}","events":[' + ",".join("{" + _event_json(*p) + "}" for p in sale_parts) + "]}"
            messages[sale_id] = ValidMessage(
                sale_id, body, partition, len(sale_parts), _sums(sale_parts), parts=tuple(sale_parts), bounded=True
            )
    return messages


def _publish_sessions(
    publications: list[Publication], sessions: Mapping[str, ValidMessage], rng: random.Random, sqs_share: float
) -> None:
    """Each session's messages one after the other, on one source, at a random place: often one batch.

    Every other session publishes its big message alone first, on SQS, and re-sends it later right before
    its sales: a kill after the first copy's claim leaves a marker naming an aborted batch (once its lease
    has passed), which the re-send then meets beside fresh sales."""
    by_partition: dict[str, list[ValidMessage]] = defaultdict(list)
    for message in sessions.values():
        by_partition[message.partition_key].append(message)
    for number, (partition, members) in enumerate(by_partition.items()):
        big, *sales = members
        if number % 2:
            first = rng.randint(0, len(publications) // 2)
            publications.insert(first, Publication(Source.SQS, big.body, partition))
            place = rng.randint(first + 1, len(publications))
            together = [Publication(Source.SQS, big.body, partition, resend=True)]
            together += [Publication(Source.SQS, sale.body, partition) for sale in sales]
        else:
            where = Source.SQS if rng.random() < sqs_share else Source.KINESIS
            place = rng.randint(0, len(publications))
            together = [Publication(where, message.body, partition) for message in members]
        publications[place:place] = together
