"""What the sources know about each message, and the Jepsen-style check made from it during the run.

A message is *attempted* once an invocation that carries it has started, and *acknowledged* once a
handler's answer that marks its record done has been accepted by the source. A message counts once
whatever the number of its records, so for the ``count`` counter (every event adds 1, so it only grows)
any read of a key must lie between the acknowledged and the attempted sums of that key:

    acknowledged(before the read)  <=  value read  <=  attempted(after the read)

``JepsenMonitor`` samples keys on its own (fault-free) client while the consumers run and records every
read that falls outside that interval. It reads when the ledger has moved (an invocation started or was
answered), not on a wall-clock beat, so the reads follow the run's progress: on a 20 ms timer a slower or busier
machine made more of them for the same run (a focused run of 90 invocations read 737 times alone and 1,885 times at
5 ms; its reads were about a third of its CPU), where now it reads about once per invocation wherever it runs.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from tally_local.chaos.workload import TRACER

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from tally_local.chaos.workload import ValidMessage


_STOP_CHECK_S = 0.1
"""How long a monitor waits for the ledger to move before it looks whether it was stopped."""


@dataclass(frozen=True, slots=True)
class Violation:
    key: str
    acknowledged: Decimal
    read: Decimal
    attempted: Decimal


class Ledger:
    """Attempted and acknowledged messages, with their ``count`` sums per key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)
        self._changes = 0
        self._attempted: set[str] = set()
        self._acknowledged: set[str] = set()
        self._attempted_sum: dict[str, Decimal] = defaultdict(Decimal)
        self._acknowledged_sum: dict[str, Decimal] = defaultdict(Decimal)

    def attempt(self, messages: Iterable[ValidMessage]) -> None:
        with self._lock:
            self._add(messages, self._attempted, self._attempted_sum)
            self._changed()

    def acknowledge(self, messages: Iterable[ValidMessage]) -> None:
        """Records reported done: applied, or (doomed ones) dead-lettered, which counts nothing."""
        with self._lock:
            self._add((m for m in messages if not m.doomed), self._acknowledged, self._acknowledged_sum)
            self._changed()

    def _changed(self) -> None:
        self._changes += 1
        self._moved.notify_all()

    @property
    def changes(self) -> int:
        """How often the ledger has moved (``attempt`` or ``acknowledge`` called): the run's progress."""
        with self._lock:
            return self._changes

    def wait_for_change(self, seen: int, timeout_s: float) -> int:
        """Block until the ledger has moved past ``seen`` changes, or ``timeout_s`` passed; the changes now."""
        with self._moved:
            self._moved.wait_for(lambda: self._changes != seen, timeout_s)
            return self._changes

    @staticmethod
    def _add(messages: Iterable[ValidMessage], seen: set[str], sums: dict[str, Decimal]) -> None:
        for message in messages:
            if message.message_id in seen:
                continue
            seen.add(message.message_id)
            for key, counters in message.sums.items():
                sums[key] += counters.get(TRACER, Decimal(0))

    def acknowledged(self, key: str) -> Decimal:
        with self._lock:
            return self._acknowledged_sum.get(key, Decimal(0))

    def attempted(self, key: str) -> Decimal:
        with self._lock:
            return self._attempted_sum.get(key, Decimal(0))

    @property
    def acknowledged_messages(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._acknowledged)

    @property
    def attempted_messages(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._attempted)


class MessageTrail:
    """What happened to each message body during the run, line by line (thread-safe): each delivery to an
    invocation and how it ended for that record, each letter redriven, each Kinesis give-up. The archive's
    verdict names the messages it finds short with their trails (``tally_local.chaos.archive``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: dict[str, list[str]] = defaultdict(list)

    def note(self, body: str, line: str) -> None:
        with self._lock:
            self._lines[body].append(line)

    def of(self, body: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._lines.get(body, ()))


class JepsenMonitor:
    """Reads random keys while the run goes on, once per move of the ledger and at most once per ``interval_s``;
    ``read`` returns a key's ``count`` (all shards summed)."""

    def __init__(
        self, ledger: Ledger, keys: list[str], read: Callable[[str], Decimal], interval_s: float, seed: int
    ) -> None:
        self._ledger = ledger
        self._keys = keys
        self._read = read
        self._interval_s = interval_s
        self._rng = random.Random(f"{seed}:jepsen")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jepsen", daemon=True)
        self.reads = 0
        self.violations: list[Violation] = []
        self.error: BaseException | None = None

    def __enter__(self) -> JepsenMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            seen = self._ledger.changes  # what the setup wrote before the consumers started is no progress
            while not self._stop.wait(self._interval_s):
                changes = self._ledger.wait_for_change(seen, _STOP_CHECK_S)
                if changes == seen:
                    continue
                seen = changes
                key = self._rng.choice(self._keys)
                low = self._ledger.acknowledged(key)
                value = self._read(key)
                high = self._ledger.attempted(key)
                self.reads += 1
                if not low <= value <= high:
                    self.violations.append(Violation(key, low, value, high))
        except BaseException as exc:  # reported by the harness: a monitor that died checked nothing
            self.error = exc
