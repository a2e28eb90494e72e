"""The counter ``ADD`` update expression, and exactly how many counters one such expression can carry.

DynamoDB refuses any expression string longer than 4 KB ("The maximum length of any expression string is
4 KB", Constraints > Expression parameters), counted on the string as sent: placeholders, not the names
and values they stand for. ``tally.store.actions.add_update`` builds its expression here, so the bound the
planner respects (``counters_per_add``) is measured on the very string DynamoDB receives. It depends on how
many counters an ADD carries and on whether it also sets a window's expiry, never on the counter names
(``#c0``, ``#c1``... stand for them): names up to 255 bytes cost nothing here.

Pure (no boto3): the applier hands ``counters_per_add`` to the planner (``tally.core.plan``).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Final

from tally.core.items import ALL_TIME, ItemKey, item_parts
from tally.core.limits import UPDATE_EXPRESSION_MAX_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally.core.bounds import BoundCheck
    from tally.core.defaults import CounterDefaults
    from tally.core.thresholds import CrossingFree, ExactCheck

_EXPIRY_SET: Final = "#expires = if_not_exists(#expires, :expires)"


def name_placeholder(index: int) -> str:
    return f"#c{index}"


def value_placeholder(index: int) -> str:
    return f":v{index}"


def start_placeholder(index: int) -> str:
    return f":s{index}"


def add_expression(
    counter_count: int,
    *,
    sets_expiry: bool,
    started: int = 0,
    extra_sets: Sequence[str] = (),
    removes: Sequence[str] = (),
) -> str:
    """``ADD #c0 :v0, #c1 :v1, ...`` (and the expiry of a window item, set once).

    The first ``started`` counters have a start value (``tally.core.defaults``): they are
    ``SET #c0 = if_not_exists(#c0, :s0) + :v0`` instead, in the same expression, so the item is still
    written once.
    """
    sets = [
        f"{name_placeholder(i)} = if_not_exists({name_placeholder(i)}, {start_placeholder(i)}) + {value_placeholder(i)}"
        for i in range(started)
    ]
    if sets_expiry:
        sets.append(_EXPIRY_SET)
    sets.extend(extra_sets)  # a reset's values and an operator's record (``operator_sets``), a fenced write's mark
    adds = [f"{name_placeholder(i)} {value_placeholder(i)}" for i in range(started, counter_count)]
    parts = []
    if adds:
        parts.append("ADD " + ", ".join(adds))
    if sets:
        parts.append("SET " + ", ".join(sets))
    if removes:
        parts.append("REMOVE " + ", ".join(removes))
    return " ".join(parts)


FENCE_NAME: Final = "#fence"
FENCE_MARK: Final = ":mark"
FENCE_AFTER: Final = ":after"
FENCE_SET: Final = f"{FENCE_NAME} = {FENCE_MARK}"


def prune_placeholders(index: int) -> tuple[str, str]:
    """Another epoch's mark a fenced write removes: its name, and the value it must still hold."""
    return f"#p{index}", f":p{index}"


def fence_condition(*, first: bool, prunes: int) -> str:
    """A fenced write's condition: its epoch's mark absent or lower (an item's first part of a batch) or at the
    previous part's value, and each mark it removes still at the value seen."""
    own = (
        f"(attribute_not_exists({FENCE_NAME}) OR {FENCE_NAME} < {FENCE_MARK})"
        if first
        else f"{FENCE_NAME} = {FENCE_AFTER}"
    )
    return " AND ".join([own, *(" = ".join(prune_placeholders(index)) for index in range(prunes))])


@cache
def _most_counters(sets_expiry: bool, started: bool, prunes: int | None = None) -> int:
    # The length grows with the count (by 9 to 40 bytes a counter): walk up to the first that overflows.
    # A fenced write (``prunes`` not None) also sets its mark and removes up to ``prunes`` others.
    extra = [FENCE_SET] if prunes is not None else []
    removes = [prune_placeholders(index)[0] for index in range(prunes or 0)]

    def length(count: int) -> int:
        expression = add_expression(
            count, sets_expiry=sets_expiry, started=count if started else 0, extra_sets=extra, removes=removes
        )
        return len(expression.encode("utf-8"))

    count = 1
    while length(count + 1) <= UPDATE_EXPRESSION_MAX_BYTES:
        count += 1
    return count


