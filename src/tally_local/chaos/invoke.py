"""One consumer: a pipeline wired like production, invoked the way Lambda invokes the handlers.

Each invocation does what ``tally.handlers.sqs`` / ``tally.handlers.kinesis`` do (read the clock once, turn
the Lambda event into records with the real ``tally.sources`` code, ``BatchPipeline.process``, build the
partial batch response) and then hands the answer to the event source mapping's reading of it
(``tally_local.esm.read_response``). The handlers' own modules are not called because they
build one cached pipeline per process from the environment; here every consumer needs its own client to
inject its own faults.

What can go wrong in an invocation, as Lambda sees it:

- the handler raised: a function error (a ``TallyError`` is tally failing a batch on purpose; anything else,
  and ``UnsettledMessagesError``, tally's own report of a message it lost track of, is an unexpected error,
  which fails the chaos run);
- the invocation was killed at its deadline (``InvocationKilled``), or returned after it;
- a crash after commit: the handler returned, but its answer never reached the event source mapping.

In all three cases the whole batch counts as failed.

Each consumer is one warm container: its pipeline (and its ``MarkerReadGate``) lives for the whole run.
It also counts the situations at the journal's edges as they happen (``situation.*``): invocations whose gate is
closed, and records of an invocation killed between a journal claim and the commit when they come back
(after the lease ended, and to a consumer whose gate is closed).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tally.commit.applier import RetryPolicy
from tally.errors import TallyError, UnsettledMessagesError
from tally.sources import kinesis as kinesis_source
from tally.sources import sqs as sqs_source
from tally_local.chaos.clock import Invocation
from tally_local.chaos.faults import InvocationKilled
from tally_local.esm import BatchOutcome, function_error, read_response

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Mapping, Sequence

    from tally.commit.marker_reads import MarkerReadGate
    from tally.core.model import DeadLetter, SourceRecord
    from tally.pipeline import BatchPipeline, BatchResult
    from tally_local.chaos.clock import VirtualClock
    from tally_local.chaos.faults import DynamoDBChaos, FaultLog
    from tally_local.chaos.ledger import MessageTrail

_HEX_ID = re.compile(r"[0-9a-f]{22,32}")
"""Journal batch ids in error messages (22 to 32 hex characters), replaced so that equal errors are counted together."""
LEASE_MARGIN_MS = RetryPolicy().lease_margin_ms


class KilledClaims:
    """Bodies of records whose invocation was killed between a journal claim and the commit -> when."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._killed_ms: dict[str, int] = {}

    def add(self, bodies: Sequence[str], now_ms: int) -> None:
        with self._lock:
            for body in bodies:
                self._killed_ms.setdefault(body, now_ms)

    def holds(self, bodies: Sequence[str]) -> set[str]:
        """Those of ``bodies`` killed before and not yet reported redelivered (without reporting them)."""
        with self._lock:
            return {body for body in bodies if body in self._killed_ms}

    def take(self, bodies: Sequence[str]) -> list[int]:
        """The kill times of those of ``bodies`` killed before (each is reported once)."""
        with self._lock:
            return [self._killed_ms.pop(body) for body in bodies if body in self._killed_ms]


def _message_id(record: SourceRecord) -> str | None:
    """The id a record's body names (None: not a JSON object naming one by a string, as poison may be)."""
    try:
        parsed = json.loads(_text(record))
    except (ValueError, RecursionError):
        return None
    found = parsed.get("id") if isinstance(parsed, dict) else None
    return found if isinstance(found, str) else None


def _text(record: SourceRecord) -> str:
    body = record.body
    return body if isinstance(body, str) else body.decode("utf-8", "surrogateescape")


