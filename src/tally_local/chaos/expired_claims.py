"""Markers TTL deletes between two requests of one invocation: claims of dead batches met after their expiry.

``tally_local.chaos.horizon`` sweeps every expired item at one instant, between invocations. On AWS the sweep
runs at any moment, days after an item's expiry: also between the request that read a marker and the one that
relies on it. Before the load, per case of ``ChaosConfig.expired_claims``, on its own client, through the run's
pipeline wiring (so a broken variant is exercised here too):

1. a journal batch claimed the case's message ``MarkerTtlDays`` + 12 hours ago and died before committing: its
   marker is past its expiry but still there (AWS's TTL deletes late), on an item of its own (``m#``) or on its
   block's (a numbered id); its header is still there, PREPARING with its lease long over, or (claimed two
   days earlier) TTL deleted it already;
2. the message comes again (its id reused with a fresh ``ts``), on an unbounded key (a journal claim replaces
   the marker) or a bounded one (a direct transaction does), to a consumer whose marker read gate is open or
   closed;
3. TTL's sweep (``tally_local.kit.faults.SweepBefore`` with ``tally_local.chaos.ttl.sweep_expired``) runs just
   before the invocation's ``k``-th DynamoDB request, ``k`` drawn from 1 to ``SWEEP_POSITIONS``: before the
   marker read, the header read, the abort, the claim that replaces the marker (on the condition that it still
   names the dead batch), or the commit; failed records are delivered again (without a sweep), as a source
   would, up to ``DELIVERIES`` times.

Whatever request the sweep precedes, the message must count exactly once, with no letter and no record failing
on every delivery: a marker gone is a marker absent (docs/journal.md, "A marker TTL deletes between its read and
its replacement"). ``run_expired_claims`` returns what differs, which fails the run. Counted:
``situation.ttl_expired_claims_met``, ``situation.ttl_swept_between_requests`` (sweeps that deleted something)
and ``situation.ttl_swept_between_a_marker_read_and_its_replacement`` (of those, the ones after which the
invocation still sent a claim replacing the marker the sweep deleted: the case a broken variant needs).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from tally.commit.marker_reads import MarkerReadGate
from tally.core.ledger import Claim
from tally.core.model import SourceRecord
from tally.reader import CounterReader
from tally.store.journal import DynamoDBJournal
from tally.store.schema import LEDGER_ID, header_id
from tally_local.chaos.ttl import sweep_expired
from tally_local.kit.faults import SweepBefore

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.pipeline import BatchPipeline, DeadLetterQueue
    from tally.post_commit import ArchiveWriter
    from tally_local.chaos.config import ChaosConfig
    from tally_local.chaos.faults import FaultLog
    from tally_local.chaos.wiring import PipelineFactory, Tables

SWEEP_POSITIONS: Final = 5
"""The sweep falls before one of the invocation's first 5 requests: the marker read (or a closed gate's first
write), the header read, the abort of an expired lease, the claim replacing the marker, the commit."""
DELIVERIES: Final = 5
"""Deliveries of a case's record before it counts as failing on every delivery."""
BOUNDED_KEY: Final = "seats:expired-{n}"
"""A bounded key of the run's ``COUNTER_BOUNDS`` (``taken`` between 0 and 40): its message is written directly."""
PLAIN_KEY: Final = "expired:{n}"
_DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class _Case:
    number: int
    block: bool
    """The marker is a seq's attribute of its block item (a numbered id), else an item of its own."""
    bounded: bool
    header_gone: bool
    gate_open: bool
    position: int
    """The request (1-based) of the first delivery that TTL's sweep runs just before."""
    seed: int

    @property
    def message_id(self) -> str:
        tag = f"{self.seed}:expired:{self.number}"
        if self.block:
            return hashlib.blake2b(tag.encode(), digest_size=16).hexdigest() + ".3"
        return "expired-" + hashlib.blake2b(tag.encode(), digest_size=8).hexdigest()

    @property
    def key(self) -> str:
        return (BOUNDED_KEY if self.bounded else PLAIN_KEY).format(n=self.number)

    @property
    def counter(self) -> str:
        return "taken" if self.bounded else "count"

    @property
    def dead_batch(self) -> str:
        return hashlib.blake2b(f"{self.seed}:dead:{self.number}".encode(), digest_size=16).hexdigest()


def _cases(config: ChaosConfig) -> list[_Case]:
    rng = random.Random(f"{config.seed}:expired_claims")
    return [
        _Case(
            number=n,
            block=rng.random() < 0.5,
            bounded=rng.random() < 0.5,
            header_gone=rng.random() < 0.5,
            gate_open=rng.random() < 0.5,
            position=rng.randint(1, SWEEP_POSITIONS),
            seed=config.seed,
        )
        for n in range(config.expired_claims)
    ]


