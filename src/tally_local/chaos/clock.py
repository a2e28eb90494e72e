"""Time in a chaos run: one virtual wall clock shared by everything, and each invocation's deadline.

The wall clock is the real clock plus a skew that only grows. Waiting for an SQS visibility timeout (420 s
for a 60 s function) or a Kinesis retry backoff is done by moving the skew forward instead of sleeping:
the run keeps AWS's timing relations (a redelivered record arrives after the journal lease of a killed
invocation has expired) without taking minutes. A jump is global, like a process paused and resumed: a
running invocation may find that its journal lease expired under it, which the protocol must survive.

An invocation's ``remaining_ms`` is its timeout minus the real time it has taken, minus the delay the
"slow response" fault adds (``Invocation.slow_down``).
"""

from __future__ import annotations

import threading
import time


class VirtualClock:
    """Epoch milliseconds that only move forward, faster than real time when someone waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._skew_ms = 0
        self.jumped_ms = 0

    def now_ms(self) -> int:
        with self._lock:
            return time.time_ns() // 1_000_000 + self._skew_ms

    def advance_to(self, target_ms: int) -> None:
        """Make ``now_ms()`` at least ``target_ms`` (a wait that takes no real time)."""
        with self._lock:
            gap = target_ms - (time.time_ns() // 1_000_000 + self._skew_ms)
            if gap > 0:
                self._skew_ms += gap
                self.jumped_ms += gap

    def wait(self, duration_ms: int) -> None:
        self.advance_to(self.now_ms() + duration_ms)


class Invocation:
    """One Lambda invocation's deadline; ``remaining_ms`` is what the pipeline is given."""

    def __init__(self, timeout_ms: int) -> None:
        self._timeout_ms = timeout_ms
        self._started = time.monotonic()
        self._lost_ms = 0

    def remaining_ms(self) -> int:
        elapsed_ms = int((time.monotonic() - self._started) * 1000)
        return self._timeout_ms - elapsed_ms - self._lost_ms

    def slow_down(self, remaining_after_ms: int) -> None:
        """A slow response: leave ``remaining_after_ms`` (negative: the deadline passed while waiting)."""
        self._lost_ms += max(0, self.remaining_ms() - remaining_after_ms)

    @property
    def timed_out(self) -> bool:
        return self.remaining_ms() < 0
