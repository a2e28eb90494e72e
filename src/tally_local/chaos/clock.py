"""Time in a chaos run: one virtual wall clock shared by everything, and each invocation's deadline.

The wall clock is the real clock plus a skew that only grows. Waiting for an SQS visibility timeout (420 s
for a 60 s function) or a Kinesis retry backoff is done by moving the skew forward instead of sleeping:
the run keeps AWS's timing relations (a redelivered record arrives after the journal lease of a killed
invocation has expired) without taking minutes. A jump is global, like a process paused and resumed: a
running invocation may find that its journal lease expired under it, which the protocol must survive.

An invocation's ``remaining_ms`` is its timeout minus the real time it has taken, minus the delay the
"slow response" fault adds (``Invocation.slow_down``). Its deadline on the virtual clock (``Invocation.send_fenced``)
is its start on that clock plus its timeout: a jump may carry the clock past it while the invocation runs, as if
Lambda had paused it for longer than Lambda ever lets an invocation run; the fenced apply's requests, whose prune
horizon leans on that deadline, are not sent past it (``tally_local.chaos.faults``). So that a fenced apply can
finish at all while other consumers wait minutes at a time, an invocation holds the clock from its first fenced
request to its end (``Invocation.hold_clock``): a jump waits for the holds taken before it was asked for to end, at
most ``HOLD_WAIT_S`` of real time (then it jumps anyway, and the deadline rule kills what it must). A hold taken while
a jump waits does not delay it: with a dozen consumers some invocation nearly always holds the clock, and a jump that
waited for none to hold would wait its whole limit every time (the full run's jumps then took most of its time).

A fenced write or DONE that passed its deadline check is **in flight** until its answer comes back
(``Invocation.send_fenced``, ``Invocation.landed``), and a jump never passes over one: once its wait for the holds is
over, a jump stops new fenced requests from being checked (they wait, and are checked against the clock after it),
waits for those in flight to land, then moves the clock. On Lambda a request sent before the deadline lands within
milliseconds, and the prune horizon leans on it (no write of a batch read FENCED lands a timeout after its invocation
started); a jump of minutes while such a write was still on its way (a DynamoDB Local slowed by a loaded machine
answering in over ``HOLD_WAIT_S``) made it land minutes after its deadline, where a mark it relied on may have been
pruned, and counted its part again.
"""

from __future__ import annotations

import threading
import time
from typing import Final

HOLD_WAIT_S: Final = 0.5
"""The longest a jump of the clock waits (real time) for the invocations holding it. Short: a fenced apply of a
thousand items holds it for seconds, every consumer's jump waits for it, and an apply the jump cuts short loses
nothing (the invocation after it sends only the parts still missing). At 2 s, 20 jumps of a ``--config fenced`` run
waited 17.2 s of its 30.5 (7 of them the whole limit); at 0.5 s, 5.7 s of 21.0. At 0.1 s CI was 58 s faster, but the
broken variant "counted copies behind a refused content reported done" then failed to show its archive figures in
two clean-clone runs of two (each passing alone): not shorter until that is understood."""
LANDING_WAIT_S: Final = 60.0
"""The longest a jump waits (real time) for the fenced requests in flight to land: far above any answer of DynamoDB
Local, even on a loaded machine (a request cannot outlive the clients' read timeout and retries); past it the jump
goes anyway, and ``VirtualClock.late_landings`` says how often, for the run to count."""


