"""Series reads of the ``win:`` keys while the consumers run and move their windows.

The window messages' events lie in the previous UTC day, so the consumers' window movers take those hours
and that day off the key items during the run (``tally.store.windows``) while later window messages keep
adding to them. ``SeriesReadMonitor`` reads, on its own fault-free client, a random ``win:`` key's day and
its 24 hours as an application would (``CounterReader.series``, or whatever reader the run is given), and
checks each window's ``count`` against the sources' ledger:

    A(W, before the read)  <=  value read for W  <=  P(W, after the read)

where ``A(W, t)`` is the sum of the ``count`` deltas in window ``W`` of the messages acknowledged by ``t``
and ``P(W, t)`` of those attempted by ``t`` (every window message adds 1: counts only grow). A read that is
exact at some instant ``t`` between its start and end satisfies it: the true value at ``t`` counts every
message acknowledged before the read and only messages attempted by its end. A window counted zero times
during a move reads below ``A`` once anything in it was acknowledged; one counted twice reads above ``P``
unless more than half its messages were still in flight. Moves committed while a read was in progress are
counted (``situation.series_reads_during_moves``: a window-move transaction was sent between the read's
start and end), so a run says how often it tried the interleaving.

Moves are few (a container checks a key once an hour of the virtual clock: a few dozen moves a smoke run),
so the run does not leave their meeting with a read to chance. Each consumer's client is ``attach``-ed: a
window-move transaction on a ``win:`` key is held before it is sent (after the fault injector has decided
to send it) until the monitor has started a series read of that key and reached its n-th request, then
sent; the monitor's n-th request waits until the move's answer came back (committed). So the move commits
between two requests of the read, at a position the run draws, as it could on AWS with any timing
(``situation.series_reads_spanning_a_move``). n is drawn from 2 to the number of requests the last read of
that window unit without a move made: a move before the first request or after the last meets no read at
all. A move held longer than ``HOLD_S`` (the monitor busy) is sent anyway. Between moves, the monitor reads
keys a batch has just started to write, once each time the ledger has moved (a batch started or was answered),
as the Jepsen monitor does: the reads follow the run's progress, not the wall clock.

A short pause before each of the monitor's requests (``gap_s``) widens the gaps a move can fall into, as a
reader on a slower network would.
"""

from __future__ import annotations

import json
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tally.core.items import SHARD_SEPARATOR
from tally.core.windows import DAY_MS
from tally.store.schema import PARTITION_KEY, WINDOW_PREFIX
from tally_local.chaos.workload import TRACER

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.windows import WindowSpec
    from tally.reader import CounterReader
    from tally_local.chaos.faults import FaultLog
    from tally_local.chaos.ledger import Ledger
    from tally_local.chaos.workload import Workload

MOVES_SENT = "situation.window_move_transactions"
"""The fault log's count of window-move transactions sent (``tally_local.chaos.faults``)."""
HOLD_S = 0.5
"""Real seconds a window move waits for the monitor to reach the chosen request of a read of its key."""
_HELD = "series-read-move"


@dataclass(frozen=True, slots=True)
class _HeldMove:
    key: str
    go: threading.Event = field(default_factory=threading.Event)
    """Set by the monitor when its read has reached the chosen request: the move may be sent."""
    done: threading.Event = field(default_factory=threading.Event)
    """Set when the move's answer came back (it committed)."""
    early: threading.Event = field(default_factory=threading.Event)
    """Set when the move was sent without waiting for a read (the monitor was busy for ``HOLD_S``)."""


def moved_key(params: Mapping[str, Any]) -> str | None:
    """The first ``win:`` key whose item a window-move ``TransactWriteItems`` request takes windows off."""
    request = json.loads(params["body"])
    for action in request.get("TransactItems", []):
        update = action.get("Update", {})
        names = update.get("ExpressionAttributeNames", {}).values()
        if update.get("UpdateExpression", "").startswith("REMOVE ") and any(n.startswith(WINDOW_PREFIX) for n in names):
            key = str(update["Key"][PARTITION_KEY]["S"]).split(SHARD_SEPARATOR)[0]
            if key.startswith("win:"):
                return key
    return None


@dataclass(frozen=True, slots=True)
class WindowReadViolation:
    key: str
    window: str
    acknowledged: Decimal
    read: Decimal
    attempted: Decimal

    def __str__(self) -> str:
        return f"series read {self.key} {self.window}: {self.read}, outside [{self.acknowledged}, {self.attempted}]"


def window_contributions(workload: Workload, spec: WindowSpec) -> dict[str, list[tuple[str, str, Decimal]]]:
    """Message id -> (key, window id, ``count`` delta) of each on-key-item window its events fall in."""
    found: dict[str, list[tuple[str, str, Decimal]]] = {}
    for message in workload.valid.values():
        for key, deltas, ts in message.parts:
            if not key.startswith("win:") or not isinstance(ts, int) or TRACER not in deltas:
                continue
            for unit in spec.units:
                if unit.on_key_item:
                    window = unit.window_id(unit.start_ms(ts))
                    found.setdefault(message.message_id, []).append((key, window, deltas[TRACER]))
    return found


