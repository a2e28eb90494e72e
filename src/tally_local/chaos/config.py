"""What a chaos run does: the size of the load, the consumers, and the rate of every fault, by kind.

Two presets: ``SMOKE`` (seconds, in the test suite) and ``FULL`` (the published figures, at least 100,000
events and 1,000 faults). Every field can be changed from the command line (``python -m tally_local.chaos``).
Rates are probabilities per opportunity: per DynamoDB request for the store faults (per journal claim
transaction for the kill after a claim and the claim lost near the deadline), per invocation for a
crash after commit, per delivered message for a visibility-timeout expiry, per batch for a Kinesis
checkpoint rewind, per dead letter for a refusal by the dead-letter queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tally.config import DEFAULT_WRITE_CONCURRENCY
from tally_local.chaos.patterns import COUNTER_BOUNDS, COUNTER_DEFAULTS, COUNTER_VIEWS
from tally_local.esm import RetryCadence


@dataclass(frozen=True, slots=True)
class DynamoDBFaultRates:
    """Per-request probabilities of each store fault (at most one fault per request)."""

    connect_failure: float = 0.02
    """The request never reaches DynamoDB (a connection error raised before sending)."""
    lost_response: float = 0.03
    """DynamoDB commits the request, the response is lost; botocore's own retries are bypassed."""
    throttle_request: float = 0.02
    """The whole request is refused with ``ProvisionedThroughputExceededException``."""
    throttle_cancel: float = 0.015
    """A transaction is cancelled with a ``ThrottlingError`` reason on one action."""
    conflict: float = 0.03
    """A transaction is cancelled with ``TransactionConflict`` on one action."""
    slow: float = 0.02
    """The response comes back near (or past) the Lambda deadline: ``remaining_ms`` shrinks."""
    slow_fenced_write: float = 0.01
    """``slow`` for a fenced journal write (``tally.core.fence``: one plain ``UpdateItem`` per item, where the chunked
    path sends one transaction for up to 98 items), at ``slow``'s rate: a batch of a hundred items then nearly always
    meets one and stops there, and the invocations after it must carry its progress on (a finisher reads the items'
    marks and sends only the parts still missing) for the batch to finish before the run ends. Half ``slow``'s
    rate here (the smoke run: each stop costs a redelivery and a finisher, which doubled the smoke run's CPU at the
    full rate; a dozen draws a run still), the full run at ``slow``'s."""
    kill_after_claim: float = 0.05
    """Per journal claim transaction (``open`` or ``claim``): it commits, then the invocation is killed
    before its batch commits; the source redelivers the batch after the visibility timeout or retry."""
    lost_claim_near_deadline: float = 0.15
    """Per journal claim transaction after a batch's first: it commits, its answer is lost, and the
    invocation has just more than the applier's reserve left, so the retries stop."""
    kill_before_gauges: float = 0.05
    """Per invocation that writes gauges (``UpdateItem`` of ``tally.store.gauges``), at its first: the
    invocation is killed before it is sent, so the messages are counted and their gauges are not written
    until the redelivery."""
    kill_before_members: float = 0.05
    """Per invocation that writes members (``tally.store.distinct``), at its first transaction: the
    invocation is killed before it is sent, so the messages count and their distinct members are not
    written until the redelivery."""
    kill_before_window_transfer: float = 0.1
    """Per invocation that moves ended windows off key items (``tally.store.windows``), at its first move
    transaction: the invocation is killed after its commit and its key items' read, before the move is sent;
    the windows stay on the key items (still read exactly) until a later batch or the final close."""
    late_event_race: float = 0.2
    """Per window-move transaction: a late event changed a moved attribute between the move's read and its
    transaction (the condition's value is made stale, so DynamoDB refuses it with the item as it is): the move
    must re-plan from the returned item and move the new value, exactly once."""
    kill_after_fenced_write: float = 0.05
    """Per invocation that sends fenced journal writes (plain ``UpdateItem``s of one item part carrying its epoch's
    mark, ``tally.core.fence``), at its first: it is killed once its n-th is sent, n drawn from 1 to 64 (every n, an
    owner's or a finisher's), so the batch stays FENCED with some items written until whoever meets its markers
    finishes it."""
    unprocessed_keys: float = 0.05
    """Per ``BatchGetItem`` of two keys or more: DynamoDB answers part of it and leaves the rest in
    ``UnprocessedKeys`` (HTTP 200: botocore does not retry it), and does the same to this consumer's next
    0-11 ``BatchGetItem`` calls, as a throttled partition would; enough in a row to exhaust the read loop's
    rounds, which must then fail as retryable rather than spin."""

    def total(self) -> float:
        return (
            self.connect_failure
            + self.lost_response
            + self.throttle_request
            + self.throttle_cancel
            + self.conflict
            + self.slow
        )


