"""Time in a chaos run: one virtual wall clock shared by everything, and each invocation's deadline.

The wall clock is the real clock plus a skew that only grows. Waiting for an SQS visibility timeout (420 s
for a 60 s function) or a Kinesis retry backoff is done by moving the skew forward instead of sleeping:
the run keeps AWS's timing relations (a redelivered record arrives after the journal lease of a killed
invocation has expired) without taking minutes. A jump is global, like a process paused and resumed: a
running invocation may find that its journal lease expired under it, which the protocol must survive.

An invocation's ``remaining_ms`` is its timeout minus the real time it has taken, minus the delay the
"slow response" fault adds (``Invocation.slow_down``). Its deadline on the virtual clock (``past_virtual_deadline``)
is its start on that clock plus its timeout: a jump may carry the clock past it while the invocation runs, as if
Lambda had paused it for longer than Lambda ever lets an invocation run; the fenced apply's requests, whose prune
horizon leans on that deadline, are not sent past it (``tally_local.chaos.faults``). So that a fenced apply can
finish at all while other consumers wait minutes at a time, an invocation holds the clock from its first fenced
request to its end (``Invocation.hold_clock``): a jump waits for the holds taken before it was asked for to end, at
most ``HOLD_WAIT_S`` of real time (then it jumps anyway, and the deadline rule kills what it must). A hold taken while
a jump waits does not delay it: with a dozen consumers some invocation nearly always holds the clock, and a jump that
waited for none to hold would wait its whole limit every time (the full run's jumps then took most of its time).
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


class VirtualClock:
    """Epoch milliseconds that only move forward, faster than real time when someone waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._holders: set[int] = set()
        self._next_holder = 0
        self._skew_ms = 0
        self.jumped_ms = 0

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

    def advance_to(self, target_ms: int) -> None:
        """Make ``now_ms()`` at least ``target_ms`` (a wait that takes no real time)."""
        with self._lock:
            holding = set(self._holders)
            self._released.wait_for(lambda: holding.isdisjoint(self._holders), timeout=HOLD_WAIT_S)
            gap = target_ms - (time.time_ns() // 1_000_000 + self._skew_ms)
            if gap > 0:
                self._skew_ms += gap
                self.jumped_ms += gap

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
