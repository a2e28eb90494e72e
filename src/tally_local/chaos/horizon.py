"""A TTL sweep, then old and reused numbered ids met past their horizon.

Before the load, per session of ``ChaosConfig.horizon_sessions``, on its own client, through the run's
pipeline wiring (so a broken variant is exercised here too):

1. ``MarkerTtlDays`` + 5 days ago (the virtual clock's now minus that), a journal batch claims seq 0 of a
   numbered session (a packed message of ``HORIZON_KEYS`` keys: more than one transaction holds) together
   with seq 1 (one key), both without ``ts``;
2. now, seq 2 of the same block is counted (one key): the block's expiry moves past now, the old batch's
   journal header does not;
3. TTL's sweep (``tally_local.chaos.ttl.sweep_expired``) deletes every markers-table item whose expiry has passed:
   the old header goes, the block stays (``situation.ttl_swept_items``, ``situation.ttl_headers_swept``);
4. seq 0 comes back unchanged (a redrive without ``ts``, past the horizon) and seq 1's id is reused with
   other content and a fresh ``ts``, in one batch, to a consumer whose marker read gate is open (even
   sessions) or closed (odd ones); failed records are delivered again, as a source would, up to
   ``DELIVERIES`` times (``situation.ttl_old_ids_redelivered``, ``situation.ttl_ids_reused``).

Past its horizon a marker counts as absent, as a marker item TTL deleted would (docs/journal.md, "Past the
horizon"), so each of seq 0's keys must read 2 (counted in step 1 and again in step 4), seq 1's old key 1,
its new key 7, seq 2's key 1, with no record dead-lettered and none failing on every delivery.
``check_past_horizon`` returns what differs, which fails the run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from tally.commit.marker_reads import MarkerReadGate
from tally.core.model import SourceRecord
from tally.reader import CounterReader
from tally_local.chaos.ttl import sweep_expired

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.pipeline import DeadLetterQueue
    from tally.post_commit import ArchiveWriter
    from tally_local.chaos.config import ChaosConfig
    from tally_local.chaos.faults import FaultLog
    from tally_local.chaos.wiring import PipelineFactory, Tables

HORIZON_KEYS: Final = 110
"""Keys of seq 0: with its block's action, more than one transaction's 100 (so a journal batch claims it)."""
DELIVERIES: Final = 5
"""Deliveries of step 4's batch before its records count as failing on every delivery."""
_DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class _Session:
    session: str
    prefix: str

    def message(self, seq: int) -> str:
        return f"{self.session}.{seq}"

    def big_body(self) -> str:
        events = [{"key": f"{self.prefix}:{n:03d}", "delta": 1} for n in range(HORIZON_KEYS)]
        return json.dumps({"id": self.message(0), "events": events})


def _body(message_id: str, key: str, delta: int, ts: int | None = None) -> str:
    return json.dumps({"id": message_id, "key": key, "delta": delta} | ({"ts": ts} if ts is not None else {}))


def run_past_horizon(
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
    """Steps 1 to 4 above for each session; returns what went wrong (empty: every count exact). ``archive`` is
    where its pipelines archive what they count (each message of seq 0 counted twice: two commits)."""
    if config.horizon_sessions <= 0:
        return []
    client = client_factory()
    past_ms = now_ms - (ttl_seconds + 5 * 86_400) * 1000
    sessions = [
        _Session(hashlib.blake2b(f"{config.seed}:horizon:{n}".encode(), digest_size=16).hexdigest(), f"ttl:{n}")
        for n in range(config.horizon_sessions)
    ]
    problems: list[str] = []

    def deliver(records: list[SourceRecord], at_ms: int, gate: MarkerReadGate, what: str) -> None:
        pipeline = pipeline_factory(
            client, tables, dead_letters, config, marker_read_gate=gate, archive=archive, clock=clock
        )
        pending = records
        failure = ""
        for _ in range(DELIVERIES):
            try:
                result = pipeline.process(pending, at_ms, lambda: config.function_timeout_s * 1000)
            except Exception as exc:  # a whole batch failed: the source delivers it again
                failure = f"{type(exc).__name__}: {exc}"
                continue
            if result.dead_letters:
                letters = sorted(letter.record.record_id for letter in result.dead_letters)
                problems.append(f"{what}: dead-lettered {letters}")
            failed = set(result.failed_record_ids)
            pending = [record for record in pending if record.record_id in failed]
            if not pending:
                return
            failure = f"records {sorted(failed)} failed"
        problems.append(f"{what}: still failing after {DELIVERIES} deliveries ({failure})")

    for session in sessions:
        old = [
            SourceRecord(f"{session.prefix}-0", session.big_body(), past_ms),
            SourceRecord(f"{session.prefix}-1", _body(session.message(1), f"{session.prefix}:reused", 1), past_ms),
        ]
        deliver(old, past_ms, MarkerReadGate(), f"{session.prefix} first claim")
        keeper = _body(session.message(2), f"{session.prefix}:keeper", 1)
        deliver([SourceRecord(f"{session.prefix}-2", keeper, now_ms)], now_ms, MarkerReadGate(), session.prefix)
    headers_before = _headers(client, tables.markers)
    # Beside the count swept, so that a run sweeping none says whether step 1 left no header or TTL kept it.
    log.add("situation.ttl_headers_before_sweep", len(headers_before))
    if not headers_before:
        # Nothing of this step deletes a header: something else did, such as an emulator running TTL on its
        # own (DynamoDB Local does, within seconds, on a table with TTL on). The case below is then not built.
        problems.append("steps 1 and 2 left no journal header to sweep: something else deleted it first")
    log.add("situation.ttl_swept_items", sweep_expired(client, tables.markers, now_ms // 1000))
    log.add("situation.ttl_headers_swept", len(headers_before - _headers(client, tables.markers)))
    for index, session in enumerate(sessions):
        fresh = _body(session.message(1), f"{session.prefix}:fresh", 7, now_ms)
        again = [
            SourceRecord(f"{session.prefix}-0-again", session.big_body(), now_ms),
            SourceRecord(f"{session.prefix}-1-reused", fresh, now_ms),
        ]
        gate = MarkerReadGate() if index % 2 == 0 else MarkerReadGate(quiet_batches=0)
        deliver(again, now_ms, gate, f"{session.prefix} past the horizon")
        log.add("situation.ttl_old_ids_redelivered")
        log.add("situation.ttl_ids_reused")
    reader = CounterReader(tables.counters, client=client, hot_keys=config.hot_keys)
    for session in sessions:
        expected = {f"{session.prefix}:{n:03d}": Decimal(2) for n in range(HORIZON_KEYS)} | {
            f"{session.prefix}:reused": Decimal(1),
            f"{session.prefix}:fresh": Decimal(7),
            f"{session.prefix}:keeper": Decimal(1),
        }
        found = {key: counters.value("count") for key, counters in reader.get_many(expected).items()}
        wrong = {key: (found[key], value) for key, value in expected.items() if found[key] != value}
        if wrong:
            examples = sorted(wrong.items())[:3]
            problems.append(f"{session.prefix}: {len(wrong)} keys wrong (read, expected), e.g. {examples}")
    return problems


def _headers(client: DynamoDBClient, table: str) -> set[str]:
    """The ids of the journal headers in the markers table (``b#<batch>``, no ``#`` after the batch id)."""
    found: set[str] = set()
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            item_id = item["id"]["S"]
            if item_id.startswith("b#") and "#" not in item_id[2:]:
                found.add(item_id)
    return found