@dataclass(frozen=True, slots=True)
class ArchiveFaultRates:
    """Per-``PutObject`` probabilities of each fault of the archive's writes (S3, ``tally.archive_writer``)."""

    connect_failure: float = 0.02
    """The write never reaches S3 (a connection error raised before sending)."""
    lost_response: float = 0.03
    """S3 stores the object, the answer is lost: the step writes it again under the same key."""
    throttle: float = 0.03
    """S3 answers ``SlowDown`` (503): nothing stored."""
    kill_before_archive: float = 0.05
    """Per invocation that archives, at its write: the invocation is killed after its commit, before the
    archive write is sent; the redelivery meets the markers and must archive every message then."""


@dataclass(frozen=True, slots=True)
class DeliveryFaultRates:
    """How the event sources misbehave (all within their documented at-least-once semantics)."""

    crash_after_commit: float = 0.04
    """Per invocation: the handler returned, its response is lost, the whole batch is delivered again."""
    visibility_expiry: float = 0.02
    """Per SQS message received: its visibility timeout expires while in flight; another consumer gets it."""
    kinesis_rewind: float = 0.05
    """Per Kinesis batch: the shard restarts from an older checkpoint (a lease moved to another worker)."""
    dlq_refusal: float = 0.02
    """Per dead letter: the dead-letter queue refuses it; the record is reported failed and redelivered."""
    restart_after_kill: float = 0.5
    """Per killed invocation: Lambda starts a new execution environment for the consumer's next invocation (a new
    pipeline: a new writer epoch, marks and headers seen forgotten, a new pool of write threads); otherwise the
    container lives on (its epoch ended by the protocol itself)."""


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One chaos run; ``seed`` fixes the load, the delivery choices and each consumer's fault sequence."""

    name: str
    seed: int = 7
    events: int = 100_000
    """Valid events to publish (the load is generated until it holds at least this many)."""
    keys: int = 120
    packed_share: float = 0.3
    """Share of valid messages that are packed (2 to ``max_packed_events`` events in one message)."""
    max_packed_events: int = 60
    resend_share: float = 0.05
    """Share of valid messages the producer sends again under the same id, in a new message."""
    respell_share: float = 0.3
    """Share of those re-sends that spell the same content differently (still duplicates, not conflicts)."""
    reuse_share: float = 0.01
    """Share of valid messages whose id another message reuses with other content (an ``id_conflict``)."""
    numbered_share: float = 0.5
    """Share of the ordinary valid messages sent by producers that number their ids (``<session>.<seq>``,
    the producer library's default: markers shared by 16 consecutive seqs), from
    ``numbered_sessions`` sessions; the others keep ids of their own."""
    numbered_sessions: int = 3
    poison_share: float = 0.02
    """Poison messages per valid message."""
    doomed: int = 5
    """Valid messages injected as unrecoverable: each would push a counter out of DynamoDB's Number range."""
    wide_keys: int = 4
    """Keys that get hundreds of counter names: more than one ADD's 4 KB expression holds."""
    wide_messages: int = 24
    """Messages of 100 counters (the per-event maximum) on a wide key; every third is packed (4 events,
    400 names in one message). Four single ones on one key are already 400 names on one item."""
    split_pairs: int = 12
    """Pairs of packed messages of 56 keys each, sharing one (``u:<pair>:hub``): in one batch, a unit of 113
    actions that the planner splits into two direct transactions sharing an item, which must never be in
    flight together (on AWS they conflict)."""
    long_decimals: int = 12
    """Messages adding a 37-digit decimal to the hot key: its shards' sum needs more than 28 digits."""
    precision_doomed: int = 5
    """Valid packed messages injected as unrecoverable because a sum needs more than 38 digits: a setup
    message stores 1E+20, the doomed message adds 1E-20 to it after 40 other keys, so in a later journal
    apply chunk."""
    counter_defaults: str = COUNTER_DEFAULTS
    """The run's ``CounterDefaults``: start values and default deltas the pattern messages use."""
    pattern_keys: int = 8
    """Keys per pattern (``stock:``, ``views:``, ``g:``): few, so that batches meet them often."""
    stock_messages: int = 600
    """Messages on ``stock:`` keys (start 100, default delta -1), some packed, some with ``views:`` events."""
    gauge_messages: int = 600
    """Messages with ``max``/``min``/``latest`` gauges on ``g:`` keys, some packed, some with no deltas."""
    counter_bounds: str = COUNTER_BOUNDS
    """The run's ``CounterBounds``: ``seats:`` keys' ``taken`` between 0 and 40."""
    bounded_messages: int = 600
    """Messages stepping a bounded counter (some packed with a second seat or an unbounded key)."""
    digit_bound_steps: int = 12
    """Bounded messages stepping a ``seats:`` counter by a 36-digit amount (half packed with an ordinary step on
    another seat): their condition's value, the ceiling minus the step, needs 39 digits unless it is rounded to a
    storable number; each must be refused ``above_ceiling``, never ``counter_out_of_range``."""
    distinct_messages: int = 600
    """Messages naming distinct-count members on ``page:`` keys (viewers of 80, countries of 12)."""
    refused_keys: int = 1
    """``g:`` keys and ``page:`` keys (this many of each, drawn by the seed) whose gauge and member writes
    DynamoDB refuses for good, as it does for a key item at its 400 KB limit: their messages must count and
    be in the DLQ as ``gauge_refused``/``members_refused``, and the batches around them must not fail
    (``--refused-keys``)."""
    view_messages: int = 600
    """Messages on ``v:`` keys (``pattern_keys`` of them) whose events carry a customer and a route, counted under the
    views ``counter_views`` declares; a third packed, half their ``ts`` in the previous day (moved windows)."""
    counter_views: str = COUNTER_VIEWS
    """The run's ``CounterViews``: ``v:`` keys per customer, per route, per customer and route."""
    reset_messages: int = 400
    reset_keys: int = 8
    """``r:`` keys: a key with a record Kinesis gave up and replayed is left unjudged, so have several."""
    """Messages on ``r:`` keys' ``level`` (one in eight a reset, some corrections), on Kinesis only."""
    closed_gate_consumers: int = 1
    """Consumers per source in a warm container whose marker read gate has closed (it never reads)."""
    chunked_consumers: int = 1
    """Consumers per source (the last ones) whose container applies journal batches by chunk transactions with
    applied-records (the fenced apply's setting off); the others are fenced (``tally.core.fence``, the default).
    Both on the same keys: a fleet in the middle of a deploy, or rolled back by the setting, each finishing the
    other's batches. 0: every container fenced; at least the consumers' count: none."""
    sqs_share: float = 0.5
    sqs_consumers: int = 3
    sqs_batch_size: int = 10
    kinesis_shards: int = 3
    kinesis_batch_size: int = 150
    """Large enough for journal units of more than 99 messages (two claim transactions)."""
    max_receive_count: int = 5
    """SQS redrive policy (template default): receives before a message moves to the DLQ."""
    kinesis_max_retries: int = -1
    """StreamMaximumRetryAttempts (template default: -1, no count; the record's age bounds the retries)."""
    kinesis_max_record_age_s: int = 21_600
    """StreamMaximumRecordAgeSeconds (template default)."""
    kinesis_retry_cadence: str = RetryCadence.BACKOFF.value
    """How soon a failing Kinesis batch comes again (``tally_local.esm.RetryCadence``: AWS documents no backoff):
    ``backoff`` (assumed: a poll, doubling to a minute) or ``every poll`` (the fastest cadence AWS allows)."""
    function_timeout_s: int = 60
    """FunctionTimeoutSeconds (template default); the SQS visibility timeout follows the template's mapping."""
    redrives: int = 2
    extra_redrives: int = 3
    """More redrives, only while the DLQ still holds messages the redrive policy moved there (no reason code):
    a message whose receives kept failing lands there after ``maxReceiveCount`` even if it was counted (or, for
    poison, before its letter could be sent), as on AWS, and an operator redrives those again (not the letters
    with reasons); a valid message still there after these, or poison without its reason, fails the run."""
    hot_keys: str = "hot:*=4"
    window_messages: int = 60
    """Messages on ``win:`` keys whose events' ``ts`` lie in the previous UTC day: their ended hour and day
    windows are moved off the key items during the run; every window is checked after a final close."""
    window_keys: int = 3
    windows: str = "hour,day"
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY
    """A round's item-disjoint direct transactions in flight at once, as the handler's default."""
    window_retention: str = "minute=7,hour=90,day=0"
    dynamodb: DynamoDBFaultRates = field(default_factory=DynamoDBFaultRates)
    delivery: DeliveryFaultRates = field(default_factory=DeliveryFaultRates)
    archive: bool = True
    """Every consumer archives what it counts to an S3 bucket (moto's server), which the run recounts at the end
    and compares with every counter, window, gauge and distinct count (``tally_local.chaos.archive``)."""
    archive_faults: ArchiveFaultRates = field(default_factory=ArchiveFaultRates)
    jepsen_interval_s: float = 0.02
    """Least pause between two sampled counter reads of the Jepsen-style monitor, which reads once each time the
    sources' ledger has moved (``tally_local.chaos.ledger``)."""
    series_read_interval_s: float = 0.01
    """How long the series-read monitor waits for a held window move before it reads a key a batch has just
    started to write (once per move of the ledger; ``tally_local.chaos.window_reads``)."""
    horizon_sessions: int = 2
    """Numbered sessions whose old journal claims a TTL sweep leaves behind on kept block items, then met by a
    redrive without ``ts`` and by a reused id (``tally_local.chaos.horizon``)."""
    expired_claims: int = 24
    """Messages whose marker names a journal batch that died ``MarkerTtlDays`` ago or more, met again while TTL
    sweeps expired items just before a drawn request of that invocation (``tally_local.chaos.expired_claims``):
    own or block marker, journal claim or bounded direct marker, header there or gone, gate open or closed."""
    bounded_sessions: int = 40
    """Producer sessions (numbered ids) that publish a big packed message (more than 99 counter items: 120
    keys, or with minute windows 60 keys over two minutes) then ``session_sales`` bounded sales, all under
    one partition key right after each other: their markers share a block item, and every other sale also
    shares a key with the big message. A kill after the big message's claim redelivers it beside the sales
    (a sale must never ride the journal, whose ADDs carry no bound; the big message must never be
    refused for its size because a sale shares its block)."""
    session_sales: int = 4
    kinesis_big_messages: int = 8
    """Packed messages of 100 keys of their own, published first on one Kinesis partition key: journal units,
    one after another in one shard's first batch, so that ``kill_after_claim`` draws on claims of Kinesis records
    (a crash whose lease the shard's retries must wait out: docs/explanation/sources.md)."""
    fenced_messages: int = 300
    """Packed messages of 100 keys each, all drawn from 120 (``hot:0`` in every one), published anywhere on both
    sources: journal units applied by fenced and chunked containers at once on the same items (marks of several epochs
    on one item, finishers of each other's batches, prunes; ``tally_local.chaos.workload``)."""
    claim_units: int = 1
    """Runs of 200 messages, each with an id of its own, all on one key (``claims:<n>``), published first on
    one Kinesis partition key: the first batch of that shard (250 records in the smoke run), or its first
    bisected half, is one journal unit of more than 99 marker items, so it sends a ``claim`` transaction
    after its ``open``, which ``lost_claim_near_deadline`` draws on. Without them a run's claims came only by
    chance (a few a run, sometimes none)."""


