"""Run a write plan against the counter store, with the retry rules that keep counting exactly-once.

Per chunk (one transaction):

- committed: its messages are applied.
- cancelled because some markers exist: those messages were applied before (a duplicate, or an earlier
  attempt whose response was lost), so they are dropped as already applied and the rest is re-planned
  and tried again at once.
- throttled, conflicted or of unknown outcome: retried with exponential backoff and full jitter while
  the invocation has time left; what is still unapplied when time runs short is reported as failed so
  the source redelivers it (the markers make that redelivery safe).
- rejected by DynamoDB itself (a counter would leave the Number range): the chunk is split into
  single-message transactions so only the responsible message is dead-lettered.

Any other store error propagates and fails the whole batch: a missing table or a denied permission must
not quietly dead-letter every message.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_random_exponential

from tally.core.model import RejectCode, Rejection
from tally.core.plan import MAX_TRANSACTION_ACTIONS, Chunk, plan_transactions
from tally.errors import MarkersExistError, RetryableStoreError, StoreError, WriteRejectedError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tally.core.plan import WritePlan


class CounterStore(Protocol):
    """The port the applier writes through (``tally.store.dynamodb.DynamoDBCounterStore`` in production)."""

    def apply(self, chunk: Chunk, now_ms: int) -> None: ...

    def is_applied(self, message_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try a throttled or conflicted transaction before handing it back to the source."""

    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    max_attempts: int = 8
    reserve_ms: int = 3_000
    """Time kept back for reporting and dead-lettering; no attempt starts inside it."""


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    """What happened to each message of a plan."""

    applied: frozenset[str] = frozenset()
    already_applied: frozenset[str] = frozenset()
    rejected: Mapping[str, Rejection] = field(default_factory=dict)
    unapplied: frozenset[str] = frozenset()
    applied_events: int = 0
    transactions: int = 0
    retries: int = 0


class Applier:
    """Applies write plans chunk by chunk through a ``CounterStore``."""

    def __init__(
        self,
        store: CounterStore,
        policy: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        max_actions: int = MAX_TRANSACTION_ACTIONS,
    ) -> None:
        self._store = store
        self._policy = policy
        self._sleep = sleep
        self._max_actions = max_actions

    def apply(self, plan: WritePlan, now_ms: int, remaining_ms: Callable[[], int]) -> ApplyOutcome:
        """Apply every chunk of ``plan``; ``remaining_ms`` reports the invocation's time left."""
        applied: set[str] = set()
        already: set[str] = set()
        rejected: dict[str, Rejection] = dict(plan.rejected)
        unapplied: set[str] = set()
        applied_events = transactions = retries = 0
        pending = deque(plan.chunks)
        while pending:
            chunk = pending.popleft()
            if remaining_ms() < self._policy.reserve_ms:
                unapplied.update(chunk.message_ids)
                continue
            attempts = self._attempts(remaining_ms)
            try:
                for attempt in attempts:
                    with attempt:
                        transactions += 1
                        self._store.apply(chunk, now_ms)
            except MarkersExistError as exists:
                if not exists.message_ids & set(chunk.message_ids):
                    raise StoreError("markers reported for messages outside the transaction") from exists
                already.update(exists.message_ids)
                rest = [message for message in chunk.messages if message.message_id not in exists.message_ids]
                pending.extendleft(reversed(plan_transactions(rest, self._max_actions).chunks))
            except RetryableStoreError:
                unapplied.update(chunk.message_ids)
            except WriteRejectedError as refused:
                if len(chunk.messages) > 1:
                    singles = [plan_transactions([message], self._max_actions) for message in chunk.messages]
                    pending.extendleft(reversed([single.chunks[0] for single in singles]))
                elif self._store.is_applied(chunk.message_ids[0]):
                    # DynamoDB checks number ranges before conditions: a redelivered message that was
                    # applied before can be refused for the range instead of cancelled by its marker.
                    already.add(chunk.message_ids[0])
                else:
                    detail = f"DynamoDB refused the increment: {refused.detail}"
                    rejected[chunk.message_ids[0]] = Rejection(RejectCode.COUNTER_OUT_OF_RANGE, detail)
            else:
                applied.update(chunk.message_ids)
                applied_events += chunk.event_count
            finally:
                retries += attempts.statistics.get("attempt_number", 1) - 1
        return ApplyOutcome(
            applied=frozenset(applied),
            already_applied=frozenset(already),
            rejected=rejected,
            unapplied=frozenset(unapplied),
            applied_events=applied_events,
            transactions=transactions,
            retries=retries,
        )

    def _attempts(self, remaining_ms: Callable[[], int]) -> Retrying:
        policy = self._policy

        def out_of_time_or_attempts(state: RetryCallState) -> bool:
            worst_wait_ms = policy.max_delay_s * 1000
            return state.attempt_number >= policy.max_attempts or (
                remaining_ms() < policy.reserve_ms + worst_wait_ms
            )

        return Retrying(
            retry=retry_if_exception_type(RetryableStoreError),
            wait=wait_random_exponential(multiplier=policy.base_delay_s, max=policy.max_delay_s),
            stop=out_of_time_or_attempts,
            reraise=True,
            sleep=self._sleep,
        )
