"""The steps after the counters' commit: gauges, distinct members, window moves.

``tally.pipeline`` runs them in order over the messages whose counters count and gives each message the
fate they leave it (``step.py``). A new kind of post-commit work is one step here beside its store, added
to ``post_commit_steps``: the pipeline and the metrics report take its figures as they come.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tally.commit.retrying import DEFAULT_RETRY_POLICY, RetryPolicy
from tally.post_commit.gauges import GaugeStep, GaugeStore
from tally.post_commit.members import DistinctStore, MemberStep
from tally.post_commit.step import PostCommitStep, SettledBatch, StepResult
from tally.post_commit.windows import WindowMover, WindowStep

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.windows import WindowSpec

__all__ = [
    "DistinctStore",
    "GaugeStep",
    "GaugeStore",
    "MemberStep",
    "PostCommitStep",
    "SettledBatch",
    "StepResult",
    "WindowMover",
    "WindowStep",
    "post_commit_steps",
]


def post_commit_steps(
    windows: WindowSpec,
    *,
    gauges: GaugeStore | None = None,
    distinct: DistinctStore | None = None,
    mover: WindowMover | None = None,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[PostCommitStep, ...]:
    """The steps in the order they run; a step without its store refuses (at admission) what needs it.

    ``policy`` and ``sleep`` are the commit's (``tally.commit.retrying``): how a gauge write or member
    transaction or window move that fails for now is retried within the invocation.
    """
    return (
        GaugeStep(gauges, policy=policy, sleep=sleep),
        MemberStep(distinct, windows, policy=policy, sleep=sleep),
        WindowStep(mover, policy=policy, sleep=sleep),
    )
