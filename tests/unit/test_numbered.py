"""Numbered message ids and their marker items (``tally.core.numbered_ids``), and how the planner counts them."""

from __future__ import annotations

import pytest

from tally.core.aggregate import MessageTotals
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.numbered_ids import (
    BLOCK_SEQS,
    MAX_SEQ,
    NumberedId,
    distinct_marker_items,
    marker_item,
    numbered_id,
    parse_numbered,
)
from tally.core.plan import journal_overhead, plan_batch, plan_transactions

SESSION = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("message_id", "parsed"),
    [
        pytest.param(f"{SESSION}.0", NumberedId(SESSION, 0), id="first"),
        pytest.param(f"{SESSION}.17", NumberedId(SESSION, 17), id="second-block"),
        pytest.param(f"{SESSION}.{MAX_SEQ}", NumberedId(SESSION, MAX_SEQ), id="last"),
        pytest.param(f"{SESSION}.{MAX_SEQ + 1}", None, id="seq-too-large"),
        pytest.param(f"{SESSION}.017", None, id="leading-zero: another spelling of 17 is another id"),
        pytest.param(f"{SESSION}.-1", None, id="negative"),
        pytest.param(f"{SESSION.upper()}.1", None, id="upper-case-session"),
        pytest.param(f"{SESSION[:-1]}.1", None, id="short-session"),
        pytest.param(f"{SESSION}.1 ", None, id="trailing-space"),
        pytest.param(SESSION, None, id="a-random-uuid"),
        pytest.param("invoice-9", None, id="a-producer-id"),
    ],
)
def test_only_the_canonical_spelling_is_numbered(message_id: str, parsed: NumberedId | None) -> None:
    assert parse_numbered(message_id) == parsed
    if parsed is not None:
        assert str(parsed) == message_id


def test_numbered_ids_are_valid_fifo_deduplication_ids() -> None:
    longest = numbered_id(SESSION, MAX_SEQ)
    assert len(longest) <= 128
    assert longest.isascii()
    assert all(char.isalnum() or char == "." for char in longest)


def test_numbered_id_refuses_what_parse_would_not_give_back() -> None:
    for session, seq in [(SESSION, -1), (SESSION, MAX_SEQ + 1), ("xyz", 1)]:
        with pytest.raises(ValueError, match="not a numbered id"):
            numbered_id(session, seq)


def test_consecutive_seqs_share_a_block_and_other_ids_have_their_own_item() -> None:
    first_block = {marker_item(numbered_id(SESSION, seq)) for seq in range(BLOCK_SEQS)}
    assert first_block == {f"s#{SESSION}#0"}
    assert marker_item(numbered_id(SESSION, BLOCK_SEQS)) == f"s#{SESSION}#1"
    assert marker_item(f"{SESSION}.017") == f"m#{SESSION}.017"
    assert marker_item("invoice-9") == "m#invoice-9"
    assert distinct_marker_items([numbered_id(SESSION, seq) for seq in range(100)] + ["a", "a", "b"]) == 9


def single(message_id: str, key: str) -> MessageTotals:
    return MessageTotals(message_id, {key: {"count": 1}}, 1)


def test_the_planner_counts_one_action_per_marker_item() -> None:
    # GIVEN 100 consecutive numbered single events over 50 keys: 7 blocks + 50 keys = 57 actions
    messages = [single(numbered_id(SESSION, seq), f"k{seq % 50}") for seq in range(100)]

    # WHEN planned THEN one direct transaction holds them all (per-message markers would need 150 actions)
    (chunk,) = plan_transactions(messages).chunks
    assert (chunk.marker_items, chunk.action_count) == (7, 57)
    plan = plan_batch(messages)
    assert (len(plan.direct), plan.journals) == (1, ())
    assert plan.direct[0].action_count == 57


def test_random_ids_still_take_one_action_each() -> None:
    messages = [single(f"id-{seq}", f"k{seq % 50}") for seq in range(100)]
    chunks = plan_transactions(messages).chunks
    assert [chunk.action_count for chunk in chunks] == [TRANSACT_MAX_ACTIONS, TRANSACT_MAX_ACTIONS]


def test_a_block_split_between_keys_stays_in_one_unit() -> None:
    # GIVEN the 16 seqs of one block over 16 keys, plus a random-id message on another key
    messages = [single(numbered_id(SESSION, seq), f"k{seq}") for seq in range(BLOCK_SEQS)]
    messages.append(single("other", "x"))

    # WHEN planned THEN they share one transaction, the block written by one action
    (chunk,) = plan_batch(messages).direct
    assert (chunk.marker_items, chunk.action_count) == (2, 2 + BLOCK_SEQS + 1)


def test_a_large_numbered_batch_goes_to_one_journal_unit_claiming_each_block_once() -> None:
    # GIVEN 2,000 numbered single events over 30 keys: 125 blocks + 30 keys, more than a transaction holds
    messages = [single(numbered_id(SESSION, seq), f"k{seq % 30}") for seq in range(2_000)]

    # WHEN planned THEN one journal unit, priced by its marker items (not by its messages)
    plan = plan_batch(messages)
    assert (plan.direct, len(plan.journals)) == ((), 1)
    assert journal_overhead(125, 30) < journal_overhead(2_000, 30)