@dataclass
class Consumer:
    name: str
    pipeline: BatchPipeline
    chaos: DynamoDBChaos
    clock: VirtualClock
    log: FaultLog
    rng: random.Random
    timeout_ms: int
    crash_after_commit: float
    unexpected: list[BaseException]
    gate: MarkerReadGate
    """The marker read gate of this consumer's applier (a warm container's: it may close)."""
    killed: KilledClaims
    _bodies: tuple[str, ...] = ()
    sessions: Mapping[str, tuple[str, bool]] = field(default_factory=dict)
    """The bounded sessions' messages (``Workload.sessions``): body -> (session, whether the big one)."""
    minute_windows: bool = False
    """The run counts minute windows (the situations of the bounded sessions say so)."""
    restart: Callable[[BatchPipeline], BatchPipeline] | None = None
    """The pipeline of a new execution environment (a new writer epoch, nothing remembered), from the old one's."""
    restart_after_kill: float = 0.0
    """Per killed invocation: the chance that the next one runs in a new execution environment (``restart``)."""
    trail: MessageTrail | None = None
    """Where each record's delivery and its end are noted (the archive's verdict names messages with them)."""
    _records: Sequence[SourceRecord] = ()
    _result: BatchResult | None = None

    def invoke_sqs(self, event: dict[str, Any], record_ids: Sequence[str]) -> BatchOutcome:
        def handle() -> object:
            invocation = self._begin()
            records = sqs_source.records_from_event(event)
            self._observe(records)
            result = self.pipeline.process(records, self.clock.now_ms(), invocation.remaining_ms)
            self._record(result)
            return {"batchItemFailures": [{"itemIdentifier": rid} for rid in result.failed_record_ids]}

        return self._invoke(handle, record_ids)

    def invoke_kinesis(self, event: dict[str, Any], record_ids: Sequence[str]) -> BatchOutcome:
        def handle() -> object:
            invocation = self._begin()
            records = kinesis_source.records_from_event(event)
            self._observe(records)
            result = self.pipeline.process(records, self.clock.now_ms(), invocation.remaining_ms)
            self._record(result)
            if getattr(result, "stalls", ()):  # each retry met while a lease holds records is one Lambda spends
                self.log.add("situation.kinesis_invocations_held_by_a_lease")
            return kinesis_source.failure_report(result.failed_record_ids)

        return self._invoke(handle, record_ids)

    def _observe(self, records: Sequence[SourceRecord]) -> None:
        """Count the situations at the journal's edges this invocation meets, before it runs."""
        self._bodies = tuple(_text(record) for record in records)
        self._records = records
        closed = not self.gate.is_open
        if closed:
            self.log.add("situation.gate_closed_invocations")
        now_ms = self.clock.now_ms()
        self._observe_sessions()
        for killed_ms in self.killed.take(self._bodies):
            self.log.add("situation.claim_killed_redelivered")
            if now_ms > killed_ms + self.timeout_ms + LEASE_MARGIN_MS:
                self.log.add("situation.claim_killed_redelivered_after_lease")
            if closed:
                self.log.add("situation.claim_killed_redelivered_gate_closed")

    def _observe_sessions(self) -> None:
        """Count the bounded sessions' situations: a big message in one batch with sales of its own
        session (their markers share a block item), and the same after a kill between its claim and commit."""
        if not self.sessions:
            return
        killed = self.killed.holds(self._bodies)
        sales: set[str] = set()
        bigs: dict[str, str] = {}
        for body in self._bodies:
            known = self.sessions.get(body)
            if known is None:
                continue
            if known[1]:
                bigs[known[0]] = body
            else:
                sales.add(known[0])
        suffix = "_minute_windows" if self.minute_windows else ""
        for session, body in bigs.items():
            if session not in sales:
                continue
            self.log.add(f"situation.session_big_beside_its_bounded_sales{suffix}")
            if body in killed:
                self.log.add(f"situation.session_big_killed_after_claim_redelivered_beside_its_bounded_sales{suffix}")

    def _record(self, result: BatchResult) -> None:
        """The batch's own figures (what the handlers publish as metrics), summed over the run."""
        self._result = result
        figures = {
            "messages_applied": result.figures["MessagesApplied"],
            "already_applied": result.figures["DuplicatesAlreadyApplied"],
            "duplicates_in_batch": result.figures["DuplicatesInBatch"],
            "dead_letters": len(result.dead_letters),
            "records_failed": len(result.failed_record_ids),
            "transactions": result.figures["Transactions"],
            "transaction_retries": result.figures["TransactionRetries"],
            "journal_batches": result.figures["JournalBatches"],
            "refused_chunks": result.figures["RefusedChunks"],
            "records_held_by_lease": len(getattr(result, "stalls", ())),  # absent from a pipeline without stalls
        }
        conflicts = [letter for letter in result.dead_letters if letter.rejection.code == "id_conflict"]
        self._observe_counted_copies(conflicts)
        # How the pipeline met each reused id: another copy in the same batch, or the id's marker.
        figures["id_conflicts_in_batch"] = sum(1 for letter in conflicts if "first copy" in letter.rejection.detail)
        figures["id_conflicts_by_marker"] = len(conflicts) - figures["id_conflicts_in_batch"]
        for name, value in figures.items():
            self.log.add(f"pipeline.{name}", value)

    def _observe_counted_copies(self, conflicts: Sequence[DeadLetter]) -> None:
        """Count the copies of an id that come, in one batch, behind its other content refused by the id's
        marker, and are not refused themselves: they carry what the marker counts, and may be the redelivery
        that repairs a kill between that commit and its post-commit steps (the archive's record among them)."""
        refused = {letter.record.record_id for letter in conflicts if "its marker" in letter.rejection.detail}
        if not refused:
            return
        ids = {_message_id(record) for record in self._records if record.record_id in refused} - {None}
        lettered = {letter.record.record_id for letter in conflicts}
        behind = sum(1 for record in self._records if record.record_id not in lettered and _message_id(record) in ids)
        if behind:
            self.log.add("situation.counted_copy_behind_its_ids_refused_content", behind)

    def _maybe_restart(self) -> None:
        """After a kill: Lambda may give the next invocation a new execution environment (a cold start)."""
        if self.restart is None or self.rng.random() >= self.restart_after_kill:
            return
        self.log.add("situation.container_restarted_after_a_kill")
        if self.chaos.killed_after_fenced_write:
            self.log.add("situation.container_restarted_mid_fenced_apply")
        self.pipeline = self.restart(self.pipeline)
        self.chaos.fenced.restarted()

    def _begin(self) -> Invocation:
        invocation = Invocation(self.timeout_ms, self.clock)
        self.chaos.invocation = invocation
        self.chaos.begin_invocation()
        self._bodies = ()
        self._records = ()
        self._result = None
        return invocation

    def _invoke(self, handle: Callable[[], object], record_ids: Sequence[str]) -> BatchOutcome:
        try:
            outcome = self._outcome(handle, record_ids)
        finally:
            if self.chaos.invocation is not None:
                self.chaos.invocation.release_clock()  # held since its first fenced request, if it made one
        if self.trail is not None:
            self._note(outcome)
        return outcome

    def _note(self, outcome: BatchOutcome) -> None:
        """Each record's line in the trail: this consumer, the clock, and how the invocation ended for it."""
        assert self.trail is not None
        result = self._result
        letters = {letter.record.record_id: letter.rejection.code for letter in result.dead_letters} if result else {}
        at = f"{self.clock.now_ms()} {self.name} ({len(self._records)} records)"
        for record in self._records:
            if outcome.whole_batch:
                end = f"whole batch failed: {outcome.reason}"
            elif record.record_id in letters:
                end = f"dead-lettered {letters[record.record_id]}"
            elif record.record_id in outcome.failed:
                end = "reported failed"
            else:
                end = "done"
            self.trail.note(_text(record), f"{at}: {end}")

    def _outcome(self, handle: Callable[[], object], record_ids: Sequence[str]) -> BatchOutcome:
        self.log.add("invocations")
        try:
            response = handle()
        except InvocationKilled:
            self._maybe_restart()
            if self.chaos.killed_after_fenced_write:
                self.log.add("outcome.killed_after_fenced_write")
                return function_error(record_ids, "killed after a fenced write, before its batch was DONE")
            if self.chaos.killed_after_claim:
                self.log.add("outcome.killed_between_claim_and_commit")
                self.killed.add(self._bodies, self.clock.now_ms())
                return function_error(record_ids, "killed between a journal claim and the commit")
            if self.chaos.killed_before is not None:
                self.log.add(f"outcome.killed_before_{self.chaos.killed_before}")
                return function_error(
                    record_ids, f"killed between the commit and the {self.chaos.killed_before} writes"
                )
            self.log.add("outcome.killed_at_deadline")
            return function_error(record_ids, "killed at the deadline")
        except UnsettledMessagesError as exc:
            # tally refusing a batch whose bookkeeping lost a message is a defect, not a chosen failure
            self.log.add(f"outcome.unexpected.{type(exc).__name__}")
            self.unexpected.append(exc)
            return function_error(record_ids, str(exc))
        except TallyError as exc:
            self.log.add(f"outcome.function_error.{type(exc).__name__}")
            self.log.add(f"error.{type(exc).__name__}: {_HEX_ID.sub('<id>', str(exc))[:100]}")
            return function_error(record_ids, str(exc))
        except Exception as exc:
            self.log.add(f"outcome.unexpected.{type(exc).__name__}")
            self.unexpected.append(exc)
            return function_error(record_ids, repr(exc))
        invocation = self.chaos.invocation
        if invocation is not None and invocation.timed_out:
            self.log.add("outcome.timed_out")
            return function_error(record_ids, "returned after the deadline")
        if self.rng.random() < self.crash_after_commit:
            self.log.add("delivery.crash_after_commit")
            return function_error(record_ids, "crashed after commit: the answer was lost")
        outcome = read_response(response, record_ids)
        if outcome.whole_batch:
            self.log.add("outcome.unreadable_response")
            self.unexpected.append(AssertionError(f"the event source could not read the answer: {outcome.reason}"))
        return outcome
