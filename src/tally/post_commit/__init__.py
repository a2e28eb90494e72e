"""The steps after the counters' commit: gauges, distinct members, window moves.

``tally.pipeline`` runs them in order over the messages whose counters count and gives each message the
fate they leave it (``step.py``). A new kind of post-commit work is one step here beside its store, added
to ``post_commit_steps``: the pipeline and the metrics report take its figures as they come, and it sends
through ``SettledBatch.attempt`` like every other step (``step.py``: one rule for time, tested for every step
of the list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.post_commit.gauges import GaugeStep, GaugeStore
from tally.post_commit.members import DistinctStore, MemberStep
from tally.post_commit.step import PostCommitStep, SettledBatch, StepResult, attempt_within
from tally.post_commit.windows import WindowMover, WindowStep

if TYPE_CHECKING:
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
    "attempt_within",
    "post_commit_steps",
]


def post_commit_steps(
    windows: WindowSpec,
    *,
    gauges: GaugeStore | None = None,
    distinct: DistinctStore | None = None,
    mover: WindowMover | None = None,
) -> tuple[PostCommitStep, ...]:
    """The steps in the order they run; a step without its store refuses (at admission) what needs it.

    How long and how often a step's requests are tried is not a step's: each sends through the batch's
    ``SettledBatch.attempt`` (``step.py``), which the pipeline builds from the commit's retry policy.
    """
    return (GaugeStep(gauges), MemberStep(distinct, windows), WindowStep(mover))
