"""The bill of a traffic description: what tally writes and reads per event, and what that costs a month.

Why a simulation and not a formula: how many items a batch writes depends on how many distinct keys its
messages touch and on how ``tally.core.plan`` groups them (direct transactions for small key-disjoint
units, the commit journal for large ones, apply chunks of 98 ADDs). So the model draws batches shaped
like the traffic (seeded, Zipf keys), turns each message into the ``MessageTotals`` the pipeline would
(one item per key and time window), runs the real planner (``plan_batch``, ``plan_apply_chunks``) on
them, and bills every item it would write by DynamoDB's rules (``tally.cost.capacity``), path by path
as ``tally.commit.protocol`` and ``tally.store.journal`` write them:

- direct transaction: one marker action per marker item (a message's own, or, for numbered ids, a block
  of 16 consecutive messages: ``tally.core.numbered_ids``) and one ``ADD`` per item, 2 units per item per KB
  (a block stays within 1 KB);
- journal unit: claim transactions (the header, or a check of it, plus up to 99 marker items each), then
  - fenced (``FencedApply=true``, the default; ``tally.core.fence``): every item read once (consistent, the range
    check), the pages (``BatchWriteItem``, 1 unit per KB), the header's commit (a plain ``UpdateItem``), **one
    plain conditional ``UpdateItem`` per item at 1 unit per KB** of the item with ``FENCE_MARKS_PRICED`` marks on
    it, and DONE (a plain ``UpdateItem``); no applied-record, no transaction after the claims;
  - chunked (``FencedApply=false``): a unit of one apply chunk commits in one transaction (header + ADDs); a larger
    one reads its later chunks' items once (consistent), writes its pages, then the commit (header,
    applied-record, chunk 0), one transaction per later chunk (applied-record + ADDs) and the finish (the header
    alone, a plain ``UpdateItem``);
- re-sent messages are settled by the marker read before any write: half a read unit each. Without
  re-sends the read gate (``tally.commit.marker_reads``) closes after 10 batches per container, so the
  model bills no marker reads then (a warm-up of 10 batches a container is noise over a month).

Finishing a batch left unfinished (an invocation killed or out of time) is not priced: a finisher's read of
the items' marks (half a read unit per item of up to 4 KB, one ``BatchGetItem`` per 100) and the writes still
missing come on top, in proportion to how often invocations die.

What it assumes, and says so in its output: every event of a batch falls in the same time window
(a batch spans seconds; one batch in ``window length / batch span`` writes a key's window twice);
hot-key shards change which item a batch writes, not how many; request latencies (``Latencies``) are
inputs, not measurements of AWS.

Prices (us-east-1, on-demand, checked 2026-11):

- DynamoDB: $0.625 per million write request units, $0.125 per million read request units (since the
  November 2024 price cut; https://aws.amazon.com/dynamodb/pricing/on-demand/, also quoted at
  https://airbyte.com/data-engineering-resources/dynamodb-pricing);
- Lambda arm64: $0.0000133334 per GB-second (first 7.5 billion GB-s a month) and $0.20 per million
  requests (https://aws.amazon.com/lambda/pricing/; quoted at https://cloudchipr.com/blog/aws-lambda-pricing).
- SQS: $0.40 per million requests on a standard queue, each 64 KB chunk of a request's payload billed as a
  request; data moved within a region is free (https://aws.amazon.com/sqs/pricing/; quoted at
  https://cloudburn.io/blog/amazon-sqs-pricing). ``price`` leaves SQS out (the same for any consumer of the
  queue); ``tally.cost.sqs`` counts it where a comparison needs it (``python -m bench views``).
- S3 (the archive, ``ArchiveEnabled``): $0.005 per 1,000 PUT requests and $0.023 per GB-month in S3 Standard
  (https://aws.amazon.com/s3/pricing/). One ``PutObject`` per invocation; the object's size as measured by
  ``python -m bench archive-format`` (``ARCHIVE_BYTES_PER_MESSAGE``, ``ARCHIVE_BYTES_PER_EVENT``).
  The free tier is left out: the bill is the marginal price.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, Final

from tally.core.aggregate import MessageTotals
from tally.core.items import WINDOW_COUNTER_MARK, ItemKey, make_item, view_item_key, window_counter
from tally.core.limits import BATCH_GET_MAX_KEYS, BATCH_WRITE_MAX_ITEMS, LAMBDA_PAYLOAD_MAX_BYTES
from tally.core.numbered_ids import distinct_marker_items, numbered_id
from tally.core.plan import MAX_JOURNAL_CHUNK_KEYS, plan_apply_chunks, plan_batch, unit_increments
from tally.core.windows import MOVE_AT_BYTES, hours_on_day_items, parse_window_spec
from tally.core.write_cost import (
    HEADER_BYTES,
    MARKER_BYTES,
    PAGE_OVERHEAD_BYTES,
    TRANSACTION_FACTOR,
    PageBytes,
    claim_transactions,
    direct_write_units,
    fenced_journal_write_units,
    planner_page_bytes,
    transactional_write_units,
    write_units,
)
from tally.cost.capacity import number_size, read_units

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.core.numbers import Number
    from tally.core.plan import JournalPrice


SECONDS_PER_MONTH: Final = 30 * 24 * 3600
"""A 30-day month, as AWS's pricing examples bill one."""
WORST_NUMBER_BYTES: Final = number_size("9" * 38)
"""A counter value at DynamoDB's 38 digits: item sizes are billed on the largest they can be."""
DIMENSION_BYTES: Final = 24
"""What a view adds to an event's JSON, priced as one dimension of its own (``"customer":"acme-corp",``; the
first adds ``"dims":{}``): a bound above when views share dimensions."""
MOVED_ITEMS_PRICED: Final = 200_000
"""Items whose window moves ``window_moves`` prices one by one (a view's ``keys x values`` beyond it are scaled)."""
SQS_RECORD_ENVELOPE_BYTES: Final = 1000
"""What an SQS record adds to its body in the Lambda event: message id, receipt handle (a few hundred
characters on AWS), attributes, MD5, queue ARN and region, as JSON."""
KINESIS_RECORD_ENVELOPE_BYTES: Final = 700
"""A Kinesis record's event id, ARNs, sequence number, partition key and schema fields, as JSON."""
MAX_BATCH_RECORDS: Final = 10_000
"""The largest ``BatchSize`` (SQS standard queue) and ``StreamBatchSize`` (Kinesis)."""
LAMBDA_FULL_VCPU_MB: Final = 1769
"""At 1,769 MB a function has one full vCPU; below, CPU time stretches in proportion."""
PARTITION_WRITE_UNITS_PER_S: Final = 1000
"""DynamoDB's per-partition write ceiling."""
KINESIS_SHARD_RECORDS_PER_S: Final = 1000
KINESIS_SHARD_BYTES_PER_S: Final = 1024 * 1024
SQS_MAX_WINDOW_S: Final = 60
"""The template caps ``BatchingWindowSeconds`` at 60 (its visibility mapping allows 60 s for it)."""
KINESIS_MAX_WINDOW_S: Final = 300
FENCE_MARK_BYTES: Final = len("f#") + 11 + number_size(str(2**31))
"""One epoch's mark on an item (``f#<11-character epoch>`` = sequence x 1024 + part): 19 bytes (measured 15-21)."""
FENCE_MARKS_PRICED: Final = 10
"""Marks a key item is priced with under the fenced apply: one per writer epoch that wrote it within the prune
horizon (31 minutes); ten keeps an item at ``MOVE_AT_BYTES`` plus an hour under 1 KB (docs/journal.md, "Fenced
apply"). A key more containers write at once carries more, and its writes pass 1 KB sooner."""
DEFAULT_TRANSACTION_MS: Final = 15.0
"""Assumed latency of a 100-action ``TransactWriteItems`` on AWS (an input; part 5 is to measure it)."""
SIMULATED_EVENTS: Final = 40_000
"""At most this many events are drawn per price (at least one batch)."""
BATCH_SIZES: Final = (1, 10, 25, 50, 100, 200, 300, 500, 700, 1000, 2000, 5000, 10_000)
ARCHIVE_BYTES_PER_MESSAGE: Final = 58.0
ARCHIVE_BYTES_PER_EVENT: Final = 7.5
"""An archived message's share of its gzip'd object: 58 bytes + 7.5 per event. Fitted on two measured points of
``python -m bench archive-format`` (workload U, two counters, numbered ids, objects of 100 records, gzip 6): 65.7
bytes per single-event message, 805 per message of 100 events (8.05 per event)."""
"""The batch sizes ``recommend`` tries."""