class SeriesReadMonitor:
    """Reads ``win:`` series while the run goes on and records every window read outside the ledger's bounds."""

    def __init__(
        self,
        ledger: Ledger,
        log: FaultLog,
        contributions: Mapping[str, list[tuple[str, str, Decimal]]],
        reader: CounterReader,
        client: DynamoDBClient,
        *,
        day_ms: int,
        now_ms: Callable[[], int],
        seed: int,
        interval_s: float = 0.01,
        gap_s: float = 0.004,
    ) -> None:
        self._ledger = ledger
        self._log = log
        self._contributions = contributions
        self._keys = sorted({key for parts in contributions.values() for key, _, _ in parts})
        self._reader = reader
        self._day_ms = day_ms
        self._now_ms = now_ms
        self._rng = random.Random(f"{seed}:series-reads")
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="series-reads", daemon=True)
        self._seen: frozenset[str] = frozenset()
        """Messages attempted as of the last key chosen."""
        self._held: queue.Queue[_HeldMove] = queue.Queue()
        self._armed: tuple[int, _HeldMove] | None = None
        """During a read spanning a move: the request before which the move commits, and the move."""
        self._requests = 0
        self._requests_per_read: dict[str, int] = {}
        """Window unit -> the requests its last read without a held move made."""
        self._running = threading.Event()
        self.reads = 0
        self.violations: list[WindowReadViolation] = []
        self.error: BaseException | None = None

        def before_request(**_: Any) -> None:
            if gap_s > 0:
                time.sleep(gap_s)
            self._requests += 1
            armed = self._armed
            if armed is not None and armed[0] == self._requests:
                armed[1].go.set()
                armed[1].done.wait(HOLD_S)

        client.meta.events.register("before-call.dynamodb", before_request)

    def attach(self, client: DynamoDBClient) -> None:
        """Hold ``client``'s window moves on ``win:`` keys until a read of the key is between two requests.

        Registered after the fault injector's hooks: a move the injector fails or answers itself is never
        held (botocore stops at the first hook that answers)."""

        def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            if not self._running.is_set():
                return
            key = moved_key(params)
            if key is None:
                return
            held = _HeldMove(key)
            context[_HELD] = held
            self._held.put(held)
            if not held.go.wait(HOLD_S):
                held.early.set()

        def after(context: dict[str, Any], **_: Any) -> None:
            held = context.pop(_HELD, None)
            if held is not None:
                held.done.set()

        client.meta.events.register("before-call.dynamodb.TransactWriteItems", before)
        client.meta.events.register_first("after-call.dynamodb.TransactWriteItems", after)

    def __enter__(self) -> SeriesReadMonitor:
        if self._keys:
            self._running.set()
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._running.clear()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._release()

    def _release(self) -> None:
        """Let every move still held go (the monitor stops, or did not reach the chosen request)."""
        while True:
            try:
                self._held.get_nowait().go.set()
            except queue.Empty:
                return

    def _bounds(self, key: str, message_ids: frozenset[str]) -> dict[str, Decimal]:
        sums: dict[str, Decimal] = {}
        for message_id in message_ids:
            for part_key, window, delta in self._contributions.get(message_id, ()):
                if part_key == key:
                    sums[window] = sums.get(window, Decimal(0)) + delta
        return sums

    def _loop(self) -> None:
        try:
            seen = self._ledger.changes
            while not self._stop.is_set():
                try:
                    held: _HeldMove | None = self._held.get(timeout=self._interval_s)
                except queue.Empty:
                    held = None
                    changes = self._ledger.changes
                    if changes == seen:
                        continue  # nothing started or answered since the last read: nothing new to read
                    seen = changes
                key = held.key if held is not None else self._next_key()
                unit = self._rng.choice(("day", "hour"))
                moves = self._log.snapshot().get(MOVES_SENT, 0)
                low = self._bounds(key, self._ledger.acknowledged_messages)
                self._requests = 0
                if held is not None and held.early.is_set():
                    held = None  # sent already: read its key all the same
                last = max(2, self._requests_per_read.get(unit, 4))
                self._armed = (self._rng.randint(2, last), held) if held is not None else None
                try:
                    series = self._reader.series(
                        key, unit, self._day_ms, self._day_ms + DAY_MS - 1, now_ms=self._now_ms()
                    )
                finally:
                    self._armed = None
                    if held is not None:
                        held.go.set()  # the read ended before the chosen request: the move goes now
                high = self._bounds(key, self._ledger.attempted_messages)
                if held is None:
                    self._requests_per_read[unit] = self._requests
                self.reads += 1
                self._log.add("situation.series_reads")
                if held is not None and held.done.is_set() and not held.early.is_set():
                    self._log.add("situation.series_reads_spanning_a_move")
                if self._log.snapshot().get(MOVES_SENT, 0) > moves:
                    self._log.add("situation.series_reads_during_moves")
                for window in series.windows:
                    window_id = self._reader_window_id(unit, window.start_ms)
                    value = window.values.get(TRACER, Decimal(0))
                    least, most = low.get(window_id, Decimal(0)), high.get(window_id, Decimal(0))
                    if not least <= value <= most:
                        self.violations.append(WindowReadViolation(key, window_id, least, value, most))
        except BaseException as exc:  # reported by the harness: a monitor that died checked nothing
            self.error = exc

    def _next_key(self) -> str:
        """A key a batch has just started to write, if any (its windows are moved right after its commit,
        so a read now is likely to span the move), else any ``win:`` key."""
        attempted = self._ledger.attempted_messages
        fresh = sorted(
            {key for message_id in attempted - self._seen for key, _, _ in self._contributions.get(message_id, ())}
        )
        self._seen = attempted
        return self._rng.choice(fresh or self._keys)

    def _reader_window_id(self, unit: str, start_ms: int) -> str:
        windows = self._reader.windows
        if windows is None:
            raise RuntimeError("the series reader must know the deployment's windows")
        return windows.unit(unit).window_id(start_ms)
