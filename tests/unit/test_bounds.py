"""Bounded counters: the declaration, the worst-prefix condition, and how it is written.

Table-driven: each row is a sequence of messages' net deltas (in order) and the condition one write of
their net must carry, or a declaration and what it means.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from tally.commit.fates import ApplyOutcome
from tally.commit.retrying import DEFAULT_RETRY_POLICY
from tally.config import Settings
from tally.core.aggregate import MessageTotals
from tally.core.bounds import (
    MAX_BOUNDED_COUNTERS,
    Bound,
    BoundCheck,
    bound_checks,
    parse_counter_bounds,
    refusal,
    runs_within_bounds,
)
from tally.core.defaults import parse_counter_defaults
from tally.core.items import ALL_TIME, CounterItem
from tally.core.ledger import MarkersExistError
from tally.core.limits import WIRE_LIMITS
from tally.core.model import RejectCode
from tally.core.plan import ConditionRefusedError, plan_batch, split_refused
from tally.core.sharding import parse_hot_keys
from tally.core.write import ItemRead
from tally.errors import ConfigurationError
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.sources import kinesis as kinesis_source
from tally.store.actions import Role, add_update, bound_check
from tally.store.expressions import bound_condition
from tally.store.requests import translate
from tests.support.events import load_event
from tests.support.pipeline import Landed, RecordingDeadLetterQueue
from tests.support.reference import expected_value

if TYPE_CHECKING:
    from tally.core.numbers import Number

STOCK = parse_counter_bounds("stock:*#stock>=0")
QUOTA = parse_counter_bounds("quota:*#calls<=1000")
BOTH = parse_counter_bounds("seat:*#taken>=0;seat:*#taken<=6")


def steps(key: str, counter: str, *amounts: Number) -> list[dict[Any, dict[str, Number]]]:
    return [{key: {counter: amount}} for amount in amounts]


@pytest.mark.parametrize(
    ("bounds", "key", "counter", "amounts", "starts", "expected"),
    [
        # floor: stored + the lowest running sum of a lowering step >= floor
        (STOCK, "stock:1", "stock", [-3, -4, 6, -2], "", BoundCheck("stock", 7, None, False)),
        (STOCK, "stock:1", "stock", [-1], "", BoundCheck("stock", 1, None, False)),
        # a missing counter holds its start: accepted when the start covers every step
        (STOCK, "stock:1", "stock", [-3, -4, 6, -2], "stock:*#stock=start:7", BoundCheck("stock", 7, None, True)),
        (STOCK, "stock:1", "stock", [-3, -4, 6, -2], "stock:*#stock=start:6", BoundCheck("stock", 7, None, False)),
        # a raising step first does not excuse a later lowering one: the worst prefix counts, not the net
        (STOCK, "stock:1", "stock", [5, -6], "", BoundCheck("stock", 1, None, False)),
        # the net (-3) alone would ask for 3: the prefix -7 asks for 7
        (STOCK, "stock:1", "stock", [-7, 4], "", BoundCheck("stock", 7, None, False)),
        # ceiling: stored + the highest running sum of a raising step <= ceiling
        (QUOTA, "quota:t", "calls", [400, 500, -100, 150], "", BoundCheck("calls", None, 50, True)),
        (QUOTA, "quota:t", "calls", [1001], "", BoundCheck("calls", None, -1, False)),
        # both bounds on one counter
        (BOTH, "seat:a", "taken", [2, -5, 1], "seat:*#taken=start:3", BoundCheck("taken", 3, 4, True)),
        (BOTH, "seat:a", "taken", [2, -5, 1], "seat:*#taken=start:2", BoundCheck("taken", 3, 4, False)),
        # exact decimals, beyond the 28 digits of Python's default context; the floor minus the lowest sum
        # (10000000000.0000000000000000000000000000001, 42 digits) rounded up to the storable number no stored
        # value can tell from it
        (
            STOCK,
            "stock:1",
            "stock",
            [Decimal("-0.0000000000000000000000000000001"), Decimal("-1E+10")],
            "",
            BoundCheck("stock", Decimal("10000000000.000000000000000000000000001"), None, False),
        ),
    ],
)
def test_the_condition_of_one_write_holds_for_every_step_in_order(  # noqa: PLR0917 (a table's columns)
    bounds: Any, key: str, counter: str, amounts: list[Number], starts: str, expected: BoundCheck
) -> None:
    checks = bound_checks(steps(key, counter, *amounts), bounds, parse_counter_defaults(starts))
    assert checks == {key: (expected,)}


@pytest.mark.parametrize(
    ("bounds", "totals"),
    [
        (STOCK, steps("stock:1", "stock", 3, 4)),  # only raising steps: a floor never refuses a restock
        (QUOTA, steps("quota:t", "calls", -5)),  # a lowering step never meets a ceiling
        (STOCK, steps("other:1", "stock", -5)),  # an unbounded key
        (STOCK, steps("stock:1", "sold", -5)),  # an unbounded counter of a bounded key
        (STOCK, [{CounterItem("stock:1", "h1", 0, 99): {"stock": -5}}]),  # a window counts what happened
        (STOCK, steps("stock:1", "stock", 0)),  # a zero step moves nothing
    ],
)
def test_no_condition_where_no_step_moves_toward_a_bound(bounds: Any, totals: Any) -> None:
    assert bound_checks(totals, bounds) == {}


@pytest.mark.parametrize(
    ("bound", "value", "amount", "expected"),
    [
        (Bound(floor=0), 5, -5, None),
        (Bound(floor=0), 5, -6, RejectCode.BELOW_FLOOR),
        (Bound(floor=0), -5, 3, None),  # below its floor already (declared later): a restock still applies
        (Bound(ceiling=10), 8, 2, None),
        (Bound(ceiling=10), 8, 3, RejectCode.ABOVE_CEILING),
        (Bound(ceiling=10), 12, -1, None),
        (Bound(0, 6), 3, 4, RejectCode.ABOVE_CEILING),
        (Bound(0, 6), 3, -4, RejectCode.BELOW_FLOOR),
    ],
)
def test_one_step_is_refused_only_when_it_crosses(bound: Bound, value: int, amount: int, expected: Any) -> None:
    assert bound.refusal(value, amount) is expected


def test_the_refusal_names_the_counter_its_value_and_the_amount() -> None:
    totals = {"stock:1": {"stock": -4, "sold": 4}, "views": {"n": 1}}
    rejection = refusal(totals, {"stock:1": {"stock": Decimal(2)}}, STOCK)
    assert rejection is not None
    assert rejection.code is RejectCode.BELOW_FLOOR
    assert rejection.detail == "'stock:1'/'stock': value 2, amount -4, floor 0"
    assert refusal(totals, {"stock:1": {"stock": Decimal(4)}}, STOCK) is None


def test_expected_value_applies_one_by_one() -> None:
    assert expected_value(5, [-3, -4, 6, -2], Bound(floor=0)) == (6, (1,))
    assert expected_value(0, [4, 4, 4], Bound(ceiling=10)) == (8, (2,))


@pytest.mark.parametrize(
    ("text", "hot", "starts", "message"),
    [
        ("stock:*#stock", "", "", "expected PATTERN#COUNTER>=N"),
        ("stock:*>=0", "", "", "expected PATTERN#COUNTER>=N"),
        ("stock:*#stock>=x", "", "", "not a number"),
        ("stock:*#stock>=1e999", "", "", "not a finite|Number range|storable|exponent|magnitude"),
        ("page:*#n<=5", "page:/home=4", "", "hot key"),
        ("stock:*#stock>=0", "", "stock:a*#stock=start:-1", "start value -1"),
        ("quota:*#calls<=10", "", "quota:*#calls=start:11", "start value 11"),
        ("seat:*#taken>=5;seat:*#taken<=4", "", "", "floor above ceiling"),
    ],
)
def test_a_bad_declaration_is_refused_at_configuration(text: str, hot: str, starts: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_counter_bounds(text, parse_hot_keys(hot), parse_counter_defaults(starts))


def test_declarations_first_match_wins_per_bound() -> None:
    bounds = parse_counter_bounds("stock:vip*#stock>=-10;stock:*#stock>=0;stock:*#stock<=500")
    assert bounds.bounds("stock:vip-1") == {"stock": Bound(-10, 500)}
    assert bounds.bounds("stock:1") == {"stock": Bound(0, 500)}
    assert bounds.bounds("views") == {}
    assert bounds.is_bounded("stock:1")
    assert not bounds.is_bounded(CounterItem("stock:1", "h1", 0, 99))


def test_settings_read_the_bounds_and_refuse_bad_ones() -> None:
    base = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_DLQ_URL": "q"}
    settings = Settings.from_env({**base, "TALLY_COUNTER_BOUNDS": "stock:*#stock>=0"})
    assert settings.declarations.bounds.bounds("stock:1") == {"stock": Bound(0, None)}
    with pytest.raises(ConfigurationError, match="hot key"):
        Settings.from_env({**base, "TALLY_COUNTER_BOUNDS": "p#n<=1", "TALLY_HOT_KEYS": "p=2"})
    with pytest.raises(ConfigurationError, match="start value"):
        Settings.from_env({**base, "TALLY_COUNTER_BOUNDS": "s#n>=0", "TALLY_COUNTER_DEFAULTS": "s#n=start:-2"})


# ------------------------------------------------------------------------------------- the store's side
@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        ((BoundCheck("s", 7, None, False),), "(#b0 >= :lo0)"),
        ((BoundCheck("s", 7, None, True),), "(attribute_not_exists(#b0) OR (#b0 >= :lo0))"),
        ((BoundCheck("s", 3, 4, True),), "(attribute_not_exists(#b0) OR (#b0 >= :lo0 AND #b0 <= :hi0))"),
        (
            (BoundCheck("s", None, 1, False), BoundCheck("t", 2, None, True)),
            "(#b0 <= :hi0) AND (attribute_not_exists(#b1) OR (#b1 >= :lo1))",
        ),
    ],
)
def test_the_condition_expression(checks: tuple[BoundCheck, ...], expected: str) -> None:
    assert bound_condition(checks) == expected


def test_a_bounded_add_carries_its_condition_and_asks_for_the_old_item() -> None:
    action, role = add_update("T", "stock:1", {"stock": -3}, {"stock": 5}, (BoundCheck("stock", 7, None, False),))
    update: Any = action["Update"]
    assert update["ConditionExpression"] == "(#b0 >= :lo0)"
    assert update["ExpressionAttributeNames"]["#b0"] == "c#stock"
    assert update["ExpressionAttributeValues"][":lo0"] == {"N": "7"}
    assert update["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert role == Role("add", item="stock:1")
    check: Any = bound_check("T", "stock:1", (BoundCheck("stock", 5, None, True),))[0]["ConditionCheck"]
    assert check["ConditionExpression"] == "(attribute_not_exists(#b0) OR (#b0 >= :lo0))"
    plain: Any = add_update("T", "views", {"n": 1})[0]["Update"]
    assert "ConditionExpression" not in plain


def cancelled(*reasons: dict[str, Any]) -> ClientError:
    return ClientError(
        {"Error": {"Code": "TransactionCanceledException", "Message": "x"}, "CancellationReasons": list(reasons)},
        "TransactWriteItems",
    )


def test_a_failed_bound_becomes_a_refused_condition_with_the_stored_values() -> None:
    error = translate(
        cancelled(
            {"Code": "None"}, {"Code": "ConditionalCheckFailed", "Item": {"c#stock": {"N": "2"}, "pk": {"S": "x"}}}
        ),
        [Role("marker", "m1"), Role("add", item="stock:1")],
    )
    assert isinstance(error, ConditionRefusedError)
    assert error.found == {"stock:1": ItemRead({"stock": Decimal(2)})}
    # an item that was not there: None, which the protocol meets at the start values (counters_met)
    missing = translate(cancelled({"Code": "ConditionalCheckFailed"}), [Role("add", item="stock:2")])
    assert isinstance(missing, ConditionRefusedError)
    assert missing.found == {"stock:2": None}
    # a marker's failed condition wins: the message is settled through its marker first
    both = translate(
        cancelled({"Code": "ConditionalCheckFailed", "Item": {}}, {"Code": "ConditionalCheckFailed", "Item": {}}),
        [Role("marker", "m1"), Role("add", item="stock:1")],
    )
    assert isinstance(both, MarkersExistError)


# ----------------------------------------------------------------------------------------- the planner
def message(message_id: str, **totals: dict[str, Number]) -> MessageTotals:
    return MessageTotals(message_id, dict(totals), 1)


def test_a_unit_with_a_bounded_key_never_goes_through_the_journal() -> None:
    # 150 packed messages sharing stock:1 and 4 of 20 other keys: without a bound, the journal's case
    unit = [
        MessageTotals(f"m{n}", {"stock:1": {"stock": -1}, **{f"k{(n + i) % 20}": {"n": 1} for i in range(4)}}, 5)
        for n in range(150)
    ]
    assert len(plan_batch(unit).journals) == 1
    plan = plan_batch(unit, bounded=STOCK.is_bounded)
    assert plan.journals == ()
    assert [m.message_id for chunk in plan.direct for m in chunk.messages] == [f"m{n}" for n in range(150)]
    assert [chunk.action_count for chunk in plan.direct] == [100, 92]  # 79 markers + 21 ADDs, 71 + 21


def test_after_a_refusal_the_components_of_the_refused_items_go_one_by_one_in_order() -> None:
    chunk = [
        message("a", **{"stock:1": {"stock": -1}}),
        message("b", views={"n": 1}),
        message("c", **{"stock:1": {"stock": -1}, "stock:2": {"stock": -1}}),
        message("d", **{"stock:2": {"stock": -2}}),
        message("e", **{"stock:3": {"stock": -2}}),
    ]
    one_by_one, others = split_refused(chunk, frozenset({"stock:1"}))
    assert [m.message_id for m in one_by_one] == ["a", "c", "d"]
    assert sorted(m.message_id for m in others) == ["b", "e"]


def test_a_refused_item_is_told_apart_from_an_item_whose_label_it_spells() -> None:
    # GIVEN a bound refused on the key literally named "a#shard1", and a message on shard 1 of hot key "a" (a log
    # prints both as "a#shard1")
    spelled = message("spelled", **{"a#shard1": {"stock": -1}})
    shard = MessageTotals("shard", {CounterItem("a", ALL_TIME, 1): {"n": 1}}, 1)
    # THEN only the refused item's message is applied one by one
    one_by_one, others = split_refused([spelled, shard], frozenset({"a#shard1"}))
    assert [m.message_id for m in one_by_one] == ["spelled"]
    assert [m.message_id for m in others] == ["shard"]


def test_after_a_refusal_the_runs_the_stored_value_lets_through_are_written_together() -> None:
    # stock at 3: -1, -1 hold, -4 would cross, +5 and -2 hold from there, -9 would cross, an unbounded message
    amounts = [-1, -1, -4, 5, -2, -9]
    messages = [message(f"m{n}", **{"stock:1": {"stock": amount}}) for n, amount in enumerate(amounts)]
    messages.append(message("v", views={"n": 1}))
    runs = runs_within_bounds(messages, {"stock:1": {"stock": Decimal(3)}}, STOCK)
    assert [[m.message_id for m in run] for run in runs] == [["m0", "m1"], ["m2"], ["m3", "m4"], ["m5"], ["v"]]
    # a counter whose value is unknown (not in the refusal) is predicted to hold: its write still checks
    assert len(runs_within_bounds(messages, {}, STOCK)) == 1


# ------------------------------------------------------------------------------------------- the order
class RecordingApplier:
    """Stands in for the applier: records the order in which the pipeline hands the messages over. Its retry
    policy and sleep are what the pipeline builds the post-commit steps' ``attempt`` from."""

    policy = DEFAULT_RETRY_POLICY

    def __init__(self) -> None:
        self.order: list[str] = []

    def sleep(self, seconds: float) -> None:
        """Nothing here waits (no step has a store)."""

    def commit(self, messages: Any, now_ms: int, remaining_ms: Any) -> Landed:
        self.order = [m.message_id for m in messages]
        return Landed(ApplyOutcome(applied=frozenset(self.order)))


