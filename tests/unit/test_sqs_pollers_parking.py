"""An idle local stack's SQS pollers: the first keeps polling, the others park until a receive brings messages
(``tally_local.poller.SqsPollers``), so an idle stack sends two receives a second instead of ten; a parked poller
counts as caught up (it holds nothing), wakes on the first arrival, and on the mapping's stop."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

import tally_local.poller as poller_module
from tally_local.poller import SourceStats, SqsPoller, SqsPollers

WAKE_DEADLINE_S = 10.0
"""How long a test waits for a thread to reach a state (it never waits that long unless the code is wrong)."""


class EmptyQueue:
    """Answers every receive with nothing, counting them."""

    def __init__(self) -> None:
        self.receives = 0

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.receives += 1
        return {}


def _poller(queue: EmptyQueue, group: SqsPollers, *, first: bool, stop: threading.Event) -> SqsPoller:
    return SqsPoller(
        "first" if first else "other",
        sqs=queue,  # type: ignore[arg-type]
        queue_url="queue",
        queue_arn="arn",
        source=SimpleNamespace(batch_size=10, maximum_batching_window_seconds=0),  # type: ignore[arg-type]
        function=None,  # type: ignore[arg-type]
        stats=SourceStats(),
        stop=stop,
        region="us-east-1",
        group=group,
        first=first,
    )


def _until(condition: Any) -> None:
    deadline = time.monotonic() + WAKE_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "the state was never reached"
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty receive's pause, 0 here: what is tested is who parks, not how long a poller pauses."""
    monkeypatch.setattr(poller_module, "_IDLE_QUEUE_POLL_S", 0.0)


def test_a_poller_parks_while_the_first_finds_nothing_and_wakes_when_a_receive_brings_messages() -> None:
    # GIVEN a mapping's first poller and another, on an empty queue, the first having found nothing
    queue, group, stop = EmptyQueue(), SqsPollers(), threading.Event()
    first, other = _poller(queue, group, first=True, stop=stop), _poller(queue, group, first=False, stop=stop)
    assert first.poll_once() is False
    # WHEN the other finds nothing once: it pauses as before; twice: it parks
    assert other.poll_once() is False
    assert not other._parked
    parked = threading.Thread(target=other.poll_once)
    parked.start()
    _until(lambda: other._parked)
    # THEN parked, it sends no receive and counts as caught up (it holds nothing), whatever the moment
    receives = queue.receives
    time.sleep(0.2)
    assert queue.receives == receives
    assert other.caught_up_since(time.monotonic() + 3600)
    # AND a receive bringing messages (anyone's) wakes it
    group.arrived()
    parked.join(WAKE_DEADLINE_S)
    assert not parked.is_alive()
    assert not other._parked


def test_no_poller_parks_while_the_first_is_receiving_messages() -> None:
    # GIVEN the first poller's last receive brought messages (it is busy with them: the queue is not idle)
    queue, group, stop = EmptyQueue(), SqsPollers(), threading.Event()
    other = _poller(queue, group, first=False, stop=stop)
    group.arrived()
    # WHEN another finds nothing again and again, THEN it keeps polling and never parks
    for _ in range(5):
        assert other.poll_once() is False
    assert queue.receives == 5


def test_the_first_poller_never_parks() -> None:
    queue, group, stop = EmptyQueue(), SqsPollers(), threading.Event()
    first = _poller(queue, group, first=True, stop=stop)
    for _ in range(5):
        assert first.poll_once() is False
    assert queue.receives == 5


def test_stopping_wakes_a_parked_poller() -> None:
    # GIVEN a parked poller
    queue, group, stop = EmptyQueue(), SqsPollers(), threading.Event()
    _poller(queue, group, first=True, stop=stop).poll_once()
    other = _poller(queue, group, first=False, stop=stop)
    other.poll_once()
    parked = threading.Thread(target=other.poll_once)
    parked.start()
    _until(lambda: other._parked)
    # WHEN the mapping stops (its stop event, then each poller released)
    stop.set()
    other.release()
    # THEN it returns at once, not after its longest park
    parked.join(WAKE_DEADLINE_S)
    assert not parked.is_alive()
