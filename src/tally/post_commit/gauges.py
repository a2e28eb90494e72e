"""The gauges step: write each key's readings of the batch (``tally.store.gauges``) after the commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tally.core.gauges import batch_gauges, carries_gauges
from tally.core.model import RejectCode, Rejection
from tally.errors import RetryableStoreError, StoreError
from tally.post_commit.step import StepResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.gauges import GaugeSlot, GaugeValue
    from tally.core.model import Message
    from tally.post_commit.step import SettledBatch

GAUGE_WRITES = "GaugeWrites"
"""Conditional gauge write requests, beside the counters' transactions."""


class GaugeStore(Protocol):
    """The port gauge readings go to (``tally.store.gauges.DynamoDBGaugeStore``); idempotent writes.

    Returns the write requests made; raises ``RetryableStoreError`` when a key's write may not have
    happened, ``StoreError`` when DynamoDB refuses it for good.
    """

    def write_gauges(self, key: str, slots: Mapping[GaugeSlot, GaugeValue]) -> int: ...


class GaugeStep:
    """Writes the gauges of every message whose counters count, key by key."""

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
        requests = 0
        retry: set[str] = set()
        refused: dict[str, Rejection] = {}
        for key, slots in gauges.updates.items():
            try:
                requests += self._store.write_gauges(key, slots)
            except RetryableStoreError:
                retry |= gauges.sources[key]
            except StoreError as exc:
                why = Rejection(RejectCode.GAUGE_REFUSED, f"counters counted; gauges of {key[:200]!r} refused: {exc}")
                refused.update(dict.fromkeys(gauges.sources[key], why))
        return StepResult({GAUGE_WRITES: requests}, frozenset(retry), refused)