@dataclass(frozen=True, slots=True)
class Prices:
    """Unit prices in US dollars (see the module docstring for the sources)."""

    write_unit: float = 0.625e-6
    read_unit: float = 0.125e-6
    lambda_gb_second: float = 0.0000133334
    lambda_request: float = 0.20e-6
    s3_put_request: float = 0.005e-3
    s3_gb_month: float = 0.023
    sqs_request: float = 0.40e-6
    """A standard queue's request (``tally.cost.sqs``: one per 64 KB of a request's payload)."""


@dataclass(frozen=True, slots=True)
class Latencies:
    """Per-request latencies (ms) and handler CPU (µs) the duration model adds up.

    The request latencies are assumptions (no AWS account here to measure them), below the published
    figures of ``RequestLatencies`` that ``tally_local.latency_proxy`` answers after (a 100-action transaction:
    15 ms here, 57.6 ms extrapolated there; docs/explanation/costs.md, "Handler duration"). The CPU figures are
    measured: ``python -m bench duration --proxy --batches 2 --write-concurrency 1 --write-concurrency 4`` times
    the unmodified handler's process CPU (``time.process_time``: decoding, aggregation, planning and botocore's
    request building and parsing) on 8 configurations of workload U, windows on, the fenced apply on; a
    least-squares fit of the relative error per event gives 2,300 µs per request (botocore's fixed cost of a call:
    it dominates the fenced apply's one ``UpdateItem`` per item), 55 µs per item written (a transaction action, a
    page, a fenced write) and 8.3 µs per event per counter item it lands in (all-time plus windows), within 34%
    of every configuration (the same batches' CPU measured up to 1.5x apart at the two concurrencies: the
    machine's noise). Measured on a shared 2-vCPU x86 VM (Intel Xeon) running about 1.55x slower than the
    test suite's reference machine (a calibration of 20.2 ms against 13.0, ``tests/support/budget.py``), not on
    Lambda's Graviton: a Lambda vCPU may be faster or slower. (The figures before the fenced apply, 115 µs per item
    and 7.7 µs per event item with no per-request term, came from the chunked path on an AMD EPYC VM and priced
    a fenced batch's CPU at a fifth of what it takes.)
    """

    transact_write_ms: float = DEFAULT_TRANSACTION_MS
    batch_get_ms: float = 5.0
    batch_write_ms: float = 10.0
    single_write_ms: float = 7.55
    """A plain ``UpdateItem`` (``RequestLatencies.single_item_ms``)."""
    parallel_writes: int = 4
    """Single-item writes in flight at once: the write pool (``TALLY_WRITE_CONCURRENCY``'s default)."""
    cpu_us_per_request: float = 2300.0
    cpu_us_per_item: float = 55.0
    cpu_us_per_event_item: float = 8.3


@dataclass(frozen=True, slots=True)
class RequestLatencies:
    """DynamoDB request latencies as published, per operation and per item: what ``tally_local.latency_proxy``
    answers after.

    Source: Alex DeBrie, "DynamoDB Transactions Performance Testing" (https://www.alexdebrie.com/posts/
    dynamodb-transactions-performance/; code and table in github.com/alexdebrie/dynamodb-performance-testing,
    ``put-batch-transaction-performance/README.md``): boto3 calls from Lambda to a table in the same region
    (us-east-1, on demand, Python 3.7, 400 invocations each), p50 in ms: ``PutItem`` 7.55;
    ``BatchWriteItem`` 8.14 (5 items) and 10.2 (25); ``TransactWriteItems`` 25.3 (5 items) and 32.1 (25).
    AWS itself promises "single-digit millisecond" latency for single-item operations (the DynamoDB
    high-latency knowledge-center article) and publishes no per-operation table. A straight line through
    each pair gives a base and a per-item slope; beyond 25 items (tally writes up to 100 actions) it is an
    extrapolation (100 actions: 57.6 ms). ``BatchGetItem`` is given ``BatchWriteItem``'s line (no published
    figure: an assumption), every other operation ``PutItem``'s figure. The figures include the client's
    own request building at that function's memory (the Serverless Framework's default then, 1,024 MB),
    which the handler's measured CPU counts again: a small overstatement.
    """

    single_item_ms: float = 7.55
    transact_base_ms: float = 23.6
    transact_per_action_ms: float = 0.34
    batch_base_ms: float = 7.625
    batch_per_item_ms: float = 0.103

    def of(self, operation: str, items: int) -> float:
        """The p50 latency (ms) of one ``operation`` request carrying ``items`` items (actions, keys)."""
        items = max(1, items)
        if operation in {"TransactWriteItems", "TransactGetItems"}:
            return self.transact_base_ms + self.transact_per_action_ms * items
        if operation in {"BatchWriteItem", "BatchGetItem"}:
            return self.batch_base_ms + self.batch_per_item_ms * items
        return self.single_item_ms


def published_latencies() -> Latencies:
    """``Latencies`` at the published figures of ``RequestLatencies`` (the ones ``tally_local.latency_proxy``
    answers after): a full 100-action transaction, a 100-key ``BatchGetItem``, a 25-item ``BatchWriteItem``.
    ``tally plan`` prices with these, so its duration is comparable with the latency proxy's."""
    published = RequestLatencies()
    return Latencies(
        transact_write_ms=round(published.of("TransactWriteItems", 100), 1),
        batch_get_ms=round(published.of("BatchGetItem", 100), 1),
        batch_write_ms=round(published.of("BatchWriteItem", 25), 1),
        single_write_ms=published.of("UpdateItem", 1),
    )