class VirtualClock:
    """Epoch milliseconds that only move forward, faster than real time when someone waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._holders: set[int] = set()
        self._next_holder = 0
        self._flying: set[int] = set()
        """Fenced requests checked against their deadline and not answered yet (tokens from ``_next_holder``)."""
        self._jumping = 0
        """Jumps past their wait for the holds, waiting for the requests in flight to land."""
        self._skew_ms = 0
        self.jumped_ms = 0
        self.late_landings = 0
        """Jumps that went with a fenced request still in flight (``LANDING_WAIT_S`` passed)."""

    def hold(self) -> int:
        """Keep the clock from jumping until ``release`` of the token returned (or ``HOLD_WAIT_S``)."""
        with self._lock:
            self._next_holder += 1
            self._holders.add(self._next_holder)
            return self._next_holder

    def release(self, holder: int) -> None:
        with self._lock:
            self._holders.discard(holder)
            self._released.notify_all()

    def now_ms(self) -> int:
        with self._lock:
            return time.time_ns() // 1_000_000 + self._skew_ms

    def take_off(self, deadline_ms: int) -> int | None:
        """A fenced request about to be sent by an invocation whose deadline is ``deadline_ms``: its token while it
        is in flight, or None when the clock has passed that deadline (Lambda would have stopped it). Checked after
        any jump under way, never before one that would carry the clock past the deadline while it flies."""
        with self._lock:
            self._released.wait_for(lambda: not self._jumping)
            if time.time_ns() // 1_000_000 + self._skew_ms > deadline_ms:
                return None
            self._next_holder += 1
            self._flying.add(self._next_holder)
            return self._next_holder

    def landed(self, token: int) -> None:
        """The answer (or the failure) of the request ``take_off`` gave ``token`` came back."""
        with self._lock:
            self._flying.discard(token)
            self._released.notify_all()

    def advance_to(self, target_ms: int) -> None:
        """Make ``now_ms()`` at least ``target_ms`` (a wait that takes no real time)."""
        with self._lock:
            holding = set(self._holders)
            self._released.wait_for(lambda: holding.isdisjoint(self._holders), timeout=HOLD_WAIT_S)
            self._jumping += 1
            try:
                if not self._released.wait_for(lambda: not self._flying, timeout=LANDING_WAIT_S):
                    self.late_landings += 1
                gap = target_ms - (time.time_ns() // 1_000_000 + self._skew_ms)
                if gap > 0:
                    self._skew_ms += gap
                    self.jumped_ms += gap
            finally:
                self._jumping -= 1
                self._released.notify_all()

    def wait(self, duration_ms: int) -> None:
        self.advance_to(self.now_ms() + duration_ms)


class Invocation:
    """One Lambda invocation's deadline; ``remaining_ms`` is what the pipeline is given."""

    def __init__(self, timeout_ms: int, clock: VirtualClock | None = None) -> None:
        self._timeout_ms = timeout_ms
        self._started = time.monotonic()
        self._lost_ms = 0
        self._clock = clock
        self._deadline_ms = clock.now_ms() + timeout_ms if clock is not None else None
        self.killed = False
        """Lambda stopped it (a kill the run drew): nothing it sends after that leaves, from any of its threads."""
        self._holding: int | None = None
        """The clock's token for this invocation's hold, while it holds it."""
        self._hold_lock = threading.Lock()

    def hold_clock(self) -> None:
        """Hold the run's clock until ``release_clock`` (once, whichever thread of the invocation asks first)."""
        with self._hold_lock:
            if self._clock is not None and self._holding is None:
                self._holding = self._clock.hold()

    def release_clock(self) -> None:
        with self._hold_lock:
            if self._clock is not None and self._holding is not None:
                self._clock.release(self._holding)
                self._holding = None

    def kill(self) -> None:
        self.killed = True

    @property
    def past_virtual_deadline(self) -> bool:
        """The run's clock has passed the invocation's start on it plus its timeout."""
        return self._clock is not None and self._deadline_ms is not None and self._clock.now_ms() > self._deadline_ms

    def send_fenced(self) -> int | None:
        """A fenced write or DONE about to leave: its token while in flight (0 without a clock), or None if the run's
        clock has passed the invocation's start on it plus its timeout (``VirtualClock.take_off``)."""
        if self._clock is None or self._deadline_ms is None:
            return 0
        return self._clock.take_off(self._deadline_ms)

    def landed(self, token: int) -> None:
        if self._clock is not None and token:
            self._clock.landed(token)

    def remaining_ms(self) -> int:
        if self.killed:
            return -1
        elapsed_ms = int((time.monotonic() - self._started) * 1000)
        return self._timeout_ms - elapsed_ms - self._lost_ms

    def slow_down(self, remaining_after_ms: int) -> None:
        """A slow response: leave ``remaining_after_ms`` (negative: the deadline passed while waiting)."""
        self._lost_ms += max(0, self.remaining_ms() - remaining_after_ms)

    @property
    def timed_out(self) -> bool:
        return self.remaining_ms() < 0
