"""The chaos run's virtual clock: a jump waits for the invocations holding it when it was asked for, not for later ones.

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
