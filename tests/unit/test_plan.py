"""Unit tests for ``tally.core.plan``: packing messages into transactions that DynamoDB can run."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally.core.aggregate import MessageTotals, add_into, message_totals
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.model import CounterEvent, Message, RejectCode
from tally.core.plan import Chunk, item_disjoint_lanes, plan_transactions

if TYPE_CHECKING:
    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.core.numbers import Number

NINES_38 = 10**38 - 1
BIG = Decimal("9E+125")


def mt(message_id: str, totals: Totals, event_count: int = 1) -> MessageTotals:
    """The net effect of one message."""
    return MessageTotals(message_id, totals, event_count)


def keys(count: int, prefix: str = "k") -> Totals:
    """``count`` distinct keys, each incremented by one."""
    return {f"{prefix}{i}": {"count": 1} for i in range(count)}


# --- what travels together -----------------------------------------------------------------------------

PACKING: list[object] = [
    pytest.param([], 10, [], id="nothing"),
    pytest.param(
        [mt("a", {"k": {"count": 1}}), mt("b", {"k": {"count": 2}})],
        10,
        [(("a", "b"), {"k": {"count": 3}})],
        id="same-key-summed-into-one-add",
    ),
    pytest.param(
        [mt("a", {"x": {"count": 1}}), mt("b", {"y": {"views": 2, "revenue": Decimal("1.5")}})],
        10,
        [(("a", "b"), {"x": {"count": 1}, "y": {"views": 2, "revenue": Decimal("1.5")}})],
        id="different-keys-one-transaction",
    ),
    pytest.param(
        [mt("a", {"x": {"count": 1}}), mt("b", {"y": {"count": 1}}), mt("c", {"z": {"count": 1}})],
        4,
        [(("a", "b"), {"x": {"count": 1}, "y": {"count": 1}}), (("c",), {"z": {"count": 1}})],
        id="action-limit-closes-the-chunk-exactly-at-4",
    ),
    pytest.param(
        [mt("a", {"x": {"count": 1}}), mt("b", {"x": {"count": 1}}), mt("c", {"x": {"count": 1}})],
        4,
        [(("a", "b", "c"), {"x": {"count": 3}})],
        id="shared-key-costs-one-action",
    ),
    pytest.param(
        [mt("a", keys(3)), mt("b", keys(2, "j"))],
        6,
        [(("a",), keys(3)), (("b",), keys(2, "j"))],
        id="message-is-never-split-across-chunks",
    ),
    pytest.param(
        [mt("a", {"k": {"count": 1}}), mt("b", {"k": {"count": -1}})],
        10,
        [(("a", "b"), {})],
        id="zero-net-across-messages-left-out-markers-kept",
    ),
    pytest.param(
        [mt("a", {"k": {"count": 0}, "j": {"count": 1}})],
        10,
        [(("a",), {"j": {"count": 1}})],
        id="zero-net-in-message-left-out",
    ),
    pytest.param(
        [mt("a", {"k": {"views": 0, "revenue": Decimal("0.00"), "count": 2}})],
        10,
        [(("a",), {"k": {"count": 2}})],
        id="zero-counter-left-out-of-a-key",
    ),
    pytest.param(
        [mt("a", {"k": {"count": NINES_38}}), mt("b", {"k": {"count": NINES_38}})],
        10,
        [(("a",), {"k": {"count": NINES_38}}), (("b",), {"k": {"count": NINES_38}})],
        id="combined-39-digits-split",
    ),
    pytest.param(
        [mt("a", {"k": {"count": BIG}}), mt("b", {"k": {"count": BIG}})],
        10,
        [(("a",), {"k": {"count": BIG}}), (("b",), {"k": {"count": BIG}})],
        id="combined-magnitude-above-9.99E+125-split",
    ),
    pytest.param(
        [mt("a", {"k": {"count": Decimal("1E+100")}}), mt("b", {"k": {"count": Decimal("1E-100")}})],
        10,
        [(("a",), {"k": {"count": Decimal("1E+100")}}), (("b",), {"k": {"count": Decimal("1E-100")}})],
        id="combined-201-digits-split",
    ),
    pytest.param(
        [mt("a", {"k": {"count": NINES_38}}), mt("b", {"k": {"count": -NINES_38}})],
        10,
        [(("a", "b"), {})],
        id="opposite-signs-combine",
    ),
    # Ints whose magnitudes add up under 10**38 are packed without summing them: at the bound and just past it
    pytest.param(
        [mt("a", {"k": {"count": 10**37}}), mt("b", {"k": {"count": NINES_38 - 10**37}})],
        10,
        [(("a", "b"), {"k": {"count": NINES_38}})],
        id="ints-summing-to-38-nines-together",
    ),
    pytest.param(
        [mt("a", {"k": {"count": 10**37}}), mt("b", {"k": {"count": NINES_38 - 10**37 + 1}})],
        10,
        [(("a", "b"), {"k": {"count": 10**38}})],
        id="ints-summing-to-1e38-together-one-significant-digit",
    ),
    pytest.param(
        [mt("a", {"k": {"count": 10**37}}), mt("b", {"k": {"count": NINES_38 - 10**37 + 2}})],
        10,
        [(("a",), {"k": {"count": 10**37}}), (("b",), {"k": {"count": NINES_38 - 10**37 + 2}})],
        id="ints-summing-to-39-digits-split",
    ),
    pytest.param(
        [mt("a", {"k": {"count": NINES_38}}), mt("b", {"j": {"count": NINES_38}})],
        10,
        [(("a", "b"), {"k": {"count": NINES_38}, "j": {"count": NINES_38}})],
        id="large-ints-on-different-keys-together",
    ),
    pytest.param(
        [
            mt("a", {"k": {"count": NINES_38}}),
            mt("b", {"k": {"count": NINES_38}}),
            mt("c", {"k": {"count": -NINES_38}}),
        ],
        10,
        [(("a",), {"k": {"count": NINES_38}}), (("b", "c"), {})],
        id="greedy-in-batch-order",
    ),
    pytest.param(
        [mt("a", {"k": {"count": NINES_38}, "j": {"count": 1}}), mt("b", {"k": {"views": NINES_38}})],
        10,
        [(("a", "b"), {"k": {"count": NINES_38, "views": NINES_38}, "j": {"count": 1}})],
        id="other-counter-of-same-key-is-independent",
    ),
    pytest.param(
        [mt("a", keys(2)), mt("b", keys(2))],
        3,
        [(("a",), keys(2)), (("b",), keys(2))],
        id="smallest-useful-limit",
    ),
]


@pytest.mark.parametrize(("messages", "max_actions", "expected"), PACKING)
def test_plan_packs_messages_with_all_their_deltas(
    messages: list[MessageTotals], max_actions: int, expected: list[tuple[tuple[str, ...], Totals]]
) -> None:
    # GIVEN distinct messages' net deltas
    # WHEN they are planned
    plan = plan_transactions(messages, max_actions)
    # THEN the chunks hold these messages and these non-zero increments, each within the action limit
    assert [(chunk.message_ids, chunk.increments) for chunk in plan.chunks] == expected
    assert plan.rejected == {}
    for chunk in plan.chunks:
        assert chunk.action_count == len(chunk.messages) + len(chunk.increments) <= max_actions


def test_plan_keeps_exact_types() -> None:
    # GIVEN int and Decimal deltas
    messages = [
        mt("a", {"i": {"count": 1}, "d": {"count": 1}}),
        mt("b", {"i": {"count": 2}, "d": {"count": Decimal("0.5")}}),
    ]
    # WHEN they are planned together
    (chunk,) = plan_transactions(messages).chunks
    # THEN ints stay ints, and a sum with a Decimal is an exact Decimal
    assert type(chunk.increments["i"]["count"]) is int
    assert chunk.increments["d"]["count"] == Decimal("1.5")
    assert type(chunk.increments["d"]["count"]) is Decimal


def test_plan_default_limit_is_dynamodbs_100_actions() -> None:
    # GIVEN 60 messages with one distinct key each (120 actions in all)
    messages = [mt(f"m{i}", {f"k{i}": {"count": 1}}) for i in range(60)]
    # WHEN they are planned with the default limit
    plan = plan_transactions(messages)
    # THEN the first chunk is filled to exactly 100 actions, the rest go in a second
    assert TRANSACT_MAX_ACTIONS == 100
    assert [chunk.action_count for chunk in plan.chunks] == [100, 20]


def test_plan_counts_events_per_chunk() -> None:
    # GIVEN messages that carried 3 and 2 events
    messages = [mt("a", {"k": {"count": 3}}, event_count=3), mt("b", {"k": {"count": 2}}, event_count=2)]
    # WHEN they are planned
    (chunk,) = plan_transactions(messages).chunks
    # THEN the chunk knows it applies 5 events
    assert chunk.event_count == 5


# --- what can never be written -------------------------------------------------------------------------

REJECTIONS: list[object] = [
    pytest.param(mt("x", keys(10)), 10, RejectCode.TOO_MANY_KEYS, id="keys-equal-to-limit"),
    pytest.param(mt("x", keys(100)), 100, RejectCode.TOO_MANY_KEYS, id="100-keys-default-limit"),
    pytest.param(mt("x", keys(3)), 3, RejectCode.TOO_MANY_KEYS, id="3-keys-limit-3"),
    pytest.param(mt("x", {"k": {"count": 2 * NINES_38}}), 10, RejectCode.NUMBER_OUT_OF_RANGE, id="own-net-39-digits"),
    pytest.param(
        mt("x", {"k": {"count": 1}, "j": {"views": 2 * BIG}}),
        10,
        RejectCode.NUMBER_OUT_OF_RANGE,
        id="own-net-magnitude",
    ),
    pytest.param(
        mt("x", {"k": {"count": Decimal("1" + "0" * 100 + "." + "0" * 99 + "1")}}),
        10,
        RejectCode.NUMBER_OUT_OF_RANGE,
        id="own-net-201-digits",
    ),
    pytest.param(
        mt("x", {"k": {"count": Decimal("1E-131")}}),
        10,
        RejectCode.NUMBER_OUT_OF_RANGE,
        id="own-net-too-small",
    ),
]


@pytest.mark.parametrize(("message", "max_actions", "code"), REJECTIONS)
def test_plan_rejects_messages_that_can_never_be_written(
    message: MessageTotals, max_actions: int, code: RejectCode
) -> None:
    # GIVEN a writable message, one that can never be written, and another writable message
    before, after = mt("before", {"b": {"count": 1}}), mt("after", {"a": {"count": 1}})
    # WHEN they are planned
    plan = plan_transactions([before, message, after], max_actions)
    # THEN only that message is rejected, with the expected code and a detail, and the others are planned
    assert set(plan.rejected) == {message.message_id}
    assert plan.rejected[message.message_id].code == code
    assert plan.rejected[message.message_id].detail
    assert [mid for chunk in plan.chunks for mid in chunk.message_ids] == ["before", "after"]


def test_plan_accepts_keys_up_to_one_below_the_limit() -> None:
    # GIVEN a message with max_actions - 1 distinct keys
    message = mt("x", keys(9))
    # WHEN it is planned with max_actions = 10
    plan = plan_transactions([message], 10)
    # THEN it fills one transaction alone: one marker plus nine ADDs
    assert plan.rejected == {}
    assert [chunk.action_count for chunk in plan.chunks] == [10]


def test_plan_rejects_own_net_built_from_storable_events() -> None:
    # GIVEN a decoded message whose two 38-digit events net to 39 digits
    message = Message("x", (CounterEvent("k", {"count": NINES_38}), CounterEvent("k", {"count": NINES_38})))
    # WHEN it is netted and planned
    plan = plan_transactions([message_totals(message)])
    # THEN it is rejected before any I/O
    assert plan.chunks == ()
    assert plan.rejected["x"].code == RejectCode.NUMBER_OUT_OF_RANGE


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(Decimal("0E-2000"), 1, id="zero-tiny-exponent-then-int"),
        pytest.param(Decimal("0E+999999999"), Decimal("0E+999999999"), id="zeros-huge-exponent"),
        pytest.param(Decimal("1." + "0" * 1500), 1, id="trailing-zeros-then-int"),
    ],
)
def test_plan_never_raises_on_storable_nets(first: Decimal, second: int | Decimal) -> None:
    # GIVEN two messages whose own nets for the same key are storable
    messages = [mt("a", {"k": {"count": first}}), mt("b", {"k": {"count": second}})]
    # WHEN they are planned
    plan = plan_transactions(messages)
    # THEN both are planned (the combined net is storable) instead of a decimal signal escaping
    assert [mid for chunk in plan.chunks for mid in chunk.message_ids] == ["a", "b"]


# ------------------------------------------------------------ lanes of concurrent direct transactions
_SESSION = "0" * 32


def _chunk_of(*messages: tuple[str, tuple[str, ...]]) -> Chunk:
    members = tuple(MessageTotals(mid, {key: {"count": 1} for key in keys}, 1) for mid, keys in messages)
    increments: dict[ItemKey, dict[str, Number]] = {}
    for member in members:
        add_into(increments, member.totals)
    return Chunk(members, increments)


@pytest.mark.parametrize(
    ("chunks", "lanes"),
    [
        pytest.param([_chunk_of(("m1", ("a",))), _chunk_of(("m2", ("b",)))], [[0], [1]], id="disjoint"),
        pytest.param(
            [_chunk_of(("m1", ("hub", "a"))), _chunk_of(("m2", ("b",))), _chunk_of(("m3", ("hub", "c")))],
            [[0, 2], [1]],
            id="a split unit's chunks share its key",
        ),
        pytest.param(
            [_chunk_of((f"{_SESSION}.1", ("a",))), _chunk_of((f"{_SESSION}.2", ("b",)))],
            [[0, 1]],
            id="one block marker item",
        ),
        pytest.param(
            [_chunk_of(("m1", ("a",))), _chunk_of(("m2", ("b",))), _chunk_of(("m3", ("a", "b")))],
            [[0, 1, 2]],
            id="a later chunk joins two lanes",
        ),
    ],
)
def test_chunks_sharing_an_item_share_a_lane_in_plan_order(chunks: list[Chunk], lanes: list[list[int]]) -> None:
    assert item_disjoint_lanes(chunks) == lanes
