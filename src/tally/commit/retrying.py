"""How the commit protocol's store calls are run: retried with backoff while the invocation has time.

Throttling, transaction conflicts and lost responses (``RetryableStoreError``) are retried with
exponential backoff and full jitter (tenacity) until ``RetryPolicy.max_attempts`` or until the next wait
could eat into the time kept back for reporting (``reserve_ms``); then the last error goes to the
protocol, which hands the records concerned back to the source. Retrying is safe because every write is
conditional on idempotency markers or on a journal state (docs/journal.md). Any other error propagates
at once: a missing table or a denied permission must fail the batch, not be retried into a timeout.

Steps may be run from several threads at once (a round's key-disjoint direct transactions): the counts
are taken under a lock, and each step gets its own ``Retrying``.

This module owns the deadline and the counting of requests and retries; it knows nothing of markers,
batches or messages, and must not decide what a failure means (``tally.commit.protocol`` does).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_random_exponential

from tally.errors import RetryableStoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.commit.fates import Figures

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try a throttled or conflicted request before handing the records back to the source."""

    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    max_attempts: int = 8
    reserve_ms: int = 3_000
    """Time kept back for reporting and dead-lettering; no step starts inside it."""
    lease_margin_ms: int = 60_000
    """How long past the invocation's deadline its journal batch stays protected from abort."""


DEFAULT_RETRY_POLICY = RetryPolicy()


class RetryingSteps:
    """Runs one invocation's store steps under ``policy`` (the ``tally.commit.ports.Steps`` port)."""

    def __init__(
        self,
        policy: RetryPolicy,
        now_ms: int,
        remaining_ms: Callable[[], int],
        figures: Figures,
        sleep: Callable[[float], None],
    ) -> None:
        self._policy = policy
        self._now_ms = now_ms
        self._remaining_ms = remaining_ms
        self._figures = figures
        self._sleep = sleep
        self._counting = threading.Lock()
        """A round's direct transactions may run on several threads (``CommitProtocol.direct_all``)."""

    def write(self, step: Callable[[], T]) -> T:
        return self._attempt(step, counts_as_request=True)

    def read(self, step: Callable[[], T]) -> T:
        return self._attempt(step, counts_as_request=False)

    def may_start(self) -> bool:
        return self._remaining_ms() >= self._policy.reserve_ms

    def lease_until_ms(self) -> int:
        # The invocation cannot run past now + remaining; the margin keeps a slow one's batch safe beyond it.
        return self._now_ms + self._remaining_ms() + self._policy.lease_margin_ms

    def _attempt(self, step: Callable[[], T], *, counts_as_request: bool) -> T:
        """Run ``step``, retrying retryable failures with backoff while time and attempts allow."""

        def counted() -> T:
            if counts_as_request:
                with self._counting:
                    self._figures.requests += 1
            return step()

        return retried(counted, self._policy, self._remaining_ms, self._sleep, on_retries=self._count_retries)

    def _count_retries(self, retries: int) -> None:
        with self._counting:
            self._figures.retries += retries


def retried(
    step: Callable[[], T],
    policy: RetryPolicy,
    remaining_ms: Callable[[], int],
    sleep: Callable[[float], None],
    *,
    on_retries: Callable[[int], None] | None = None,
) -> T:
    """Run one store call under ``policy``, retrying a ``RetryableStoreError`` with backoff.

    Retries until ``policy.max_attempts`` or until the next wait could eat into ``policy.reserve_ms``, then
    raises the last error; ``on_retries`` hears how many retries were made, whatever the outcome. The commit's
    steps run through ``RetryingSteps``; a post-commit write (``tally.post_commit``) calls this directly, so a
    write that fails for now is retried within the invocation, not left to a redelivery of its whole batch.
    """

    def out_of_time_or_attempts(state: RetryCallState) -> bool:
        worst_wait_ms = policy.max_delay_s * 1000
        return state.attempt_number >= policy.max_attempts or (remaining_ms() < policy.reserve_ms + worst_wait_ms)

    retrying = Retrying(
        retry=retry_if_exception_type(RetryableStoreError),
        wait=wait_random_exponential(multiplier=policy.base_delay_s, max=policy.max_delay_s),
        stop=out_of_time_or_attempts,
        reraise=True,
        sleep=sleep,
    )
    try:
        for attempt in retrying:
            with attempt:
                return step()
    finally:
        if on_retries is not None:
            on_retries(retrying.statistics.get("attempt_number", 1) - 1)
    raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover
