"""What a post-commit step is: work for the messages whose counters count, and one fate for each of them.

A step runs after the counters' commit, never inside it: its writes are conditional or of other items, and
a failed condition inside the counters' transaction would cancel the counters too. It runs for the
messages applied now and for those applied before (a marker): a crash between a commit and a step leaves
the marker, and the redelivery that meets it runs the step again, so every step must be idempotent.

A step leaves each message it could not settle exactly one fate besides "done":

- ``retry``: its write may not have happened and may succeed later (throttling, a lost answer, time out):
  the message is reported failed, and the redelivery writes again;
- ``refused``: its write can never succeed (DynamoDB refuses it for good, e.g. a key's item at the 400 KB
  item limit): the message is dead-lettered with a code that names the step and a detail that says why.
  Its counters count; a redrive once the cause is gone meets the marker and runs the step again.

A step must not raise for a write it made: a batch that fails after its commit is redelivered and fails
again, forever, on an error that will not go away.

**One rule for time, the same for every step**: a step sends each of its requests through the batch's
``SettledBatch.attempt`` (its store's port takes it), and that is the only way it has to send: a step holds no
retry policy and no clock of its own. The pipeline builds the attempt once per batch (``attempt_within``,
under the commit's retry policy): a request that fails for now is sent again while the invocation has time,
and none starts inside the time the policy keeps for reporting (``RetryPolicy.reserve_ms``), where the
attempt raises ``RetryableStoreError`` at once and the step leaves its messages to a redelivery (or its
optional work to a later batch). A step writing past that point runs the invocation past its deadline: Lambda
kills it, and the whole batch comes back instead of a partial report. ``tests/unit/test_post_commit_steps.py``
holds every step of the handlers' list to the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from tally.commit.retrying import retried
from tally.errors import RetryableStoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.commit.retrying import RetryPolicy
    from tally.core.aggregate import MessageTotals
    from tally.core.ledger import Commit
    from tally.core.model import Message, Rejection, SourceRecord
    from tally.store.requests import Attempt

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SettledBatch:
    """The batch's distinct messages whose counters count (applied now, or before), in source order."""

    messages: Sequence[Message]
    totals: Sequence[MessageTotals]
    """The same messages, netted per counter item (what was committed for them)."""
    now_ms: int
    remaining_ms: Callable[[], int]
    attempt: Attempt
    """How a step sends each of its requests (see the module): the batch's deadline and the commit's retries."""
    commits: Mapping[str, Commit] = field(default_factory=dict)
    """Message id -> the commit that counted it (its marker's; absent when a marker was met without it)."""
    counted_here: frozenset[str] = frozenset()
    """The ids this invocation committed (the others' markers were met: counted before)."""
    sources: Mapping[str, SourceRecord] = field(default_factory=dict)
    """Message id -> the record that delivered it (the first, when the batch held copies)."""
    landing: frozenset[str] = frozenset()
    """The ids whose deltas were still landing when the step was given the batch (their FENCED batch's item writes
    in flight beside it): only a step that declares ``BESIDE_LANDING`` is ever given such a batch."""


BESIDE_LANDING: Final = "beside_landing"
"""The class attribute (True) of a step that needs only the messages' fates, not their deltas on the items: the
pipeline runs it while the last FENCED batch's item writes land (``tally.pipeline``). The archive's write does."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """A step's figures (metric name -> count, every name every batch) and the messages it left unsettled."""

    figures: Mapping[str, int]
    retry: frozenset[str] = frozenset()
    """Ids whose write may succeed later: reported failed, redelivered."""
    refused: Mapping[str, Rejection] = field(default_factory=dict)
    """Ids whose write can never succeed, and why: dead-lettered."""


class PostCommitStep(Protocol):
    """One job after the commit (``tally.post_commit``): gauges, distinct members, the archive, window moves."""

    def admit(self, message: Message) -> Rejection | None:
        """Refuse, before anything is committed, a message this step could never serve (no store wired)."""
        ...

    def settle(self, batch: SettledBatch) -> StepResult:
        """Do the step's writes for ``batch``; never raise for a write's failure (see the module)."""
        ...


def attempt_within(policy: RetryPolicy, remaining_ms: Callable[[], int], sleep: Callable[[float], None]) -> Attempt:
    """The batch's ``SettledBatch.attempt``: each request under the commit's retry policy (``retried``), and none
    started inside the time the policy keeps for reporting, where it raises ``RetryableStoreError`` at once."""

    def attempt(send: Callable[[], _T]) -> _T:
        if remaining_ms() < policy.reserve_ms:
            raise RetryableStoreError("no time left for a post-commit request: kept for reporting")
        return retried(send, policy, remaining_ms, sleep)

    return attempt
