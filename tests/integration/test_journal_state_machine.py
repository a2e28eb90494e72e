"""A Hypothesis state machine over the commit protocol, against DynamoDB Local and the real adapters.

Steps: deliver a subset of messages; deliver with a crash after the n-th store call (so between every
pair of protocol steps, as n varies), or right after the first journal claim (before any commit);
deliver one record alone; run two invocations over overlapping messages with the first one
paused at its n-th store call while the second runs; lose a transaction's response after it committed;
throttle; let time pass so leases expire.

The applier's marker read gate lives as long as the machine, as it lives as long as a warm Lambda
container: drawn to close after 0, 1 or 10 quiet invocations, so redeliveries meet existing markers
both through the read and through cancelled direct transactions (where a message whose marker names an aborted batch must be planned again).

Invariant after every step, read from the tables themselves: each counter equals the sum over messages
whose marker is direct or names a DONE batch, plus, for each COMMITTED batch, the pages of its chunks
already applied (for each FENCED batch, its items whose marks say the batch is on them). At the end, after every lease has expired, every message no invocation reported done
(never delivered, reported failed, or in a crashed invocation) is redelivered until none fails, as a
source would: each counter equals the sum over distinct messages, once (a message reported done but
never counted is lost), and no batch is left COMMITTED or FENCED.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tally.commit.applier import Applier, RetryPolicy, WriterEpochs
from tally.commit.marker_reads import MarkerReadGate
from tally.core.epochs import FencedBatch
from tally.core.fence import fence_horizon_ms, mark_value
from tally.core.limits import WIRE_LIMITS
from tally.core.model import SourceRecord
from tally.core.numbered_ids import numbered_id
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.markers import marker_records
from tally.store.pages import decode_page
from tally.store.schema import fence_attribute
from tally_local.kit.faults import DynamoDBFaults
from tally_local.template import load_template, table_definitions
from tests.support.pipeline import RecordingDeadLetterQueue
from tests.support.properties import on_emulator
from tests.support.tables import TEMPLATE_PATH, scan_all
from tests.support.workload import message_body

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

START_MS = 4_102_444_800_000
TTL_S = 35 * 86_400
KEYS = [f"k{i}" for i in range(4)]
SESSION = "5e55105e55105e55105e55105e55105e"


class Crash(BaseException):
    """The process dies: nothing after this point of the invocation happens."""


class Gate:
    """Counts store calls of one invocation; crashes or pauses it at a chosen call."""

    def __init__(
        self, crash_at: int | None = None, pause_at: int | None = None, *, crash_after_claim: bool = False
    ) -> None:
        self.calls = 0
        self.crash_at = crash_at
        self.pause_at = pause_at
        self.crash_after_claim = crash_after_claim
        """Die right after the first journal claim committed (``open`` or ``claim``), before any commit."""
        self.paused = threading.Event()
        self.resume = threading.Event()

    def before_call(self) -> None:
        self.calls += 1
        if self.pause_at == self.calls:
            self.paused.set()
            self.resume.wait(30)
        if self.crash_at == self.calls:
            raise Crash

    def after_call(self, name: str) -> None:
        if self.crash_after_claim and name in ("open", "claim"):
            raise Crash


class Gated:
    """Forwards to a store or journal, letting the gate act before every public call."""

    def __init__(self, target: Any, gate: Gate) -> None:
        self._target = target
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name.startswith("_") or not callable(attribute):
            return attribute

        def gated(*args: Any, **kwargs: Any) -> Any:
            self._gate.before_call()
            result = attribute(*args, **kwargs)
            self._gate.after_call(name)
            return result

        return gated


def message_pool(draw: st.DrawFn) -> list[tuple[str, str, dict[str, int]]]:
    """(id, body, net deltas per key) for a small pool of single and packed messages.

    Some messages touch every key: more than a four-action transaction holds, so their units go through
    the journal (otherwise rare at this size: splitting small units into direct transactions is cheaper).
    The ids are drawn as the producer's own, numbered (``<session>.<seq>`` from seq 14: two block items),
    or a mix of both.
    """
    pool = []
    style = draw(st.sampled_from(["own", "numbered", "mixed"]))
    for index in range(draw(st.integers(min_value=3, max_value=8))):
        if draw(st.booleans()):
            events = [(key, draw(st.integers(1, 9))) for key in KEYS]
        else:
            events = draw(st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-5, 9)), min_size=1, max_size=4))
        numbered = style == "numbered" or (style == "mixed" and index % 2 == 0)
        message_id = numbered_id(SESSION, 14 + index) if numbered else f"msg-{index}"
        net: dict[str, int] = defaultdict(int)
        for key, delta in events:
            net[key] += delta
        body = message_body(message_id, [(key, {"count": delta}) for key, delta in events])
        pool.append((message_id, body, dict(net)))
    return pool


class JournalMachine(RuleBasedStateMachine):
    ddb: DynamoDBLocal
    fenced = False
    """Journal batches fenced: each item one plain conditional write (``tally.core.fence``)."""

    def __init__(self) -> None:
        super().__init__()
        self.client = self.ddb.client()
        self.faults = DynamoDBFaults(self.client)
        self.single_faults = DynamoDBFaults(self.client, operation="UpdateItem")
        """Lost answers on fenced writes, the fenced commit and DONE (plain ``UpdateItem``s)."""
        suffix = uuid.uuid4().hex[:10]
        definitions = table_definitions(load_template(TEMPLATE_PATH))
        self.counters, self.markers = f"sm-counters-{suffix}", f"sm-markers-{suffix}"
        self.client.create_table(**definitions["CountersTable"].create_table_kwargs(self.counters))
        self.client.create_table(**definitions["MarkersTable"].create_table_kwargs(self.markers))
        self.now_ms = START_MS
        self.pool: list[tuple[str, str, dict[str, int]]] = []
        self.deliveries = 0
        self.record_message: dict[str, int] = {}
        self.acknowledged: set[int] = set()
        """Pool indexes of messages a source has deleted: an invocation reported their record done."""
        self.read_gate = MarkerReadGate()
        self.epochs: dict[str, WriterEpochs | None] = {}
        """Container -> its writer epoch (fenced machines)."""

    @initialize(quiet_batches=st.sampled_from([0, 1, 10]), data=st.data())
    def warm_container(self, quiet_batches: int, data: st.DataObject) -> None:
        """The pool, and one gate for every invocation: the container stays warm, and its gate may close."""
        self.read_gate = MarkerReadGate(quiet_batches=quiet_batches)
        self.pool = data.draw(st.composite(message_pool)())

    # ------------------------------------------------------------------------------------- helpers
    def _pipeline(self, gate: Gate, container: str) -> BatchPipeline:
        store = DynamoDBCounterStore(self.client, self.counters, self.markers, TTL_S)
        journal = DynamoDBJournal(self.client, self.counters, self.markers, TTL_S)
        policy = RetryPolicy(base_delay_s=0.0, max_delay_s=0.0, max_attempts=3, reserve_ms=0)
        # Four actions per transaction: small pools then exercise multi-transaction claims and chunks.
        applier = Applier(
            Gated(store, gate),
            Gated(journal, gate),
            policy=policy,
            sleep=lambda _: None,
            max_actions=4,
            marker_read_gate=self.read_gate,
            fenced=self.fenced,
            # The invocations here have 60 s: marks may go two minutes after DONE, within the machine's steps.
            fence_horizon=fence_horizon_ms(60, 1_000),
        )
        if self.fenced:
            # The container's epoch lives as long as the container (one invocation at a time in each).
            applier.epochs = self.epochs.setdefault(container, applier.epochs)
        settings_ = PipelineSettings(WIRE_LIMITS, dedup_horizon_ms=TTL_S * 1000)
        return BatchPipeline(applier, RecordingDeadLetterQueue(), settings_)

    def _records(self, indexes: list[int]) -> list[SourceRecord]:
        records = []
        for index in indexes:
            self.deliveries += 1
            _, body, _ = self.pool[index % len(self.pool)]
            records.append(SourceRecord(f"rec-{self.deliveries}", body, START_MS))
            self.record_message[f"rec-{self.deliveries}"] = index % len(self.pool)
        return records

    def _invoke(self, indexes: list[int], gate: Gate, container: str = "warm") -> tuple[str, ...] | None:
        """One invocation (in ``container``); the messages of the records it reports done are acknowledged (never
        redelivered)."""
        records = self._records(indexes)
        try:
            failed = self._pipeline(gate, container).process(records, self.now_ms, lambda: 60_000).failed_record_ids
        except Crash:
            return None
        self.acknowledged.update(self.record_message[r.record_id] for r in records if r.record_id not in failed)
        return failed

    def _scan(self, table: str) -> list[dict[str, Any]]:
        return scan_all(self.client, table)

    def _expected_from_ledger(self) -> dict[str, Decimal]:
        ledger = {item["id"]["S"]: item for item in self._scan(self.markers)}
        nets = {message_id: net for message_id, _, net in self.pool}
        expected: dict[str, Decimal] = defaultdict(Decimal)
        for item_id, item in ledger.items():
            if item_id.startswith(("m#", "s#")):  # a marker of its own, or a block of numbered markers
                for message_id, marker in marker_records(item, nets).items():
                    batch = marker.batch_id
                    state = None if batch is None else ledger["b#" + batch]["state"]["S"]
                    if batch is None or state == "DONE":
                        for key, delta in nets[message_id].items():
                            expected[key] += delta
            elif item_id.startswith("b#") and "#" not in item_id[2:] and item["state"]["S"] in ("COMMITTED", "FENCED"):
                batch_id = item_id[2:]
                for index in range(int(item["chunks"]["N"])):
                    if item["state"]["S"] == "FENCED":
                        page = decode_page(ledger[f"b#{batch_id}#p{index}"]["data"]["B"])
                        for key, counters in page.items():
                            if self._fenced_applied(batch_id, str(key)):
                                expected[key] += counters["count"]
                    elif f"b#{batch_id}#a{index}" in ledger:
                        page = decode_page(ledger[f"b#{batch_id}#p{index}"]["data"]["B"])
                        for key, counters in page.items():
                            expected[key] += counters["count"]
        return {key: value for key, value in expected.items() if value}

    def _fenced_applied(self, batch_id: str, key: str) -> bool:
        """Whether a fenced batch's part is on ``key``'s item: its epoch's mark is at or past the batch's."""
        batch = FencedBatch.parse(batch_id)
        assert batch is not None
        item = self.client.get_item(TableName=self.counters, Key={"pk": {"S": key}, "sk": {"S": "all"}}).get("Item", {})
        mark = item.get(fence_attribute(batch.epoch))
        return mark is not None and int(mark["N"]) >= mark_value(batch.seq, 0)

    def _counted(self) -> dict[str, Decimal]:
        counted = {item["pk"]["S"]: Decimal(item.get("c#count", {"N": "0"})["N"]) for item in self._scan(self.counters)}
        return {key: value for key, value in counted.items() if value}

    def _drain_and_check(self) -> None:
        self.now_ms += 10 * 60_000  # every lease has expired
        # Only what no source has deleted comes back: a message reported done must have been counted.
        indexes = [index for index in range(len(self.pool)) if index not in self.acknowledged]
        for _ in range(6):
            if not indexes:
                break
            failed = self._invoke(indexes, Gate())
            assert failed is not None
            indexes = [self.record_message[record_id] for record_id in failed]
        else:
            pytest.fail("messages still failing after six redeliveries")
        total: dict[str, Decimal] = defaultdict(Decimal)
        for _, _, net in self.pool:
            for key, delta in net.items():
                total[key] += delta
        assert self._counted() == {key: value for key, value in total.items() if value}
        states = [item["state"]["S"] for item in self._scan(self.markers) if "state" in item]
        assert "COMMITTED" not in states
        assert "FENCED" not in states

    # --------------------------------------------------------------------------------------- rules
    @rule(indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10))
    def deliver(self, indexes: list[int]) -> None:
        if self.pool:
            self._invoke(indexes, Gate())

    @rule(index=st.integers(0, 7))
    def redeliver_one(self, index: int) -> None:
        """One record alone (an SQS receive of one message): a small unit, the direct path."""
        if self.pool:
            self._invoke([index], Gate())

    @rule(indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10), crash_at=st.integers(1, 14))
    def deliver_and_crash(self, indexes: list[int], crash_at: int) -> None:
        if self.pool:
            self._invoke(indexes, Gate(crash_at=crash_at))

    @rule(indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10), one_by_one=st.booleans())
    def deliver_and_crash_after_a_claim(self, indexes: list[int], one_by_one: bool) -> None:
        """Killed between a journal claim and the commit: the batch stays PREPARING until its lease ends.

        As SQS does, the records come back once the visibility timeout (7 min for a 60 s function) has
        passed, so after the lease; together, or each in a receive of its own (small units: the direct
        path, where a closed gate sends a redelivery).
        """
        if not self.pool:
            return
        self._invoke(indexes, Gate(crash_after_claim=True))
        self.now_ms += 7 * 60_000
        for batch in [[index] for index in indexes] if one_by_one else [indexes]:
            self._invoke(batch, Gate())

    @rule(
        first=st.lists(st.integers(0, 7), min_size=1, max_size=10),
        second=st.lists(st.integers(0, 7), min_size=1, max_size=10),
        pause_at=st.integers(1, 10),
        crash_first=st.booleans(),
    )
    def overlap(self, first: list[int], second: list[int], pause_at: int, crash_first: bool) -> None:
        """Invocation A pauses at its n-th store call; B runs meanwhile; then A resumes (or dies)."""
        if not self.pool:
            return
        gate = Gate(pause_at=pause_at, crash_at=pause_at if crash_first else None)
        paused = threading.Thread(target=self._invoke, args=(first, gate))
        paused.start()
        # Until A pauses, or ends without reaching its n-th call (then there is nothing to overlap).
        while paused.is_alive() and not gate.paused.wait(0.05):
            pass
        self._invoke(second, Gate(), container=f"other-{self.deliveries}")  # another container, meanwhile
        gate.resume.set()
        paused.join(60)
        assert not paused.is_alive()

    @rule(indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10))
    def deliver_with_lost_response(self, indexes: list[int]) -> None:
        if self.pool:
            self.faults.lose_responses(1)
            self._invoke(indexes, Gate())
            self.faults.clear()

    @rule(indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10), nth=st.integers(0, 12))
    def deliver_with_a_single_write_answer_lost(self, indexes: list[int], nth: int) -> None:
        """The answer of the n-th plain ``UpdateItem`` is lost: a fenced write, the fenced commit, DONE, an abort."""
        if self.pool:
            self.single_faults.pass_through(nth)
            self.single_faults.lose_responses(1)
            self._invoke(indexes, Gate())
            self.single_faults.clear()

    @rule(
        indexes=st.lists(st.integers(0, 7), min_size=1, max_size=10),
        reason=st.sampled_from(["ThrottlingError", "TransactionConflict"]),
    )
    def deliver_throttled(self, indexes: list[int], reason: str) -> None:
        if self.pool:
            self.faults.cancel(reason, count=2)
            self._invoke(indexes, Gate())
            self.faults.clear()

    @rule(minutes=st.integers(1, 5))
    def time_passes(self, minutes: int) -> None:
        self.now_ms += minutes * 60_000

    @invariant()
    def counters_match_the_ledger(self) -> None:
        if self.pool:
            assert self._counted() == self._expected_from_ledger()


class FencedJournalMachine(JournalMachine):
    """The same steps with fenced journal batches: kills after the n-th store call (every fenced write among them),
    an invocation paused at its n-th call while another finishes its batch, lost answers on any plain write. Its
    epoch lives as long as the machine's container and ends whenever a batch is left unfinished."""

    fenced = True


@pytest.mark.parametrize("machine", [JournalMachine, FencedJournalMachine], ids=["chunked", "fenced"])
def test_commit_protocol_state_machine(dynamodb_local: DynamoDBLocal, machine: type[JournalMachine]) -> None:
    machine.ddb = dynamodb_local
    run_state_machine_as_test(
        machine,
        settings=on_emulator(
            stateful_step_count=8, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
        ),
    )
