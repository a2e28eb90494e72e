"""Seeded, rate-based DynamoDB faults at the botocore layer: the code under test is the production code.

``DynamoDBChaos`` is registered on ONE consumer's client (each consumer has its own client and its own
random sequence). The consumer's applier may send a round's direct transactions from several threads at
once (``TALLY_WRITE_CONCURRENCY``): what a fault does to a request's answer is kept in
botocore's per-request context, never on this object, and the draws of overlapping requests interleave
(a seed then fixes the load and the rates, not which request gets which fault). For each DynamoDB
request the pipeline makes, it draws at most one fault:

- ``connect_failure``: botocore's ``EndpointConnectionError`` raised in ``before-call``; the request
  never reaches the server (the code sees an unknown outcome and retries);
- ``lost_response``: the request goes through and commits, then ``after-call`` raises a read timeout, so
  the code sees an error after the write happened (botocore's own retries happen inside the send, before
  ``after-call``: they are bypassed, as if they had all failed);
- ``throttle_request``: the whole request is refused with ``ProvisionedThroughputExceededException``;
- ``throttle_cancel`` / ``conflict`` (``TransactWriteItems`` only): a ``TransactionCanceledException``
  whose ``CancellationReasons`` put ``ThrottlingError`` / ``TransactionConflict`` on one action, shaped
  as DynamoDB sends it (DynamoDB Local never reports conflicts by itself);
- ``slow``: the response comes back with little time left before the Lambda deadline (the invocation's
  ``remaining_ms`` drops to a value drawn around the applier's reserve); when the deadline passes while
  the request is in flight, the request commits and the invocation is killed (``InvocationKilled``).

``BatchGetItem`` requests draw ``unprocessed_keys`` first: the request is sent with only part of its keys
and the answer lists the others in ``UnprocessedKeys``, for this request and a burst of the consumer's next
ones (a throttled partition answers HTTP 200 with unprocessed keys, which botocore does not retry).

Journal claim transactions (``open``: the header Put with the first claims; ``claim``: a header check
plus more claims) draw two more faults first:

- ``kill_after_claim``: the claim commits, then the invocation is killed (``InvocationKilled``) before its
  batch commits: the batch stays PREPARING until its lease ends, and the source redelivers the records
  after its visibility timeout or retry backoff (a claim DynamoDB cancelled draws it, and nothing happens);
- ``lost_claim_near_deadline`` (``claim`` only, so the batch has claimed before): the claim commits, its
  answer is lost, and the invocation has just more than the applier's reserve left, so the applier's
  retries stop with the claim's outcome unknown. A run makes few ``claim`` transactions (a unit of more
  than 99 marker items), so each draws this fault whatever its rate (above 0) until one was injected, and the
  others at the rate.

The writes that follow the counters' commit draw one more first:

- ``kill_before_gauges`` (a gauge ``UpdateItem``) / ``kill_before_members`` (a distinct-count member
  ``TransactWriteItems``), drawn once per invocation, at its first write of that kind (per write, they
  killed most large Kinesis batches, whose bisected halves then rarely made journal units large enough for
  a second claim): the invocation is killed before the write is sent, so its messages are counted
  (their markers committed) and their gauges or members not written; the redelivery meets the markers and
  must write them then.

Not drawn per request but fixed for the run: the gauge and member writes of the
``refused_keys`` (``tally_local.chaos.patterns.refused_keys``) are refused for good, as DynamoDB refuses a write
that would grow an item past 400 KB: a gauge ``UpdateItem`` answers ``ValidationException``, a member
transaction is cancelled with ``ValidationError`` on the key's action (``ddb.refused_for_good_gauges`` /
``_members``). Retrying can never succeed; the messages must count and be dead-lettered with the reason.

Not a drawn fault but DynamoDB's own rule: two transactions in flight at once on one
item conflict, and DynamoDB Local never says so. ``InFlightTransactions``, shared by every consumer of a
run, answers a ``TransactWriteItems`` that would write an item another one still in flight writes with
``TransactionConflict`` on that action, as DynamoDB does (``situation.transaction_overlaps``). Two
transactions of ONE client in flight on one item are the applier's own doing (it must never send such a
pair at once, ``tally.core.plan.item_disjoint_lanes``): each is recorded in ``self_overlaps``, which fails
the run.
Ended windows' moves off key items (``tally.store.windows``: a ``TransactWriteItems`` whose key-item
actions ``REMOVE`` ``w#`` attributes) draw two more:

- ``kill_before_window_transfer``, drawn once per invocation at its first move, like the two above: the
  invocation is killed after its commit and its key items' read, before the move is sent;
- ``late_event_race``, per move: the condition's value of one moved attribute is made stale, as if a late
  event had added to it between the move's read and its transaction; DynamoDB refuses the move and returns
  the item, from which the mover must re-plan (``situation.window_move_transactions`` counts the moves sent).

The fenced apply's plain ``UpdateItem``s (``tally_local.chaos.fenced`` tells them apart: an item part's write with its
epoch's mark, the header's commit, its DONE) draw the faults above as any request does (``slow`` for the item writes is
counted apart, ``slow_fenced_write``, at the same rate: they are one request per item where a chunk transaction
carries 98, so most large fenced batches stop short and are finished by later invocations; the first commit and the
first DONE of a run lose their answer, the next are throttled), and one more:

- ``kill_after_fenced_write``, drawn once per invocation at its first fenced write: the invocation is killed once its
  n-th fenced write is sent (n from 1 to ``FENCED_KILL_SPAN``), its batch left FENCED for whoever meets its
  markers, the owner's container then restarted or not (``ChaosConfig``'s ``restart_after_kill``).

A killed invocation sends nothing more: its other threads' requests (its write pool's) raise ``InvocationKilled``
before they leave (``Invocation.kill``). And a fenced write or DONE is not sent once the invocation's deadline has
passed on the run's virtual clock (``tally_local.chaos.clock``): Lambda never lets an invocation run past it, and the
fenced apply's prune horizon leans on that.

The archive's writes (S3 ``PutObject``, ``tally.archive_writer``) draw their own faults (``ArchiveChaos``, per
write, on the consumer's S3 client): ``archive.connect_failure``, ``archive.lost_response`` (stored, answer lost),
``archive.throttle`` (``SlowDown``), and ``archive.kill_before_archive`` once per invocation (killed after the
commit, before the write is sent: the redelivery meets the markers and must archive then).

``FaultLog`` counts what was injected and what the delivery layer did, by kind, for every thread.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from tally.core.items import SHARD_SEPARATOR
from tally.store.schema import GAUGE_PREFIXES, WINDOW_PREFIX, distinct_attribute
from tally_local.chaos.fenced import FencedWatch, fenced_request
from tally_local.kit.answers import (
    Answer,
    cancelled_answer,
    error_answer,
    lost_response,
    transaction_actions,
    transaction_items,
)

if TYPE_CHECKING:
    import random

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.chaos.clock import Invocation
    from tally_local.chaos.config import ArchiveFaultRates, DynamoDBFaultRates
    from tally_local.kit.conflicts import InFlightTransactions

# The requests tally's write path makes; the faults apply to these only.
FAULTABLE: Final = ("TransactWriteItems", "UpdateItem", "GetItem", "BatchWriteItem", "BatchGetItem")
TRANSACT: Final = "TransactWriteItems"
BATCH_GET: Final = "BatchGetItem"
UNPROCESSED_BURST_MAX: Final = 11
FENCED_HEADER_FAULTS: Final = ("lost_response", "throttle_request")
"""Faults each run's first fenced commits and DONEs take, one after the other (then they draw at the rates)."""
FENCED_KILL_SPAN: Final = 64
"""An invocation drawn for ``kill_after_fenced_write`` is killed after its n-th fenced write, n from 1 to this."""
UPDATE: Final = "UpdateItem"
_AFTER: Final = "tally_chaos_after"
"""Key, in botocore's per-request context, of what ``after-call`` does to that request's answer."""
_WITHHELD: Final = "tally_chaos_withheld"
"""Key of the ``UnprocessedKeys`` a ``BatchGetItem``'s answer is to carry."""
_FENCED: Final = "tally_chaos_fenced"
"""The fenced apply's request this one is (``tally_local.chaos.fenced``), for ``after-call`` to count its answer."""
_FLYING: Final = "tally_chaos_in_flight"
"""The request's token in ``InFlightTransactions`` (a transaction sent and not yet answered)."""
_LANDING: Final = "tally_chaos_landing"
"""Key of a fenced write's or DONE's (invocation, token) while it is in flight on the run's clock."""
_SENT_FAULTS: Final = frozenset({"kill_after_claim", "lost_claim_near_deadline", "lost_response", "slow"})
"""Faults of a request that still reaches DynamoDB (it may then conflict with a transaction in flight)."""