# The template's QueueVisibility mapping: visibility timeout (s) per function timeout (s).
VISIBILITY_TIMEOUT_S = {15: 150, 30: 240, 60: 420, 120: 780, 300: 1860, 600: 3660, 900: 5460}

FULL = ChaosConfig(name="full")
SMOKE = ChaosConfig(
    name="smoke",
    events=2_500,
    keys=30,
    packed_share=0.2,
    max_packed_events=20,
    poison_share=0.05,
    reuse_share=0.03,
    doomed=2,
    sqs_consumers=2,
    kinesis_shards=2,
    kinesis_batch_size=250,
    sqs_share=0.3,
    # A quarter numbered: at this size half would put a batch's numbered messages in a few dozen blocks, and
    # journal units would rarely need a second claim (the lost_claim_near_deadline fault draws on those).
    numbered_share=0.25,
    precision_doomed=2,
    pattern_keys=4,
    stock_messages=60,
    gauge_messages=60,
    bounded_messages=80,
    digit_bound_steps=4,
    distinct_messages=60,
    view_messages=60,
    reset_messages=60,
    window_messages=150,
    window_keys=10,
    dynamodb=DynamoDBFaultRates(
        connect_failure=0.03,
        lost_response=0.05,
        throttle_request=0.03,
        throttle_cancel=0.02,
        conflict=0.04,
        slow=0.02,
        slow_fenced_write=0.02,
        kill_after_claim=0.15,
        lost_claim_near_deadline=0.7,
        kill_before_gauges=0.1,
        kill_before_members=0.1,
        kill_before_window_transfer=0.3,
        kill_after_fenced_write=0.4,
    ),
    delivery=DeliveryFaultRates(crash_after_commit=0.08, visibility_expiry=0.04, kinesis_rewind=0.3, dlq_refusal=0.05),
    archive_faults=ArchiveFaultRates(connect_failure=0.04, lost_response=0.05, throttle=0.05, kill_before_archive=0.1),
    bounded_sessions=4,
    expired_claims=12,
    kinesis_big_messages=4,
    fenced_messages=8,
)
PRESETS = {"smoke": SMOKE, "full": FULL}