PROXY_TO_MODEL_DURATION: Final = (0.7, 1.2)
"""How long, per event, the latency proxy measured the handler against what ``price`` predicts at
``published_latencies`` for the same traffic (``bench duration --proxy`` at the default ``TALLY_WRITE_CONCURRENCY`` of
4, the fenced apply on; docs/explanation/costs.md), two runs: 0.85x and 0.85x for single events at the template's batch
size, 1.11x and 1.19x at 100 records, 0.93x and 0.87x for packed messages at the 6 MB batch, 0.73x and 1.08x at 100
records (the CPU of the same batches measured up to 1.5x apart between runs), widened a little. The
model's CPU figures were fitted on the same runs; what is left is mostly the requests' overlap with the CPU, which
the model adds one after the other."""


@dataclass(frozen=True, slots=True)
class Traffic:
    """What a user knows about their traffic."""

    events_per_second: float
    keys: int
    """Distinct counter keys."""
    zipf_s: float = 1.1
    """Key skew: key of rank k is drawn with weight 1/k**s (0: uniform)."""
    events_per_message: int = 1
    """1 for single-event messages; the producer library packs up to 10,000."""
    counters: int = 2
    """Counter names per event (``deltas``)."""
    key_bytes: int = 17
    windows: tuple[str, ...] = ("hour", "day")
    resend_rate: float = 0.0
    """Share of messages the producers send again (the same id)."""
    numbered_ids: bool = False
    """Whether the producers number their messages (``<session>.<seq>``, the producer library's
    default): consecutive messages then share marker items. The model draws one producer
    session, its messages in order; several producers interleaving cost a block write more per batch each."""
    source: str = "SQS"
    latency_budget_s: float = 60.0
    """How long an event may take from publish to counted."""
    memory_mb: int = 512
    archive: bool = True
    """Whether every counted message is archived to S3 (``ArchiveEnabled``)."""
    fenced_apply: bool = True
    """Whether journal batches are applied by fenced single-item writes (``FencedApply``) or chunk transactions."""
    views: tuple[int, ...] = ()
    """Each declared view's distinct values per key (``CounterViews``; customers 50, routes 8, their pairs 400):
    an event counts once more in one value's item of each, the value drawn with the traffic's skew."""

    def __post_init__(self) -> None:
        if self.events_per_second <= 0 or self.keys < 1 or self.events_per_message < 1 or self.counters < 1:
            raise ValueError("events/s, keys, events per message and counters must be positive")
        if any(values < 1 for values in self.views):
            raise ValueError("a view has at least one value")
        if self.source not in ("SQS", "Kinesis"):
            raise ValueError(f"source must be SQS or Kinesis, not {self.source!r}")
        if not 0 <= self.resend_rate < 1:
            raise ValueError("resend rate must be in [0, 1)")

    @property
    def records_per_second(self) -> float:
        return self.events_per_second / self.events_per_message

    @property
    def message_bytes(self) -> int:
        """A message body's size, roughly: the producer's JSON (key, counter names, 6-digit values)."""
        per_event = self.key_bytes + 20 + self.counters * 16 + DIMENSION_BYTES * len(self.views)
        return 60 + self.events_per_message * per_event

    @property
    def record_bytes(self) -> int:
        """One record as it weighs in Lambda's 6 MB payload, which is what cuts a batch.

        SQS: the body is a JSON string inside the event's JSON, so each of its quotes is escaped (an
        event has ``6 + 2 x counters`` of them, the envelope 4), plus the record's envelope. Kinesis: the
        body is base64 (4 bytes per 3) plus the record's envelope.
        """
        if self.source == "Kinesis":
            return -(-self.message_bytes // 3) * 4 + KINESIS_RECORD_ENVELOPE_BYTES
        quotes = 4 + self.events_per_message * (6 + 2 * self.counters)
        return self.message_bytes + quotes + SQS_RECORD_ENVELOPE_BYTES


@dataclass(frozen=True, slots=True)
class BatchBill:
    """What one simulated batch writes, reads and sends."""

    records: int
    events: int
    """Events of the batch's new messages (re-sends count none: the per-event figures are per distinct event)."""
    write_units: float
    read_units: float
    transactions: int
    batch_gets: int
    batch_writes: int
    journal_units: int
    items: int = 0
    """Items written: transaction actions and pages (what botocore serialises)."""
    single_writes: int = 0
    """Plain single-item writes (``UpdateItem``): a fenced batch's items, its commit and its DONE."""


@dataclass(frozen=True, slots=True)
class UnitsPerEvent:
    """The simulation's averages over its batches."""

    batch_records: int
    write_units: float
    read_units: float
    requests_per_batch: float
    transactions_per_batch: float
    batch_gets_per_batch: float
    batch_writes_per_batch: float
    events_per_batch: float
    items_per_batch: float
    journal_share: float
    """Share of batches with at least one journal unit."""
    single_writes_per_batch: float = 0.0
    """Plain single-item writes per batch (the fenced apply's), sent on the write pool."""


def simulate(
    traffic: Traffic,
    batch_records: int,
    *,
    batches: int = 8,
    seed: int = 20_261_124,
    page_bytes: PageBytes = planner_page_bytes,
    now_ms: int = 1_795_000_000_000,
    moves: bool = True,
) -> UnitsPerEvent:
    """Draw ``batches`` batches of ``batch_records`` records shaped like ``traffic``; bill each, and add the
    moves of ended windows at the traffic's rate (``window_moves``; ``moves=False``: the batches alone, as a
    run shorter than an hour measures them)."""
    if batch_records < 1 or batches < 1:
        raise ValueError("a simulation needs at least one batch of one record")
    new_per_batch = max(1, round(batch_records / (1 + traffic.resend_rate)))
    session = f"{seed:032x}"[-32:]
    resent_per_batch = batch_records - new_per_batch
    drawn = _drawn(_Shape.of(traffic), seed, now_ms).first(batches * new_per_batch)
    bills: list[BatchBill] = []
    for start in range(0, len(drawn), new_per_batch):
        messages = [
            MessageTotals(numbered_id(session, number) if traffic.numbered_ids else f"m{number:032d}", totals, events)
            for number, (totals, events) in enumerate(drawn[start : start + new_per_batch], start)
        ]
        bills.append(bill_batch(messages, resent_per_batch, traffic, page_bytes=page_bytes))
    count = len(bills)
    events = sum(bill.events for bill in bills)
    move_writes, move_reads = window_moves(traffic) if moves else (0.0, 0.0)
    return UnitsPerEvent(
        batch_records=batch_records,
        write_units=sum(bill.write_units for bill in bills) / events + move_writes,
        read_units=sum(bill.read_units for bill in bills) / events + move_reads,
        requests_per_batch=sum(
            bill.transactions + bill.batch_gets + bill.batch_writes + bill.single_writes for bill in bills
        )
        / count,
        transactions_per_batch=sum(bill.transactions for bill in bills) / count,
        batch_gets_per_batch=sum(bill.batch_gets for bill in bills) / count,
        batch_writes_per_batch=sum(bill.batch_writes for bill in bills) / count,
        events_per_batch=events / count,
        items_per_batch=sum(bill.items for bill in bills) / count,
        journal_share=sum(1 for bill in bills if bill.journal_units) / count,
        single_writes_per_batch=sum(bill.single_writes for bill in bills) / count,
    )


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the synthetic messages' contents depend on: traffics alike in these draw the same messages."""

    keys: int
    zipf_s: float
    events_per_message: int
    counters: int
    key_bytes: int
    windows: tuple[str, ...]
    views: tuple[int, ...]

    @classmethod
    def of(cls, traffic: Traffic) -> _Shape:
        return cls(**{name: getattr(traffic, name) for name in cls.__dataclass_fields__})


class _Draws:
    """The contents of a traffic's synthetic messages, drawn in order from one seed and kept.

    Message n is the same whatever the batch size (the draw does not depend on where batches are cut), so the
    simulations of one ``tally plan`` (each batch size, the floor, the levers that keep the shape) read one stream
    instead of drawing theirs again; it is extended as a longer simulation asks for more.
    """

    def __init__(self, shape: _Shape, seed: int, now_ms: int) -> None:
        self._shape = shape
        self._rng = random.Random(seed)
        self._cumulative = _cumulative_weights(shape.keys, shape.zipf_s)
        self._value_weights = [_cumulative_weights(n, shape.zipf_s) for n in shape.views]
        names = tuple(f"c{index}" for index in range(shape.counters))
        windows, _ = parse_window_spec(",".join(shape.windows)).windows_of(now_ms, now_ms)
        # Minute windows are items of their own; hour and day windows are counters of the key's item.
        self._window_items = [
            (unit.window_id(start), unit.expires_at_s(start), names) for unit, start in windows if not unit.on_key_item
        ]
        self._key_names = names + tuple(
            window_counter(unit.window_id(start), name) for unit, start in windows if unit.on_key_item for name in names
        )
        self._keys: dict[int, str] = {}
        self._items: dict[str, tuple[tuple[ItemKey, tuple[str, ...]], ...]] = {}
        self._drawn: list[tuple[dict[ItemKey, dict[str, int]], int]] = []

    def first(self, count: int) -> Sequence[tuple[Mapping[ItemKey, Mapping[str, int]], int]]:
        """The first ``count`` messages: each one's totals (item -> counter -> delta) and its events."""
        while len(self._drawn) < count:
            self._drawn.append(self._draw())
        return self._drawn[:count]

    def _draw(self) -> tuple[dict[ItemKey, dict[str, int]], int]:
        shape, rng = self._shape, self._rng
        ranks = rng.choices(range(shape.keys), cum_weights=self._cumulative, k=shape.events_per_message)
        # Each event counts 1 in every counter of its key's items and of one value's items of each view: count the
        # events per owner first, then write each item once (in the order the events first reach it).
        owners: dict[str, int] = {}
        for rank in ranks:
            key = self._keys.get(rank)
            if key is None:
                key = self._keys[rank] = _key_name(rank, shape.key_bytes)
            owners[key] = owners.get(key, 0) + 1
            # A view's value is an item like a key's (its windows on it, its minutes apart), in the same commit.
            for view, weights in enumerate(self._value_weights):
                value = rng.choices(range(len(weights)), cum_weights=weights)[0]
                owner = view_item_key(f"v{view}", key, (str(value),))
                owners[owner] = owners.get(owner, 0) + 1
        totals = {
            item: dict.fromkeys(item_names, count)
            for owner, count in owners.items()
            for item, item_names in self._items_of(owner)
        }
        return totals, len(ranks)

    def _items_of(self, owner: str) -> tuple[tuple[ItemKey, tuple[str, ...]], ...]:
        """The items an event of ``owner`` counts in, each with the counters it adds there."""
        items = self._items.get(owner)
        if items is None:
            items = self._items[owner] = (
                (owner, self._key_names),
                *((make_item(owner, window, 0, expires), names) for window, expires, names in self._window_items),
            )
        return items


def _cumulative_weights(ranks: int, zipf_s: float) -> Sequence[float]:
    """The running sums of the Zipf weights of ranks 1 to ``ranks`` (``random.choices``' ``cum_weights``)."""
    if zipf_s == 0:
        # Uniform: every weight is 1.0, so the sums are the integers themselves (exact in a float, and so drawn
        # alike): a range, not a list of ten million floats for a traffic of ten million keys.
        return range(1, ranks + 1)
    return list(accumulate(1.0 / rank**zipf_s for rank in range(1, ranks + 1)))


@lru_cache(maxsize=8)
def _drawn(shape: _Shape, seed: int, now_ms: int) -> _Draws:
    return _Draws(shape, seed, now_ms)


def bill_batch(
    messages: Sequence[MessageTotals], resent: int, traffic: Traffic, *, page_bytes: PageBytes = planner_page_bytes
) -> BatchBill:
    """Bill one batch of distinct new messages plus ``resent`` re-sends of messages applied earlier."""
    plan = plan_batch(messages, fenced_apply=traffic.fenced_apply, page_bytes=page_bytes)
    writes = 0.0
    reads = 0.0
    transactions = 0
    batch_gets = 0
    batch_writes = 0
    items = 0
    single_writes = 0
    marker_units = transactional_write_units(MARKER_BYTES)
    header_units = transactional_write_units(HEADER_BYTES)
    records = len(messages) + resent
    if traffic.resend_rate > 0:
        # The gate stays open while re-sends keep meeting markers: every record's marker is read.
        reads += read_units(MARKER_BYTES, consistent=False) * records
        batch_gets += -(-records // BATCH_GET_MAX_KEYS)
    for chunk in plan.direct:
        writes += direct_write_units(chunk.marker_items, _item_units(chunk.increments, traffic))
        transactions += 1
        items += chunk.action_count
    for unit, priced in plan.priced_journals():
        markers = distinct_marker_items(message.message_id for message in unit)
        claims = claim_transactions(markers)
        transactions += claims
        items += markers + claims
        increments, chunks = _journal_pages(unit, priced)
        if traffic.fenced_apply and chunks:
            # The claims, every item read and checked, the pages, the commit alone, each item's fenced write, DONE.
            keys = len(increments)
            reads += read_units(_counter_item_bytes(traffic), consistent=True) * keys
            batch_gets += -(-keys // BATCH_GET_MAX_KEYS)
            writes += fenced_journal_write_units(
                markers,
                _fenced_item_units(increments, traffic),
                [page_bytes(chunk) for chunk in chunks] if priced is None else priced.page_sizes,
            )
            batch_writes += -(-len(chunks) // BATCH_WRITE_MAX_ITEMS)
            single_writes += keys + 2
            items += len(chunks) + keys + 2
            continue
        writes += marker_units * markers + header_units * claims
        if len(chunks) <= 1:
            writes += header_units + _adds(chunks[0] if chunks else {}, traffic)
            transactions += 1
            items += 1 + (len(chunks[0]) if chunks else 0)
            continue
        later = sum(len(chunk) for chunk in chunks[1:])
        reads += read_units(_counter_item_bytes(traffic), consistent=True) * later
        batch_gets += -(-later // BATCH_GET_MAX_KEYS)
        writes += sum(write_units(PAGE_OVERHEAD_BYTES + page_bytes(chunk)) for chunk in chunks)
        batch_writes += -(-len(chunks) // BATCH_WRITE_MAX_ITEMS)
        # commit: header + applied-record + chunk 0; each later chunk: applied-record + ADDs; finish: the header
        # alone, a plain UpdateItem
        writes += 2 * header_units + _adds(chunks[0], traffic)
        writes += sum(header_units + _adds(chunk, traffic) for chunk in chunks[1:])
        writes += write_units(HEADER_BYTES)
        transactions += len(chunks)
        single_writes += 1
        # pages, then the commit's header and applied-record, each later chunk's applied-record, the finish
        items += len(chunks) + sum(len(chunk) for chunk in chunks) + 2 + (len(chunks) - 1) + 1
    return BatchBill(
        records=records,
        events=sum(message.event_count for message in messages),
        write_units=writes,
        read_units=reads,
        transactions=transactions,
        batch_gets=batch_gets,
        batch_writes=batch_writes,
        journal_units=len(plan.journals),
        items=items,
        single_writes=single_writes,
    )


def _adds(increments: Mapping[ItemKey, Mapping[str, object]], traffic: Traffic) -> float:
    return float(TRANSACTION_FACTOR * sum(_item_units(increments, traffic)))


def _journal_pages(
    unit: Sequence[MessageTotals], priced: JournalPrice | None
) -> tuple[Mapping[ItemKey, Mapping[str, Number]], Sequence[Mapping[ItemKey, Mapping[str, Number]]]]:
    """A journal unit's increments and apply chunks (its pages): the planner's when it priced the unit, which are these
    (``bill_batch`` plans with no counter limit, and a chunk's default size is ``MAX_JOURNAL_CHUNK_KEYS``), their
    sizes by the same ``page_bytes``."""
    if priced is not None:
        return priced.increments, priced.pages
    increments = unit_increments(unit)
    return increments, plan_apply_chunks(increments, max_keys=MAX_JOURNAL_CHUNK_KEYS)


def _item_units(increments: Mapping[ItemKey, Mapping[str, object]], traffic: Traffic) -> list[int]:
    """Each item's plain write units (1 per started KB) at its largest."""
    return [write_units(_item_bytes(item, counters, traffic)) for item, counters in increments.items()]


def _fenced_item_units(increments: Mapping[ItemKey, Mapping[str, object]], traffic: Traffic) -> list[int]:
    """Each item's fenced write: 1 unit per KB of the item with its marks (``FENCE_MARKS_PRICED``)."""
    marks = FENCE_MARKS_PRICED * FENCE_MARK_BYTES
    return [write_units(_item_bytes(item, counters, traffic) + marks) for item, counters in increments.items()]


_COUNTER_NAME_BYTES: Final = 8
"""A counter name as priced (the traffic does not say how long its names are)."""
_WINDOW_ATTRIBUTE_BYTES: Final = len("w#h#2026-11-24T19:00Z\x1f") + _COUNTER_NAME_BYTES + WORST_NUMBER_BYTES
"""One counter of an hour held on a key's item (``w#<window id>\x1f<counter>``), at 38 digits."""


def _item_bytes(item: ItemKey, counters: Mapping[str, object], traffic: Traffic) -> int:
    """An item at its largest: keys, expiry, each counter at 38 digits. A key's item holding open windows
    is priced as it grows before its ended windows are moved off it (``MOVE_AT_BYTES`` and one more hour)."""
    windowed = sum(1 for name in counters if name[:1] == WINDOW_COUNTER_MARK)
    if not windowed:
        return _counter_item_bytes(traffic)
    keys = len("pk") + traffic.key_bytes + len("sk") + len("all")
    own = windowed * _WINDOW_ATTRIBUTE_BYTES + (len(counters) - windowed) * (
        len("c#") + _COUNTER_NAME_BYTES + WORST_NUMBER_BYTES
    )
    return max(keys + own, MOVE_AT_BYTES + traffic.counters * _WINDOW_ATTRIBUTE_BYTES)


_MOVED_NUMBER_BYTES: Final = number_size("1" * 14)
"""A window's sum as the moves are priced: 14 digits (8 bytes). Unlike a batch's ADD, a move's cost turns on
how many KB the moved sums fill, and pricing each at 38 digits (20 bytes) priced the day items of workload U
at about twice their measured size (``bench.plan_check --windows``)."""
_MOVED_ATTRIBUTE_BYTES: Final = len("w#h#2026-11-24T19:00Z\x1f") + _COUNTER_NAME_BYTES + _MOVED_NUMBER_BYTES


@cache
def window_moves(traffic: Traffic) -> tuple[float, float]:
    """Write and read units per event of moving ended windows off key items and view items
    (``tally.store.windows``): ``_item_moves`` for the keys, and for each view as if its ``keys x values`` items
    were keys drawn with the traffic's skew (over ``MOVED_ITEMS_PRICED`` of them, the figure for that many scaled
    up: a bound above, as fewer items each meet more of the events)."""
    writes, reads = _item_moves(traffic, traffic.keys)
    for values in traffic.views:
        items = traffic.keys * values
        priced = min(items, MOVED_ITEMS_PRICED)
        more_writes, more_reads = _item_moves(traffic, priced)
        writes += more_writes * items / priced
        reads += more_reads * items / priced
    return writes, reads


def view_read_units(traffic: Traffic, values: int) -> float:
    """Read units of one group-by read of a view with ``values`` values in one window (``tally get KEY --by``, the
    read endpoint's ``?by=``): one consistent ``Query`` of the view's item collection, billed per 4 KB of the
    items it returns together (each at its largest), for a view not spread over shards."""
    return read_units(values * _counter_item_bytes(traffic), consistent=True)


@cache
def _item_moves(traffic: Traffic, items: int) -> tuple[float, float]:
    """Write and read units per event of moving ended windows off ``items`` key items drawn with the traffic's
    skew (``tally.store.windows``).

    Per key and day it is active in: one move at the day's end, or one per ``MOVE_AT_BYTES`` of ended hours
    if more (a key item update plus its day's item, or plus each hour's item when hours are not kept on day
    items), and one check read per active key-hour (one container; each more container reading a key in an
    hour adds one). A month's window moves once, after the month ends: with its last day's move (its own item's
    write added), or alone where no hour or day is counted. A key is active in an hour, a day or a month with
    the probability that the traffic's Zipf draw gives it at least one of that period's events. Zero without
    hour, day or month windows.
    """
    spec = parse_window_spec(",".join(traffic.windows))
    if not any(unit.on_key_item for unit in spec.units):
        return 0.0, 0.0
    per_hour = traffic.events_per_second * 3600
    weights = [1.0 / rank**traffic.zipf_s for rank in range(1, items + 1)]
    total = sum(weights)
    hour_bytes = traffic.counters * _MOVED_ATTRIBUTE_BYTES
    key_bytes = len("pk") + traffic.key_bytes + len("sk") + len("all")
    base = key_bytes + traffic.counters * (len("c#") + _COUNTER_NAME_BYTES + _MOVED_NUMBER_BYTES)
    hours_per_move = max(1, (MOVE_AT_BYTES - base) // hour_bytes)
    key_units = transactional_write_units(MOVE_AT_BYTES + hour_bytes)
    check_units = read_units(MOVE_AT_BYTES + hour_bytes, consistent=True)
    on_days = hours_on_day_items(spec)
    counts_hours = any(unit.name == "hour" for unit in spec.units)
    counts_days = counts_hours or any(unit.name == "day" for unit in spec.units)
    counts_months = any(unit.name == "month" for unit in spec.units)
    month_days = SECONDS_PER_MONTH / 86_400
    month_item_units = transactional_write_units(base)
    writes = reads = 0.0
    for weight in weights:
        p = weight / total
        active_hours = 24 * -math.expm1(per_hour * math.log1p(-p)) if p < 1 else 24.0
        active_day = -math.expm1(24 * per_hour * math.log1p(-p)) if p < 1 else 1.0
        active_month = -math.expm1(month_days * 24 * per_hour * math.log1p(-p)) if p < 1 else 1.0
        reads += active_hours * check_units
        if not counts_days:  # months alone: the key item's update and the month's item, once a month
            writes += active_month / month_days * (key_units + month_item_units)
            continue
        if counts_months:
            writes += active_month / month_days * month_item_units
        moves = max(active_day, active_hours / hours_per_move) if counts_hours else active_day
        if on_days or not counts_hours:
            # The day item grows by each move's hours: on average it holds half the day's when written.
            held = active_hours * hour_bytes * (moves + active_day) / (2 * moves) if moves and counts_hours else 0.0
            targets = moves * transactional_write_units(base + math.ceil(held))
        else:
            targets = active_hours * transactional_write_units(_counter_item_bytes(traffic)) + active_day * (
                transactional_write_units(_counter_item_bytes(traffic)) if "day" in traffic.windows else 0
            )
        writes += moves * key_units + targets
    per_day = 24 * per_hour
    return writes / per_day, reads / per_day


def _counter_item_bytes(traffic: Traffic) -> int:
    """A counter item at its largest: keys, a window id and expiry, every counter at 38 digits."""
    return _counter_item_size(traffic.key_bytes, traffic.counters)


@cache
def _counter_item_size(key_bytes: int, counters: int) -> int:
    # Cached: the bill asks for it once per item written, and it sizes a number each time.
    keys = len("pk") + key_bytes + len("sk") + len("h#2026-11-24T19:00Z")
    expiry = len("expires_at") + number_size("1800000000")
    return keys + expiry + counters * (len("c#") + 8 + WORST_NUMBER_BYTES)


def _key_name(rank: int, width: int) -> str:
    text = str(rank)
    return text.rjust(width, "k") if width > len(text) else text


# ------------------------------------------------------------------------------------------- the bill


@dataclass(frozen=True, slots=True)
class Parameters:
    """The template parameters ``tally plan`` recommends (names as in ``template.yaml``)."""

    source: str
    batch_size: int
    batching_window_s: int
    concurrency: int
    """``MaximumConcurrency`` (SQS) or shards x ``ParallelizationFactor`` (Kinesis)."""
    windows: tuple[str, ...]
    memory_mb: int
    hot_keys: int = 0
    """How many of the most frequent keys to list in ``HotKeys``."""
    hot_key_shards: int = 1
    shards: int = 0
    """Kinesis shards (``StreamMode=PROVISIONED``, ``ShardCount``); 0 for SQS."""
    parallelization_factor: int = 1
    archive: bool = True
    fenced_apply: bool = True

    def as_template(self) -> dict[str, str]:
        """The parameter overrides, as ``sam deploy --parameter-overrides`` takes them."""
        common = {"Windows": ",".join(self.windows), "MemorySize": str(self.memory_mb)}
        if not self.archive:
            common["ArchiveEnabled"] = "false"
        if not self.fenced_apply:
            common["FencedApply"] = "false"
        if self.source == "Kinesis":
            return {
                "Source": "Kinesis",
                "StreamMode": "PROVISIONED",
                "ShardCount": str(self.shards),
                "StreamBatchSize": str(self.batch_size),
                "StreamBatchingWindowSeconds": str(self.batching_window_s),
                "ParallelizationFactor": str(self.parallelization_factor),
                **common,
            }
        return {
            "Source": "SQS",
            "BatchSize": str(self.batch_size),
            "BatchingWindowSeconds": str(self.batching_window_s),
            "MaximumConcurrency": str(self.concurrency),
            **common,
        }


@dataclass(frozen=True, slots=True)
class Bill:
    """A prediction: per event, per batch and per month."""

    traffic: Traffic
    parameters: Parameters
    units: UnitsPerEvent
    records_per_batch: float
    """What a batch holds at this rate: the batch size, or what the batching window gathers first."""
    handler_s: float
    latency_s: float
    invocations_per_month: float
    dynamodb_usd_month: float
    lambda_gb_s_month: float
    lambda_usd_month: float
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    archive_puts_month: float = 0.0
    """Archive objects written a month: one per invocation."""
    archive_gb_month: float = 0.0
    """Archive bytes a month adds (GB), kept in S3 Standard until ``ArchiveTransitionDays``."""
    archive_usd_month: float = 0.0
    """The month's PUTs, and a month of S3 Standard storage for what the month archived."""

    @property
    def events_per_month(self) -> float:
        return self.traffic.events_per_second * SECONDS_PER_MONTH

    @property
    def usd_month(self) -> float:
        return self.dynamodb_usd_month + self.lambda_usd_month + self.archive_usd_month

    @property
    def usd_per_million_events(self) -> float:
        return self.usd_month / self.events_per_month * 1e6

    def as_json(self) -> dict[str, object]:
        """The JSON ``tally plan --json`` prints (schema checked by tests/unit/test_cost_cli.py)."""
        return {
            "traffic": {
                "events_per_second": self.traffic.events_per_second,
                "keys": self.traffic.keys,
                "zipf_s": self.traffic.zipf_s,
                "events_per_message": self.traffic.events_per_message,
                "counters": self.traffic.counters,
                "windows": list(self.traffic.windows),
                "resend_rate": self.traffic.resend_rate,
                "numbered_ids": self.traffic.numbered_ids,
                "source": self.traffic.source,
                "latency_budget_s": self.traffic.latency_budget_s,
                "archive": self.traffic.archive,
                "fenced_apply": self.traffic.fenced_apply,
                "views": list(self.traffic.views),
            },
            "parameters": self.parameters.as_template(),
            "hot_keys": {"top_keys": self.parameters.hot_keys, "shards": self.parameters.hot_key_shards},
            "per_event": {
                "write_units": self.units.write_units,
                "read_units": self.units.read_units,
            },
            "per_batch": {
                "records": self.records_per_batch,
                "events": self.units.events_per_batch,
                "transactions": self.units.transactions_per_batch,
                "single_writes": self.units.single_writes_per_batch,
                "requests": self.units.requests_per_batch,
                "handler_seconds": self.handler_s,
            },
            "per_month": {
                "events": self.events_per_month,
                "dynamodb_usd": self.dynamodb_usd_month,
                "lambda_invocations": self.invocations_per_month,
                "lambda_gb_seconds": self.lambda_gb_s_month,
                "lambda_usd": self.lambda_usd_month,
                "archive_puts": self.archive_puts_month,
                "archive_gb": self.archive_gb_month,
                "archive_usd": self.archive_usd_month,
                "total_usd": self.usd_month,
            },
            "usd_per_million_events": self.usd_per_million_events,
            "latency_seconds": self.latency_s,
            "assumptions": list(self.assumptions),
        }


def price(
    traffic: Traffic,
    batch_size: int,
    *,
    latencies: Latencies = Latencies(),
    prices: Prices = Prices(),
    page_bytes: PageBytes = planner_page_bytes,
    batches: int = 8,
    window_s: int | None = None,
) -> Bill:
    """The bill of ``traffic`` at ``batch_size`` records per invocation.

    The batching window is the one that fills the batch (capped by the template), or ``window_s`` when
    given: what a deployment with those two parameters pays (the template's defaults, for example).
    """
    window_cap = SQS_MAX_WINDOW_S if traffic.source == "SQS" else KINESIS_MAX_WINDOW_S
    size = min(batch_size, MAX_BATCH_RECORDS, max(1, LAMBDA_PAYLOAD_MAX_BYTES // traffic.record_bytes))
    # A Kinesis batch holds one shard's records: it fills at the shard's rate, not the stream's.
    shards = _kinesis_shards(traffic)
    feed = traffic.records_per_second / max(1, shards)
    fill_s = size / feed
    window = 0 if size == 1 else min(window_cap, max(1, math.ceil(fill_s)))
    if window_s is not None:
        window = min(window_cap, window_s)
    records = max(1, min(size, math.floor(feed * window))) if window else 1
    # Enough batches to see the planner's choices, few enough events to answer in about a second.
    batches = max(1, min(batches, SIMULATED_EVENTS // (records * traffic.events_per_message)))
    units = _simulated(traffic, records, batches, page_bytes)
    handler_s = _handler_seconds(units, traffic, latencies)
    invocations_s = traffic.records_per_second * (1 + traffic.resend_rate) / records
    concurrency = max(2, math.ceil(invocations_s * handler_s * 1.5))
    latency = min(window, fill_s) + handler_s
    month = traffic.events_per_second * SECONDS_PER_MONTH
    invocations = invocations_s * SECONDS_PER_MONTH
    gb_s = invocations * handler_s * traffic.memory_mb / 1024
    hot, hot_shards = _hot_keys(traffic, units, math.ceil(invocations_s * handler_s))
    factor = max(1, min(10, math.ceil(concurrency / shards))) if shards else 1
    parameters = Parameters(
        source=traffic.source,
        batch_size=size,
        batching_window_s=window,
        concurrency=shards * factor if traffic.source == "Kinesis" else min(concurrency, 1000),
        windows=traffic.windows,
        memory_mb=traffic.memory_mb,
        hot_keys=hot,
        hot_key_shards=hot_shards,
        shards=shards,
        parallelization_factor=factor,
        archive=traffic.archive,
        fenced_apply=traffic.fenced_apply,
    )
    messages_month = traffic.records_per_second * (1 + traffic.resend_rate) * SECONDS_PER_MONTH
    archive_puts = invocations if traffic.archive else 0.0
    archive_gb = (
        messages_month * (ARCHIVE_BYTES_PER_MESSAGE + ARCHIVE_BYTES_PER_EVENT * traffic.events_per_message) / 1e9
        if traffic.archive
        else 0.0
    )
    assumptions = (
        f"request latencies assumed, not measured on AWS: TransactWriteItems {latencies.transact_write_ms} ms, "
        f"BatchGetItem {latencies.batch_get_ms} ms, BatchWriteItem {latencies.batch_write_ms} ms, UpdateItem "
        f"{latencies.single_write_ms} ms ({latencies.parallel_writes} at once)",
        (
            f"journal batches fenced (FencedApply): each key's item one plain write at 1 write unit per KB, priced "
            f"with {FENCE_MARKS_PRICED} writer marks on it"
            if traffic.fenced_apply
            else "journal batches chunked (FencedApply=false): each key's item in a transaction, 2 units per KB"
        ),
        f"handler CPU as measured by bench.duration on an x86 VM: {latencies.cpu_us_per_request:,.0f} us per "
        f"request, {latencies.cpu_us_per_item} us per item written, {latencies.cpu_us_per_event_item} us per event "
        f"per counter item, at {traffic.memory_mb} MB's vCPU share",
        "every event of a batch falls in one time window (batches span seconds)",
        "a batch is as full as the batching window lets it be; re-sends are settled by the marker read",
        "prices: us-east-1 on demand, Lambda arm64, no free tier",
        "archive: one PutObject per invocation, 58 bytes per message + 7.5 per event gzip'd (measured on two "
        "counters per event), a month of S3 Standard for a month's archive",
    )
    return Bill(
        traffic=traffic,
        parameters=parameters,
        units=units,
        records_per_batch=records,
        handler_s=handler_s,
        latency_s=latency,
        invocations_per_month=invocations,
        dynamodb_usd_month=month * (units.write_units * prices.write_unit + units.read_units * prices.read_unit),
        lambda_gb_s_month=gb_s,
        lambda_usd_month=gb_s * prices.lambda_gb_second + invocations * prices.lambda_request,
        assumptions=assumptions,
        archive_puts_month=archive_puts,
        archive_gb_month=archive_gb,
        archive_usd_month=archive_puts * prices.s3_put_request + archive_gb * prices.s3_gb_month,
    )


@lru_cache(maxsize=256)
def _simulated(traffic: Traffic, records: int, batches: int, page_bytes: PageBytes) -> UnitsPerEvent:
    """``simulate``, once per argument set in a process: ``recommend``, ``floor`` and each lever of
    ``tally plan`` price batch sizes that the batching window caps to the same records per batch (14 of one
    plan's 49 simulations repeated another)."""
    return simulate(traffic, records, batches=batches, page_bytes=page_bytes)


def recommend(
    traffic: Traffic,
    *,
    latencies: Latencies = Latencies(),
    prices: Prices = Prices(),
    page_bytes: PageBytes = planner_page_bytes,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    batches: int = 4,
) -> Bill:
    """The cheapest batch size whose latency fits the budget (the smallest batch if none does)."""
    bills: dict[float, Bill] = {}
    for size in sorted(set(batch_sizes)):
        bill = price(traffic, size, latencies=latencies, prices=prices, page_bytes=page_bytes, batches=batches)
        if bill.records_per_batch in bills:
            break  # the batching window, or the 6 MB payload, caps the batch: larger sizes change nothing
        bills[bill.records_per_batch] = bill
    return _cheapest(list(bills.values()), traffic)


def floor(
    traffic: Traffic,
    *,
    latencies: Latencies = Latencies(),
    prices: Prices = Prices(),
    page_bytes: PageBytes = planner_page_bytes,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    batches: int = 4,
) -> Bill:
    """The floor of ``traffic``: the fewest write units per event any allowed setting reaches.

    Allowed: a batch size of 1 to 10,000 records (``BatchSize``, ``StreamBatchSize``), a batching window
    of 0 to the template's cap (60 s SQS, 300 s Kinesis), each batch cut to Lambda's 6 MB payload, as
    ``price`` fills it at the traffic's rate. The traffic's shape is given (rate, keys, skew, events per
    message, counters, windows, source): the floor is what the consumer's settings can reach for it, so
    it ignores the latency budget (the budget decides how near the floor a user chooses to be). A
    batch's writes fall as it gathers more events per key, so the floor is near the largest batch the
    traffic fills; every size is tried anyway, since the planner's paths (direct, journal) are not
    monotonic in the batch size.
    """
    sizes = sorted({*batch_sizes, MAX_BATCH_RECORDS})
    bills: dict[float, Bill] = {}
    for size in sizes:
        bill = price(traffic, size, latencies=latencies, prices=prices, page_bytes=page_bytes, batches=batches)
        bills.setdefault(bill.records_per_batch, bill)
    return min(bills.values(), key=lambda bill: (bill.units.write_units, bill.latency_s))


def keys_per_message(traffic: Traffic) -> float:
    """Expected distinct keys in one message of ``events_per_message`` events drawn like the traffic.

    The producer library closes a packed message at ``max_keys_per_message`` distinct keys (99 by
    default), so a traffic description with more events per message than that allows needs the
    producer's cap raised (``tally plan`` says so).
    """
    weights = [1.0 / rank**traffic.zipf_s for rank in range(1, traffic.keys + 1)]
    total = sum(weights)
    return float(sum(1.0 - (1.0 - weight / total) ** traffic.events_per_message for weight in weights))


def _cheapest(bills: Sequence[Bill], traffic: Traffic) -> Bill:
    fitting = [bill for bill in bills if bill.latency_s <= traffic.latency_budget_s]
    if not fitting:
        return min(bills, key=lambda bill: bill.latency_s)
    return min(fitting, key=lambda bill: (round(bill.usd_month, 6), bill.parameters.batch_size))


def _handler_seconds(units: UnitsPerEvent, traffic: Traffic, latencies: Latencies) -> float:
    return handler_seconds(
        BatchWork(
            transactions=units.transactions_per_batch,
            batch_gets=units.batch_gets_per_batch,
            batch_writes=units.batch_writes_per_batch,
            items=units.items_per_batch,
            event_items=units.events_per_batch * (1 + len(traffic.windows)),
            single_writes=units.single_writes_per_batch,
        ),
        traffic.memory_mb,
        latencies,
    )


@dataclass(frozen=True, slots=True)
class BatchWork:
    """What one batch's handler does, as the duration model counts it."""

    transactions: float
    batch_gets: float
    batch_writes: float
    items: float
    """Items written: transaction actions and pages (what botocore serialises)."""
    event_items: float
    """Each event once per counter item it lands in (its key's, each view's; all-time and each window)."""
    single_writes: float = 0.0
    """Plain single-item writes (the fenced apply's), sent ``Latencies.parallel_writes`` at a time."""


def handler_seconds(work: BatchWork, memory_mb: int, latencies: Latencies) -> float:
    """Requests one after another (the applier runs a batch's steps in order; single-item writes
    ``Latencies.parallel_writes`` at a time) plus CPU at the memory's share: the CPU follows the requests sent, the
    items written and the events' items, not the records."""
    io_ms = (
        work.transactions * latencies.transact_write_ms
        + work.batch_gets * latencies.batch_get_ms
        + work.batch_writes * latencies.batch_write_ms
        + work.single_writes * latencies.single_write_ms / max(1, latencies.parallel_writes)
    )
    requests = work.transactions + work.batch_gets + work.batch_writes + work.single_writes
    cpu_us = (
        requests * latencies.cpu_us_per_request
        + work.items * latencies.cpu_us_per_item
        + work.event_items * latencies.cpu_us_per_event_item
    )
    share = min(1.0, memory_mb / LAMBDA_FULL_VCPU_MB)
    return io_ms / 1000 + cpu_us / 1e6 / share


def _hot_keys(traffic: Traffic, units: UnitsPerEvent, concurrency: int) -> tuple[int, int]:
    """Keys that most concurrent batches write: their items see conflicting transactions, so shard them.

    ``concurrency`` is how many batches run at once on average. A key of weight p is in a batch of E
    events with probability 1 - (1 - p)**E; when that is over half and batches overlap, concurrent
    transactions meet on its item. Shards: one per concurrent batch (at most 16), and enough to keep
    each shard under a partition's 1,000 units/s.
    """
    if concurrency < 2:
        return 0, 1
    weights = [1.0 / rank**traffic.zipf_s for rank in range(1, traffic.keys + 1)]
    total = sum(weights)
    events = units.events_per_batch
    hot = sum(1 for weight in weights if 1 - (1 - weight / total) ** events > 0.5)
    if hot == 0:
        return 0, 1
    top_rate = weights[0] / total * traffic.events_per_second
    by_rate = math.ceil(top_rate * 2 / PARTITION_WRITE_UNITS_PER_S)
    return hot, max(1, min(16, max(concurrency, by_rate)))


def _kinesis_shards(traffic: Traffic) -> int:
    """Shards a provisioned stream needs for the records and bytes per second (0 for SQS)."""
    if traffic.source != "Kinesis":
        return 0
    records = traffic.records_per_second * (1 + traffic.resend_rate)
    return max(
        1,
        math.ceil(records / KINESIS_SHARD_RECORDS_PER_S),
        math.ceil(records * traffic.message_bytes / KINESIS_SHARD_BYTES_PER_S),
    )
