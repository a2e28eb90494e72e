"""The chaos run's virtual clock: a jump waits for the invocations holding it when it was asked for, not for later ones,
and never passes over a fenced request in flight.

With a dozen consumers some fenced apply nearly always holds the clock; a jump that waited until none held it would
wait its whole limit every time. The limit is made a minute here, so a jump delayed by a later hold shows as a join
that times out, whatever the machine's speed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from tally_local.chaos import clock as clock_module
from tally_local.chaos.clock import VirtualClock

if TYPE_CHECKING:
    import pytest

JUMP_MS = 600_000


def test_a_jump_waits_for_the_holds_before_it_and_not_for_those_taken_while_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock_module, "HOLD_WAIT_S", 60.0)
    clock = VirtualClock()
    earlier = clock.hold()
    jump = threading.Thread(target=clock.advance_to, args=(clock.now_ms() + JUMP_MS,))
    jump.start()
    jump.join(0.3)
    assert jump.is_alive(), "the jump went while an invocation held the clock"
    assert clock.jumped_ms == 0
    later = clock.hold()
    clock.release(earlier)
    jump.join(30)
    assert not jump.is_alive(), "the jump waited for a hold taken after it was asked for"
    assert clock.jumped_ms > 0
    clock.release(later)


def test_a_jump_waits_for_the_fenced_requests_in_flight_to_land(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a fenced write in flight (checked against its invocation's deadline, not answered yet)
    monkeypatch.setattr(clock_module, "HOLD_WAIT_S", 0.0)
    clock = VirtualClock()
    deadline = clock.now_ms() + 60_000
    flying = clock.take_off(deadline)
    assert flying is not None
    # WHEN another consumer's wait moves the clock past that deadline
    jump = threading.Thread(target=clock.advance_to, args=(clock.now_ms() + JUMP_MS,))
    jump.start()
    jump.join(0.3)
    # THEN the clock does not move while the write is on its way (on Lambda it lands within milliseconds)
    assert jump.is_alive(), "the clock jumped over a fenced write in flight"
    assert clock.jumped_ms == 0
    # AND a request leaving while the jump waits is checked against the clock after it: past the deadline, never sent
    late: list[int | None] = []
    leaving = threading.Thread(target=lambda: late.append(clock.take_off(deadline)))
    leaving.start()
    leaving.join(0.3)
    assert leaving.is_alive(), "a request was checked against the clock before the jump under way"
    clock.landed(flying)
    jump.join(30)
    leaving.join(30)
    assert not jump.is_alive()
    assert clock.jumped_ms > 0
    assert late == [None]
    assert clock.late_landings == 0


def test_a_request_before_its_deadline_with_no_jump_under_way_leaves_at_once() -> None:
    clock = VirtualClock()
    token = clock.take_off(clock.now_ms() + 60_000)
    assert token is not None
    clock.landed(token)
    assert clock.take_off(clock.now_ms() - 1) is None