def counters_per_add(item: ItemKey, *, started: bool = False, fenced_prunes: int | None = None) -> int:
    """The most counters one ``ADD`` on ``item`` can carry within DynamoDB's 4 KB (331; 328 for a window;
    fewer when counters of the item may have start values: ``started``, the worst case of all of them; fewer for a
    fenced write, which also sets its mark and removes up to ``fenced_prunes`` others)."""
    return _most_counters(item_parts(item).expires_at_s is not None, started, fenced_prunes)


def counter_limit_for(defaults: CounterDefaults, *, fenced_prunes: int | None = None) -> Callable[[ItemKey], int]:
    """The planner's bound on counters per item for a deployment's declared start values (of a fenced write that
    removes up to ``fenced_prunes`` marks, when given)."""
    if not defaults.has_starts:
        if fenced_prunes is None:
            return counters_per_add
        return lambda item: counters_per_add(item, fenced_prunes=fenced_prunes)

    def limit(item: ItemKey) -> int:
        parts = item_parts(item)
        started = parts.window == ALL_TIME and parts.shard == 0 and bool(defaults.starts(parts.key))
        return counters_per_add(item, started=started, fenced_prunes=fenced_prunes)

    return limit


# ----------------------------------------------------------------------------------- resets, corrections
OPERATOR_AT: Final = ":op_at"
OPERATOR_ID: Final = ":op_id"


def operator_placeholders(index: int) -> tuple[str, str, str, str, str]:
    """The set counter's name and value, and its record's three attribute names (at, id, value)."""
    return f"#r{index}", f":r{index}", f"#ra{index}", f"#ri{index}", f"#rv{index}"


def operator_sets(count: int, *, sets_counters: bool, stamped: bool) -> list[str]:
    """``SET`` clauses of a reset (``#r0 = :r0``: the counter takes the value) and of the operator's record
    (``#ra0 = :op_at, #ri0 = :op_id, #rv0 = :r0``: when, which id, the value or delta), per counter.

    At most ``tally.core.decode.MAX_OPERATOR_COUNTERS`` (20) counters: about 60 bytes each, well inside
    DynamoDB's 4 KB beside the ADD of a correction's counters (``test_resets``).
    """
    clauses: list[str] = []
    for index in range(count):
        name, value, at, by, amount = operator_placeholders(index)
        if sets_counters:
            clauses.append(f"{name} = {value}")
        if stamped:
            clauses += [f"{at} = {OPERATOR_AT}", f"{by} = {OPERATOR_ID}", f"{amount} = {value}"]
    return clauses


# ------------------------------------------------------------------------------------------------ gauges
_GAUGE_IMPROVES: Final = {"max": "<", "min": ">", "latest": "<"}
"""The condition's operator: the stored value (for latest: its order) must be below (max, latest) or
above (min) the new one, so an equal or better stored reading fails the condition and changes nothing."""


def gauge_placeholders(index: int) -> tuple[str, str, str, str]:
    """Name and value placeholders of a gauge's value, and of a latest gauge's order."""
    return f"#g{index}", f":g{index}", f"#o{index}", f":o{index}"


def gauge_expressions(kinds: Sequence[str]) -> tuple[str, str]:
    """The update and condition expressions of one conditional gauge write (``kinds``: max, min, latest).

    ``SET #g0 = :g0, #g1 = :g1, #o1 = :o1`` if ``(attribute_not_exists(#g0) OR #g0 < :g0) AND ...``: a
    latest gauge's condition is on its order attribute (``tally.core.gauges.latest_order``).
    """
    sets: list[str] = []
    conditions: list[str] = []
    for index, kind in enumerate(kinds):
        name, value, order_name, order_value = gauge_placeholders(index)
        sets.append(f"{name} = {value}")
        compared, against = (order_name, order_value) if kind == "latest" else (name, value)
        if kind == "latest":
            sets.append(f"{order_name} = {order_value}")
        conditions.append(f"(attribute_not_exists({compared}) OR {compared} {_GAUGE_IMPROVES[kind]} {against})")
    return "SET " + ", ".join(sets), " AND ".join(conditions)


MAX_EXPRESSION_OPERATORS: Final = 300
"""DynamoDB's limit on operators and functions in one expression (Constraints > Expression parameters)."""
_OPERATORS_PER_GAUGE: Final = 4
"""``attribute_not_exists``, ``OR``, the comparison and the ``AND`` joining it to the next gauge."""