SECTIONS: dict[str, int | float] = {
    "doomed": 0,
    "precision_doomed": 0,
    "poison_share": 0.0,
    "reuse_share": 0.0,
    "wide_keys": 0,
    "wide_messages": 0,
    "split_pairs": 0,
    "long_decimals": 0,
    "stock_messages": 0,
    "gauge_messages": 0,
    "bounded_messages": 0,
    "digit_bound_steps": 0,
    "distinct_messages": 0,
    "view_messages": 0,
    "reset_messages": 0,
    "refused_keys": 0,
    "window_messages": 0,
    "horizon_sessions": 0,
    "expired_claims": 0,
    "bounded_sessions": 0,
    "claim_units": 0,
    "fenced_messages": 0,
    "kinesis_big_messages": 0,
    "archive": False,
}
"""The load's sections beyond plain counter messages (and their re-sends), each off: what ``focused`` starts from.
The archive is one: each consumer's writes to a moto server under the archive's faults, and the recount against
the tables at the end, were a third of a focused run's CPU (0.7 s of 2.5) for runs proving something else; a
focused run names ``archive=True`` when the archive is its situation or part of the wiring it must hold in
(``ChaosConfig.archive``: the template's default, ``ArchiveEnabled=true``; off, ``false``)."""


FOCUSED_EVENTS = 100
"""Plain events a focused run draws unless told: enough for batches around the section it names (the tests' focused
runs use 20 to 400; 2,000 where the situation itself is made of plain events, multi-chunk journal batches)."""


def focused(config: ChaosConfig, events: int = FOCUSED_EVENTS, **sections: object) -> ChaosConfig:
    """``config``'s faults and consumers over ``events`` plain events, with only the ``sections`` named here
    drawn (``focused(SMOKE, distinct_messages=60)``): a run for the one situation a test proves, which
    ``config`` itself draws among every other. docs/testing.md says how to find the smallest size that still
    draws the situation and fails the broken variant."""
    return replace(config, events=events, **(SECTIONS | sections))  # type: ignore[arg-type]


FENCED = focused(FULL, name="fenced", fenced_messages=FULL.fenced_messages)
"""The full run's faults and consumers (a fenced and a chunked container per source) with only its fenced messages and
100 plain events: the fenced apply's situations at the full run's size, for a run of them alone
(``python -m tally_local.chaos --config fenced``)."""
PRESETS["fenced"] = FENCED