class InvocationKilled(Exception):
    """Lambda killed the invocation at its deadline while a request was in flight (the request committed)."""


class FaultLog:
    """Thread-safe counts by name: faults injected, redeliveries made, outcomes seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, count: int = 1) -> None:
        if count:
            with self._lock:
                self._counts[name] += count

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def count(self, name: str) -> int:
        with self._lock:
            return self._counts[name]


LOST_CLAIM: Final = "ddb.lost_claim_near_deadline"

ITEM_TOO_LARGE: Final = "Item size to update has exceeded the maximum allowed size"
"""DynamoDB's words (as DynamoDB Local says them) for a write that would grow an item past 400 KB."""


class DynamoDBChaos:
    """Injects faults into one client's requests; ``invocation`` is set by the consumer for each batch."""

    def __init__(
        self,
        client: DynamoDBClient,
        rates: DynamoDBFaultRates,
        rng: random.Random,
        log: FaultLog,
        in_flight: InFlightTransactions | None = None,
    ) -> None:
        self._in_flight = in_flight
        """Shared by a run's consumers: DynamoDB's conflict between transactions in flight on one item."""
        self._rates = rates
        self._rng = rng
        self._log = log
        self.invocation: Invocation | None = None
        self.reserve_ms = 3_000
        self.enabled = True
        self.killed_after_claim = False
        self.killed_after_fenced_write = False
        """Set when ``kill_after_fenced_write`` fired in the current invocation."""
        self.fenced = FencedWatch(log)
        self._fenced_lock = threading.Lock()
        self._fenced_writes = 0
        """Fenced writes the current invocation sent (its write pool's threads included)."""
        self._kill_after_write: int | None = None
        """The fenced write after which the current invocation is killed (``kill_after_fenced_write``)."""
        """What the consumer's fenced requests met (``tally_local.chaos.fenced``)."""
        self.killed_before: str | None = None
        self.refused_keys: frozenset[str] = frozenset()
        """Keys whose gauge and member writes are refused for good (the run's ``refused_keys``)."""
        """``gauges``, ``members`` or ``window_transfer`` when ``kill_before_*`` fired in the current invocation."""
        self._followers_drawn: set[str] = set()
        """The kinds of write after the commit already drawn for in the current invocation (once each)."""
        self._unprocessed_burst = 0
        """Further ``BatchGetItem`` calls of this consumer that will leave keys unprocessed."""
        """Set when ``kill_after_claim`` fired in the current invocation (the consumer resets it)."""
        for operation in FAULTABLE:
            client.meta.events.register(f"before-call.dynamodb.{operation}", self._before_call)  # type: ignore[arg-type]
            client.meta.events.register(f"after-call.dynamodb.{operation}", self._after_call)
        client.meta.events.register(f"after-call-error.dynamodb.{TRANSACT}", self._left)
        client.meta.events.register(f"after-call-error.dynamodb.{UPDATE}", self._left)

    def begin_invocation(self) -> None:
        """Forget what the previous invocation drew and suffered."""
        self.killed_after_claim = False
        self.killed_after_fenced_write = False
        self.killed_before = None
        self._followers_drawn.clear()
        with self._fenced_lock:
            self._fenced_writes = 0
            self._kill_after_write = None

    def _kill_now_after_fenced_write(self) -> bool:
        """Whether the invocation is killed once this fenced write is sent: drawn at its first fenced write (at the
        rate), then after its n-th, n drawn from 1 to ``FENCED_KILL_SPAN`` (an invocation that sends fewer is not)."""
        with self._fenced_lock:
            self._fenced_writes += 1
            if self._fenced_writes == 1 and self._rng.random() < self._rates.kill_after_fenced_write:
                self._kill_after_write = self._rng.randint(1, FENCED_KILL_SPAN)
            return self._fenced_writes == self._kill_after_write

    def kill_invocation(self, why: str) -> InvocationKilled:
        """The invocation killed (Lambda stops it whole): what it sends after this, from any thread, never leaves."""
        if self.invocation is not None:
            self.invocation.kill()
        return InvocationKilled(why)

    def _draw(self, operation: str, *, fenced_write: bool = False) -> str | None:
        rates = self._rates
        table = [
            ("connect_failure", rates.connect_failure),
            ("lost_response", rates.lost_response),
            ("throttle_request", rates.throttle_request),
            ("slow_fenced_write", rates.slow_fenced_write) if fenced_write else ("slow", rates.slow),
        ]
        if operation == TRANSACT:
            table += [("throttle_cancel", rates.throttle_cancel), ("conflict", rates.conflict)]
        roll = self._rng.random()
        for kind, rate in table:
            if roll < rate:
                return kind
            roll -= rate
        return None

    def _draw_claim_fault(self, params: dict[str, Any]) -> str | None:
        """``kill_after_claim`` or ``lost_claim_near_deadline`` for a journal claim transaction, or None."""
        claim = _claim_kind(transaction_actions(params))
        if claim is None:
            return None
        self._log.add(f"situation.journal_{claim}_transactions")
        if claim == "claim" and self._rates.lost_claim_near_deadline and not self._log.count(LOST_CLAIM):
            # Its chances are few (a unit of over 99 marker items makes one): each takes it until one did.
            return "lost_claim_near_deadline"
        roll = self._rng.random()
        if roll < self._rates.kill_after_claim:
            return "kill_after_claim"
        if claim == "claim" and roll < self._rates.kill_after_claim + self._rates.lost_claim_near_deadline:
            return "lost_claim_near_deadline"
        return None

    def _before_call(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> Answer | None:
        # What ``after-call`` is to do rides in botocore's per-request context, not on this object: the
        # applier sends a round's transactions from several threads on one client.
        context.pop(_AFTER, None)
        context.pop(_FENCED, None)
        operation = model.name
        if self.invocation is not None and self.invocation.killed:
            # a request of a killed invocation's other threads (its write pool): Lambda has stopped them all
            raise InvocationKilled("the invocation was killed: nothing more is sent")
        if self.enabled and operation == BATCH_GET and self._withhold_keys(params, context):
            return None
        follower = _after_commit_write(operation, params) if self.enabled else None
        self._before_follower(follower, params)
        if (refusal := self._refuse_for_good(follower, operation, params)) is not None:
            return refusal
        fenced = fenced_request(operation, params) if self.enabled else None
        if fenced is not None:
            self._before_fenced(fenced.role)
            self.fenced.sent(fenced)
            context[_FENCED] = fenced
        kind = None
        if self.enabled and operation == TRANSACT:
            kind = self._draw_claim_fault(params)
        if kind is None and fenced is not None and fenced.role in ("commit", "done"):
            kind = self._first_header_faults(fenced.role)
        if kind is None and self.enabled:
            kind = self._draw(operation, fenced_write=fenced is not None and fenced.role == "write")
        if kind is None and fenced is not None and fenced.role == "write" and self._kill_now_after_fenced_write():
            kind = "kill_after_fenced_write"
        if kind is not None and fenced is not None:
            self.fenced.faulted(fenced, kind)
        if (kind is None or kind in _SENT_FAULTS) and operation == TRANSACT and self._in_flight is not None:
            # DynamoDB cancels it if another transaction in flight writes one of its items
            items = transaction_items(params)
            token, conflicted = self._in_flight.enter(id(self), items)
            if conflicted is not None:
                self._log.add("situation.transaction_overlaps")
                return cancelled_answer({conflicted: "TransactionConflict"}, len(items), "chaos")
            context[_FLYING] = token
        if kind is not None and kind not in ("kill_after_claim", "kill_after_fenced_write"):  # counted once sent
            self._log.add(f"ddb.{kind}")
        answer = None if kind is None else self._fault(kind, params, context)
        if answer is None and fenced is not None and fenced.role in ("write", "done"):
            self._take_off(context)
        return answer

    def _first_header_faults(self, role: str) -> str | None:
        """A run makes few fenced commits and DONEs (one each per fenced batch): the first of each loses its answer,
        the next is throttled (``FENCED_HEADER_FAULTS``), the others draw at the rates."""
        for kind in FENCED_HEADER_FAULTS:
            if not self._log.count(f"situation.fenced_{role}_{kind}"):
                return kind
        return None

    def _before_fenced(self, role: str) -> None:
        """Before a fenced write or DONE: Lambda kills an invocation at its deadline on the wall clock, which the run's
        virtual clock moves on while a consumer waits (as if the invocation were paused). The fenced apply's prune
        horizon leans on that deadline (no write of a batch read FENCED comes a timeout after its invocation
        started), so such a request, past the deadline on the virtual clock, is never sent (checked here before any
        fault is drawn on it, and again as it leaves: ``_take_off``)."""
        invocation = self.invocation
        if invocation is not None:
            invocation.hold_clock()
        if role in ("write", "done") and invocation is not None and invocation.past_virtual_deadline:
            raise self._past_the_deadline()

    def _take_off(self, context: dict[str, Any]) -> None:
        """A fenced write or DONE leaves now: checked against the invocation's deadline after any jump of the clock
        under way, and in flight (no jump passes over it) until ``after-call`` (``tally_local.chaos.clock``)."""
        invocation = self.invocation
        if invocation is None:
            return
        token = invocation.send_fenced()
        if token is None:
            self._left(context)
            raise self._past_the_deadline()
        context[_LANDING] = (invocation, token)

    def _past_the_deadline(self) -> InvocationKilled:
        """A fenced request found the invocation's deadline passed on the run's clock: never sent, the invocation
        killed."""
        self._log.add("situation.fenced_requests_past_the_virtual_deadline")
        return self.kill_invocation("the deadline passed (on the run's clock) before a fenced request was sent")

    def _before_follower(self, follower: str | None, params: dict[str, Any]) -> None:
        """Before a write that follows the counters' commit: the invocation killed (once per kind of follower), or a
        window move's request made stale by a late event racing it."""
        if follower is not None and follower not in self._followers_drawn:
            self._followers_drawn.add(follower)
            kill = self._rng.random() < getattr(self._rates, f"kill_before_{follower}")
        else:
            kill = False
        if follower == "window_transfer":
            self._log.add("situation.window_move_transactions")
        if follower == "window_transfer" and self._rng.random() < self._rates.late_event_race:
            _make_stale(params)
            self._log.add("ddb.late_event_race")
        if kill:
            self._log.add(f"ddb.kill_before_{follower}")
            self.killed_before = follower
            raise self.kill_invocation(f"killed between the counters' commit and the {follower} write")

    def _fault(self, kind: str, params: dict[str, Any], context: dict[str, Any]) -> Answer | None:
        """What the drawn fault ``kind`` does to the request: an answer in DynamoDB's place, an error, or None (the
        request is sent, and ``after-call`` does what ``context`` says)."""
        if kind in ("kill_after_claim", "lost_claim_near_deadline", "kill_after_fenced_write"):
            context[_AFTER] = kind
            return None
        if kind == "connect_failure":
            raise EndpointConnectionError(endpoint_url="chaos://connect-failure")
        if kind == "lost_response":
            context[_AFTER] = "lose"
            return None
        if kind in ("slow", "slow_fenced_write"):
            invocation = self.invocation
            if invocation is not None:
                remaining_after = self._rng.randint(-500, 2 * self.reserve_ms)
                invocation.slow_down(remaining_after)
                if remaining_after < 0:
                    context[_AFTER] = "kill"
            return None
        if kind == "throttle_request":
            return error_answer("ProvisionedThroughputExceededException", message="chaos: rate exceeded")
        reason = "ThrottlingError" if kind == "throttle_cancel" else "TransactionConflict"
        actions = len(transaction_actions(params))
        return cancelled_answer({self._rng.randrange(actions): reason}, actions, "chaos")

    def _refuse_for_good(self, follower: str | None, operation: str, params: dict[str, Any]) -> Answer | None:
        """DynamoDB's answer to a gauge or member write naming a refused key's items, or None (sent as is)."""
        if follower not in ("gauges", "members") or not self.refused_keys:
            return None
        request = json.loads(params["body"])
        answer = None
        if operation == UPDATE and _key_of(request.get("Key", {})) in self.refused_keys:
            answer = error_answer("ValidationException", message=ITEM_TOO_LARGE)
        actions = request.get("TransactItems", [])
        for index, action in enumerate(actions):
            update = action.get("Update")
            if answer is None and update is not None and _key_of(update.get("Key", {})) in self.refused_keys:
                answer = cancelled_answer({index: "ValidationError"}, len(actions), ITEM_TOO_LARGE)
        if answer is not None:
            self._log.add(f"ddb.refused_for_good_{follower}")
        return answer

    def _withhold_keys(self, params: dict[str, Any], context: dict[str, Any]) -> bool:
        """Send part of a ``BatchGetItem``'s keys and keep the rest for its answer's ``UnprocessedKeys``."""
        request = json.loads(params["body"])
        ((table, spec),) = request["RequestItems"].items()
        keys = spec["Keys"]
        if len(keys) < 2:
            return False
        if self._unprocessed_burst:
            self._unprocessed_burst -= 1
        elif self._rng.random() < self._rates.unprocessed_keys:
            self._unprocessed_burst = self._rng.randint(0, UNPROCESSED_BURST_MAX)
        else:
            return False
        self._log.add("ddb.unprocessed_keys")
        answered = self._rng.randint(1, len(keys) - 1)
        spec["Keys"], withheld = keys[:answered], keys[answered:]
        params["body"] = json.dumps(request).encode()
        context[_WITHHELD] = {table: dict(spec, Keys=withheld)}
        context[_AFTER] = "withhold"
        return True

    def _left(self, context: dict[str, Any], **_: Any) -> None:
        """The request's answer came back (or its sending failed): it is no longer in flight."""
        token = context.pop(_FLYING, None)
        if token is not None and self._in_flight is not None:
            self._in_flight.leave(token)
        landing = context.pop(_LANDING, None)
        if landing is not None:
            invocation, flight = landing
            invocation.landed(flight)

    def _after_call(self, context: dict[str, Any], parsed: dict[str, Any] | None = None, **_: Any) -> None:
        self._left(context)
        fenced = context.pop(_FENCED, None)
        if fenced is not None and parsed is not None:
            self.fenced.answered(fenced, parsed)
        after = context.pop(_AFTER, None)
        if after == "withhold":
            withheld = context.pop(_WITHHELD, {})
            if parsed is not None and "Error" not in parsed:
                unprocessed = parsed.setdefault("UnprocessedKeys", {})
                for table, spec in withheld.items():
                    unprocessed.setdefault(table, {"Keys": [], "ConsistentRead": spec.get("ConsistentRead")})
                    unprocessed[table]["Keys"].extend(spec["Keys"])
            return
        if after == "lose":
            raise lost_response()
        if after == "kill_after_claim" and parsed is not None and "Error" in parsed:
            # The claim was cancelled (a marker in the way, a conflict): nothing committed to be killed after. An
            # invocation killed here would look like a crash after a claim, and, on Kinesis, bisect its batch
            # where the records met a live lease would have been reported failed (a retry Lambda spends).
            return
        if after == "kill_after_claim":
            self._log.add("ddb.kill_after_claim")
            self.killed_after_claim = True
            raise self.kill_invocation("killed between a journal claim and the commit")
        if after == "kill_after_fenced_write":
            self._log.add("ddb.kill_after_fenced_write")
            self.killed_after_fenced_write = True
            raise self.kill_invocation("killed after a fenced write, before its batch was DONE")
        if after == "lost_claim_near_deadline":
            if self.invocation is not None:
                self.invocation.slow_down(self.reserve_ms + 50)  # a 10 s read timeout, late in the invocation
            raise ReadTimeoutError(endpoint_url="chaos://lost-claim-near-deadline")
        if after == "kill":
            raise self.kill_invocation("deadline passed while a DynamoDB request was in flight")


class ArchiveChaos:
    """Faults of one consumer's archive writes (``PutObject`` on its S3 client), drawn from its own sequence.

    ``owner`` is the consumer's ``DynamoDBChaos``: the same switch (``enabled``), the same invocation, and the
    same record of what killed it (``killed_before = "archive"``), so the consumer reports the kill as any other.
    """

    PUT: Final = "PutObject"

    def __init__(self, client: Any, rates: ArchiveFaultRates, rng: random.Random, log: FaultLog, owner: DynamoDBChaos):
        self._rates = rates
        self._rng = rng
        self._log = log
        self._owner = owner
        self._drawn_for: object = None
        """The invocation whose kill was drawn already (once per invocation, at its first write)."""
        client.meta.events.register(f"before-call.s3.{self.PUT}", self._before_call)
        client.meta.events.register(f"after-call.s3.{self.PUT}", self._after_call)

    def _before_call(self, context: dict[str, Any], **_: Any) -> Answer | None:
        context.pop(_AFTER, None)
        owner = self._owner
        if not owner.enabled:
            return None
        self._log.add("situation.archive_writes")
        if owner.invocation is not None and self._drawn_for is not owner.invocation:
            self._drawn_for = owner.invocation
            if self._rng.random() < self._rates.kill_before_archive:
                self._log.add("archive.kill_before_archive")
                owner.killed_before = "archive"
                raise owner.kill_invocation("killed between the counters' commit and the archive write")
        rates = self._rates
        roll = self._rng.random()
        kind = None
        for name, rate in (
            ("connect_failure", rates.connect_failure),
            ("lost_response", rates.lost_response),
            ("throttle", rates.throttle),
        ):
            if roll < rate:
                kind = name
                break
            roll -= rate
        if kind is None:
            return None
        self._log.add(f"archive.{kind}")
        if kind == "connect_failure":
            raise EndpointConnectionError(endpoint_url="chaos://archive-connect-failure")
        if kind == "throttle":
            return error_answer("SlowDown", status=503, message="chaos: please reduce your request rate")
        context[_AFTER] = "lose"
        return None

    def _after_call(self, context: dict[str, Any], **_: Any) -> None:
        if context.pop(_AFTER, None) == "lose":
            raise lost_response()


def _after_commit_write(operation: str, params: dict[str, Any]) -> str | None:
    """``gauges`` for ``tally.store.gauges``' ``UpdateItem``, ``members`` for ``tally.store.distinct``'s
    ``TransactWriteItems`` (by the attributes they name), else None."""
    if operation not in (UPDATE, TRANSACT):
        return None
    request = json.loads(params["body"])
    if operation == UPDATE:
        names = request.get("ExpressionAttributeNames", {}).values()
        return "gauges" if any(name.startswith(tuple(GAUGE_PREFIXES.values())) for name in names) else None
    for action in request.get("TransactItems", []):
        update = action.get("Update", {})
        names = update.get("ExpressionAttributeNames", {}).values()
        if update.get("UpdateExpression", "").startswith("REMOVE ") and any(n.startswith(WINDOW_PREFIX) for n in names):
            return "window_transfer"
        if any(name.startswith(_COUNT_PREFIX) for name in names):
            return "members"
    return None


def _key_of(key: dict[str, Any]) -> str:
    """The counter key an item belongs to (a hot key's shard and a member's partition name it too)."""
    return str(key.get("pk", {}).get("S", "")).split(SHARD_SEPARATOR)[0]


def _make_stale(params: dict[str, Any]) -> None:
    """A window move's first condition value, one more than read: a late event's ADD seen by DynamoDB only."""
    request = json.loads(params["body"])
    for action in request["TransactItems"]:
        update = action.get("Update", {})
        if update.get("UpdateExpression", "").startswith("REMOVE "):
            value = update["ExpressionAttributeValues"][":w0"]
            value["N"] = str(Decimal(value["N"]) + 1)
            params["body"] = json.dumps(request).encode()
            return


_COUNT_PREFIX: Final = distinct_attribute("")


def _claim_kind(actions: list[dict[str, Any]]) -> str | None:
    """``open`` or ``claim`` for the journal's claim transactions (by their first action), else None."""
    if not actions:
        return None
    first = actions[0]
    put = first.get("Put", {}).get("Item", {})
    if put.get("id", {}).get("S", "").startswith("b#") and put.get("state", {}).get("S") == "PREPARING":
        return "open"
    check = first.get("ConditionCheck", {})
    if check.get("ExpressionAttributeValues", {}).get(":state", {}).get("S") == "PREPARING":
        return "claim"
    return None
