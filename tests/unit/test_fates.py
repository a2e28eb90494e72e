"""Unit tests for ``tally.commit.fates.Fates``: one fate per message, exactly one by the end.

A message with no fate would be reported done and deleted by the source without being counted; one with
two contradictory fates would be counted and dead-lettered. The ledger refuses both where they happen.
"""

from __future__ import annotations

import pytest

from tally.commit.fates import Fates, Figures, Stall
from tally.core.aggregate import MessageTotals
from tally.core.ledger import Commit
from tally.core.model import RejectCode, Rejection
from tally.errors import UnsettledMessagesError

OUT_OF_RANGE = Rejection(RejectCode.COUNTER_OUT_OF_RANGE, "DynamoDB refused the increment")
NOW = Commit.of_marker(2_000, None)
EARLIER = Commit.of_marker(1_000, "batch-0")


def message(message_id: str, events: int = 1) -> MessageTotals:
    return MessageTotals(message_id, {f"key-{message_id}": {"count": events}}, events)


def test_the_outcome_is_built_from_the_fates_and_the_figures() -> None:
    # GIVEN a fate for each of five messages, and the figures of the call
    fates = Fates(["a", "b", "c", "d", "e"])
    fates.applied([message("a", 3), message("b", 2)], NOW)
    fates.already_applied("c", EARLIER)
    fates.dead_lettered("d", OUT_OF_RANGE)
    fates.held("e", "batch-1", 1_000)
    figures = Figures(requests=4, retries=1, journal_batches=1, refused_chunks=0, marker_reads=1, markers_met=2)
    # WHEN the batch is closed
    outcome = fates.close(figures)
    # THEN each message is where its fate says, and the figures are passed on
    assert outcome.applied == {"a", "b"}
    assert outcome.applied_events == 5
    assert outcome.already_applied == {"c"}
    assert outcome.rejected == {"d": OUT_OF_RANGE}
    assert outcome.unapplied == {"e"}
    assert outcome.stalls == (Stall("e", "batch-1", 1_000),)
    assert (outcome.transactions, outcome.retries, outcome.journal_batches, outcome.marker_reads) == (4, 1, 1, 1)
    # AND each counted message names the commit that counted it (the archive's key)
    assert outcome.commits == {"a": NOW, "b": NOW, "c": EARLIER}


def test_a_marker_met_without_its_applied_time_names_no_commit() -> None:
    fates = Fates(["a"])
    fates.already_applied("a", None)
    outcome = fates.close(Figures())
    assert outcome.already_applied == {"a"}
    assert outcome.commits == {}


def test_a_message_without_a_fate_fails_the_batch_at_close() -> None:
    fates = Fates(["a", "b"])
    fates.applied([message("a")], NOW)
    with pytest.raises(UnsettledMessagesError, match=r"without a fate: \['b'\]"):
        fates.close(Figures())


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("applied", "dead_lettered"),
        ("dead_lettered", "applied"),
        ("failed", "applied"),
        ("already_applied", "failed"),
        ("held", "failed"),
        ("applied", "already_applied"),
    ],
)
def test_a_second_different_fate_is_refused_where_it_is_given(first: str, second: str) -> None:
    fates = Fates(["a"])
    give(fates, first)
    with pytest.raises(UnsettledMessagesError, match="two fates for 'a'"):
        give(fates, second)


@pytest.mark.parametrize("kind", ["applied", "already_applied", "dead_lettered", "failed", "held"])
def test_the_same_fate_twice_is_one_fate(kind: str) -> None:
    fates = Fates(["a"])
    give(fates, kind)
    give(fates, kind)
    outcome = fates.close(Figures())
    assert len(outcome.applied) + len(outcome.already_applied) + len(outcome.rejected) + len(outcome.unapplied) == 1
    assert outcome.applied_events == (1 if kind == "applied" else 0)


def test_a_fate_for_a_message_outside_the_batch_is_refused() -> None:
    fates = Fates(["a"])
    with pytest.raises(UnsettledMessagesError, match="not in the batch"):
        fates.failed(["z"])


def test_no_fate_is_taken_after_close() -> None:
    fates = Fates(["a"])
    fates.failed(["a"])
    fates.close(Figures())
    with pytest.raises(UnsettledMessagesError, match="after the batch was closed"):
        fates.failed(["a"])


def give(fates: Fates, kind: str) -> None:
    """Give message ``a`` the fate ``kind``."""
    if kind == "applied":
        fates.applied([message("a")], NOW)
    elif kind == "already_applied":
        fates.already_applied("a", EARLIER)
    elif kind == "dead_lettered":
        fates.dead_lettered("a", OUT_OF_RANGE)
    elif kind == "failed":
        fates.failed(["a"])
    else:
        fates.held("a", "batch-1", 1_000)