def run_expired_claims(
    config: ChaosConfig,
    client_factory: Callable[[], DynamoDBClient],
    tables: Tables,
    pipeline_factory: PipelineFactory,
    *,
    dead_letters: DeadLetterQueue,
    log: FaultLog,
    now_ms: int,
    ttl_seconds: int,
    archive: ArchiveWriter | None = None,
    clock: Callable[[], int] | None = None,
) -> list[str]:
    """Steps 1 to 3 above for each case, one after another; returns what went wrong (empty: every count exact).
    ``archive`` is where its pipelines archive what they count (the run's archive check recounts it)."""
    cases = _cases(config)
    if not cases:
        return []
    client = client_factory()
    sweeper = SweepBefore(client, partial(sweep_expired, client_factory(), tables.markers, now_ms // 1000))
    sent: list[tuple[str, dict[str, Any]]] = []
    client.meta.events.register("before-call.dynamodb", partial(_record, sent))
    journal = DynamoDBJournal(client, tables.counters, tables.markers, ttl_seconds)
    problems: list[str] = []
    for case in cases:
        claimed_ms = now_ms - ttl_seconds * 1000 - (2 * _DAY_MS if case.header_gone else _DAY_MS // 2)
        journal.open(case.dead_batch, claimed_ms + 60_000, [Claim(case.message_id)], claimed_ms)
        if case.header_gone:  # TTL deleted the header first; the marker, expired too, is still there
            client.delete_item(TableName=tables.markers, Key={LEDGER_ID: {"S": header_id(case.dead_batch)}})
        gate = MarkerReadGate() if case.gate_open else MarkerReadGate(quiet_batches=0)
        pipeline = pipeline_factory(
            client, tables, dead_letters, config, marker_read_gate=gate, archive=archive, clock=clock
        )
        body = json.dumps({"id": case.message_id, "key": case.key, "deltas": {case.counter: 1}, "ts": now_ms})
        record = SourceRecord(f"expired-{case.number}", body, now_ms)
        log.add("situation.ttl_expired_claims_met")
        swept_before = len(sweeper.swept)
        sent.clear()
        sweeper.arm(case.position)
        failure = _deliver(pipeline, record, now_ms, config, problems)
        sweeper.disarm()
        if any(sweep.deleted for sweep in sweeper.swept[swept_before:]):
            log.add("situation.ttl_swept_between_requests")
            # The sweep ran just before request ``position``: a claim replacing the marker sent from then on
            # replaced one the invocation had read before it and TTL has deleted since.
            if any(_replaces_a_marker(operation, request) for operation, request in sent[case.position - 1 :]):
                log.add("situation.ttl_swept_between_a_marker_read_and_its_replacement")
        if failure:
            problems.append(f"{_describe(case)}: still failing after {DELIVERIES} deliveries ({failure})")
    reader = CounterReader(tables.counters, client=client)
    found = reader.get_many([case.key for case in cases])
    for case in cases:
        value = found[case.key].value(case.counter)
        if value != Decimal(1):
            problems.append(f"{_describe(case)}: {case.key} reads {value}, not 1")
    return problems


def _deliver(
    pipeline: BatchPipeline, record: SourceRecord, now_ms: int, config: ChaosConfig, problems: list[str]
) -> str:
    """Deliver ``record`` until it is settled, as a source would; the last failure, or "" once settled."""
    failure = ""
    for _ in range(DELIVERIES):
        try:
            result = pipeline.process([record], now_ms, lambda: config.function_timeout_s * 1000)
        except Exception as exc:  # a whole batch failed: the source delivers it again
            failure = f"{type(exc).__name__}: {exc}"
            continue
        if result.dead_letters:
            problems.append(f"{record.record_id}: dead-lettered as {result.dead_letters[0].rejection.code}")
        if not result.failed_record_ids:
            return ""
        failure = "its record failed"
    return failure


def _record(sent: list[tuple[str, dict[str, Any]]], model: Any, params: dict[str, Any], **_: Any) -> None:
    """Keep each request of the section's client (operation, body), in order."""
    sent.append((model.name, json.loads(params.get("body") or b"{}")))


def _replaces_a_marker(operation: str, request: dict[str, Any]) -> bool:
    """Whether a request is a transaction replacing a marker: it checks the replaced batch's header (ABORTED or
    gone, ``tally.store.actions.replaced_batch_check``)."""
    return operation == "TransactWriteItems" and any(
        "attribute_not_exists" in action.get("ConditionCheck", {}).get("ConditionExpression", "")
        for action in request.get("TransactItems", [])
    )


def _describe(case: _Case) -> str:
    marker = "block" if case.block else "own"
    path = "bounded direct" if case.bounded else "journal claim"
    header = "header gone" if case.header_gone else "lease over"
    gate = "gate open" if case.gate_open else "gate closed"
    return (
        f"expired claim {case.number} ({marker} marker, {path}, {header}, {gate}, sweep before request {case.position})"
    )
