"""The gauges step: write each key's readings of the batch (``tally.store.gauges``) after the commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from tally.core.gauges import batch_gauges, carries_gauges
from tally.core.model import RejectCode, Rejection
from tally.errors import RetryableStoreError, StoreError
from tally.post_commit.step import StepResult

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tally.core.gauges import GaugeSlot, GaugeValue
    from tally.core.model import Message
    from tally.post_commit.step import SettledBatch
    from tally.store.requests import Attempt

_T = TypeVar("_T")

GAUGE_WRITES = "GaugeWrites"
"""Conditional gauge write requests, beside the counters' transactions."""


class GaugeStore(Protocol):
    """The port gauge readings go to (``tally.store.gauges.DynamoDBGaugeStore``); idempotent writes.

    Sends each write request through ``attempt``; raises ``RetryableStoreError`` when a key's write may not have
    happened, ``StoreError`` when DynamoDB refuses it for good.
    """

    def write_gauges(self, key: str, slots: Mapping[GaugeSlot, GaugeValue], attempt: Attempt) -> None: ...


class GaugeStep:
    """Writes the gauges of every message whose counters count, key by key.

    A key's write that fails for now (throttled, its answer lost) is sent again within the invocation
    (``SettledBatch.attempt``): a batch of gauge messages writes many keys, and leaving each such failure to a
    redelivery of the whole batch would fail the batch on most deliveries of a busy table, until the queue's
    redrive policy moved its messages to the dead-letter queue without a reason. Once the invocation is down to
    the time kept for reporting, the keys left are not written: their messages go back to the source.
    """

    def __init__(self, store: GaugeStore | None) -> None:
        self._store = store
        """None: this pipeline writes no gauges, and dead-letters messages that carry some (never drops them)."""

    def admit(self, message: Message) -> Rejection | None:
        if self._store is None and carries_gauges(message):
            return Rejection(RejectCode.INVALID_GAUGE, "this pipeline has no gauge store")
        return None

    def settle(self, batch: SettledBatch) -> StepResult:
        carrying = [message for message in batch.messages if carries_gauges(message)]
        if self._store is None or not carrying:
            return StepResult({GAUGE_WRITES: 0})
        gauges = batch_gauges(carrying)
        sent = [0]

        def counted(send: Callable[[], _T]) -> _T:
            def once() -> _T:
                sent[0] += 1
                return send()

            return batch.attempt(once)

        retry: set[str] = set()
        refused: dict[str, Rejection] = {}
        for key, slots in gauges.updates.items():
            try:
                self._store.write_gauges(key, slots, counted)
            except RetryableStoreError:
                retry |= gauges.sources[key]
            except StoreError as exc:
                why = Rejection(RejectCode.GAUGE_REFUSED, f"counters counted; gauges of {key[:200]!r} refused: {exc}")
                refused.update(dict.fromkeys(gauges.sources[key], why))
        return StepResult({GAUGE_WRITES: sent[0]}, frozenset(retry), refused)
