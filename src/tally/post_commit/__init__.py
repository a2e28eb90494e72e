"""The steps after the counters' commit: gauges, distinct members, the archive, window moves.

``tally.pipeline`` runs them in order over the messages whose counters count and gives each message the
fate they leave it (``step.py``). A new kind of post-commit work is one step here beside its store, added
to ``post_commit_steps``: the pipeline and the metrics report take its figures as they come, and it sends
through ``SettledBatch.attempt`` like every other step (``step.py``: one rule for time, tested for every step
of the list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.post_commit.archive import DEFAULT_PREFIX, ArchiveStep, ArchiveWriter, wall_clock_ms
from tally.post_commit.gauges import GaugeStep, GaugeStore
from tally.post_commit.members import DistinctStore, MemberStep
from tally.post_commit.step import BESIDE_LANDING, PostCommitStep, SettledBatch, StepResult, attempt_within
from tally.post_commit.windows import WindowMover, WindowStep

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.windows import WindowSpec

__all__ = [
    "BESIDE_LANDING",
    "ArchiveStep",
    "ArchiveWriter",
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
    archive: ArchiveWriter | None = None,
    archive_prefix: str = DEFAULT_PREFIX,
    clock: Callable[[], int] = wall_clock_ms,
) -> tuple[PostCommitStep, ...]:
    """The steps in the order they run; a step without its store refuses (at admission) what needs it.

    How long and how often a step's requests are tried is not a step's: each sends through the batch's
    ``SettledBatch.attempt`` (``step.py``), which the pipeline builds from the commit's retry policy. The
    archive (None: off) runs after the writes that make counters whole and before the window moves, which are
    optional (a window left on its key item is read exactly all the same); ``clock`` is read for its records.
    """
    return (
        GaugeStep(gauges),
        MemberStep(distinct, windows),
        ArchiveStep(archive, prefix=archive_prefix, clock=clock),
        WindowStep(mover),
    )