def test_the_pipeline_hands_messages_over_in_the_sources_order() -> None:
    # GIVEN a Kinesis shard's records, in sequence order, with a re-send, poison and a packed message between
    records = kinesis_source.records_from_event(load_event("kinesis-bounded.json"))
    applier = RecordingApplier()
    pipeline = BatchPipeline(
        applier,
        RecordingDeadLetterQueue(),
        PipelineSettings(limits=WIRE_LIMITS, dedup_horizon_ms=35 * 86_400_000),
    )
    # WHEN the batch goes through decode, deduplication and aggregation
    pipeline.process(records, 4_102_444_801_000, lambda: 60_000)
    # THEN the applier gets each distinct message once, at its first record's place in the shard's order
    assert applier.order == [f"bnd-kinesis-{n}" for n in range(1, 7)]
    # and a plan keeps that order within every unit (the order every bounded key's writes follow)
    totals = [message(f"m{n}", **{"stock:1": {"stock": -1}}) for n in range(250)]
    plan = plan_batch(totals, bounded=STOCK.is_bounded)
    assert [m.message_id for chunk in plan.direct for m in chunk.messages] == [f"m{n}" for n in range(250)]


def test_the_most_bounded_counters_fit_one_condition() -> None:
    # GIVEN the most bounded counters a deployment may declare, each with a floor and a ceiling, on one key
    names = [f"c{n}" for n in range(MAX_BOUNDED_COUNTERS)]
    text = ";".join(f"k#{name}>=0;k#{name}<=9" for name in names)
    bounds = parse_counter_bounds(text)
    # WHEN one write moves each both ways, its counters missing (the longest condition)
    checks = bound_checks([{"k": dict.fromkeys(names, 1)}, {"k": dict.fromkeys(names, -1)}], bounds)
    condition = bound_condition(checks["k"])
    # THEN the expression stays within DynamoDB's 4 KB and 300 operators; one more counter is refused
    assert len(condition.encode("utf-8")) <= 4096
    operators = sum(condition.count(word) for word in (" AND ", " OR ", ">=", "<=", "attribute_not_exists"))
    assert operators <= 300
    with pytest.raises(ValueError, match="at most 40"):
        parse_counter_bounds(text + ";k#extra>=0")