@cache
def gauges_per_update() -> int:
    """The most gauges one conditional write carries: within 4 KB per expression (worst case: all latest)
    and within the 300 operators an expression may hold."""
    count = 1
    while all(
        len(e.encode("utf-8")) <= UPDATE_EXPRESSION_MAX_BYTES for e in gauge_expressions(["latest"] * (count + 1))
    ):
        count += 1
    return min(count, MAX_EXPRESSION_OPERATORS // _OPERATORS_PER_GAUGE)


# ------------------------------------------------------------------------------------------------ bounds
def bound_placeholders(index: int) -> tuple[str, str, str]:
    """Name placeholder of a bounded counter in a condition, and the values it must stay at least / at most."""
    return f"#b{index}", f":lo{index}", f":hi{index}"


def bound_condition(checks: Sequence[BoundCheck]) -> str:
    """The condition of one bounded write (``tally.core.bounds.bound_checks``): every check, ANDed.

    ``(attribute_not_exists(#b0) OR (#b0 >= :lo0 AND #b0 <= :hi0))`` when a missing counter passes (its start
    value or 0 satisfies every step), ``(#b0 >= :lo0)`` when it does not: a comparison with a missing
    attribute is false, so the write is refused.
    """
    conditions: list[str] = []
    for index, check in enumerate(checks):
        name, low, high = bound_placeholders(index)
        compared = []
        if check.at_least is not None:
            compared.append(f"{name} >= {low}")
        if check.at_most is not None:
            compared.append(f"{name} <= {high}")
        condition = " AND ".join(compared)
        conditions.append(f"(attribute_not_exists({name}) OR ({condition}))" if check.if_missing else f"({condition})")
    return " AND ".join(conditions)


# -------------------------------------------------------------------------------------------- thresholds
def threshold_placeholders(index: int) -> tuple[str, str, str]:
    """Name placeholder of a thresholded counter in a condition, and the ends of the band it must stay out of
    (or, for an exact write, the value it must hold: the first)."""
    return f"#t{index}", f":tl{index}", f":th{index}"


def threshold_condition(free: Sequence[CrossingFree], exact: Sequence[ExactCheck], first: int = 0) -> str:
    """The crossing condition of one write (``tally.core.thresholds``), every part ANDed.

    A crossing-free level: ``(#t0 < :tl0 OR #t0 >= :th0)`` rising, ``(#t0 <= :tl0 OR #t0 > :th0)`` falling (a
    missing counter fails a comparison, so ``attribute_not_exists(#t0) OR`` goes before it when its start value
    passes); an end beyond every Number (None) leaves its side out. An exact write: ``#t0 = :tl0``, or
    ``(attribute_not_exists(#t0) OR #t0 = :tl0)`` when the value is the start value. Placeholders are numbered
    from ``first``, one per part.
    """
    conditions: list[str] = []
    for index, check in enumerate(free, start=first):
        name, low, high = threshold_placeholders(index)
        below, above = ("<", ">=") if check.direction == "rising" else ("<=", ">")
        sides = [(check.low, f"{name} {below} {low}"), (check.high, f"{name} {above} {high}")]
        outside = " OR ".join(side for end, side in sides if end is not None)
        conditions.append(f"(attribute_not_exists({name}) OR {outside})" if check.if_missing else f"({outside})")
    for index, exact_check in enumerate(exact, start=first + len(free)):
        name, value, _ = threshold_placeholders(index)
        equal = f"{name} = {value}"
        conditions.append(f"(attribute_not_exists({name}) OR {equal})" if exact_check.if_missing else f"({equal})")
    return " AND ".join(conditions)


CONDITION_MAX_OPERATORS: Final = 300
"""DynamoDB's limit on operators and functions in one expression ("The maximum number of operators or
functions allowed in any expression is 300", Constraints > Expression parameters)."""
_OPERATORS: Final = (" AND ", " OR ", "NOT ", " = ", " <> ", " < ", " <= ", " > ", " >= ", "attribute_not_exists(")


def condition_fits(expression: str) -> bool:
    """Whether a condition stays within DynamoDB's 300 operators and 4 KB per expression. A write's crossing
    conditions grow with the windows it moves a thresholded counter in (late events spread over many hours):
    one that would not fit is refused before it is sent, as DynamoDB would refuse it."""
    operators = sum(expression.count(word) for word in _OPERATORS)
    return operators <= CONDITION_MAX_OPERATORS and len(expression.encode("utf-8")) <= UPDATE_EXPRESSION_MAX_BYTES
