"""Unit tests for ``tally_local.kit.shadow``: the model of written items that supplies old and new item sizes."""

from __future__ import annotations

from typing import Any

import pytest

from tally_local.kit.shadow import Expression, ShadowTables, UnsupportedRequest, apply_update

KEY = {"pk": {"S": "k"}}

UPDATES: list[Any] = [
    pytest.param(None, "ADD #c :v", {"#c": "c"}, {":v": {"N": "5"}}, {**KEY, "c": {"N": "5"}}, id="add-creates"),
    pytest.param(
        {**KEY, "c": {"N": "0.1"}},
        "ADD #c :v",
        {"#c": "c"},
        {":v": {"N": "0.2"}},
        {**KEY, "c": {"N": "0.3"}},
        id="add-is-exact-decimal",
    ),
    pytest.param(
        None,
        "SET #a = if_not_exists(#a, :z) + :v",
        {"#a": "a"},
        {":z": {"N": "0"}, ":v": {"N": "2"}},
        {**KEY, "a": {"N": "2"}},
        id="set-if-not-exists-missing",
    ),
    pytest.param(
        {**KEY, "a": {"N": "40"}},
        "SET #a = if_not_exists(#a, :z) + :v",
        {"#a": "a"},
        {":z": {"N": "0"}, ":v": {"N": "2"}},
        {**KEY, "a": {"N": "42"}},
        id="set-if-not-exists-present",
    ),
    pytest.param(
        {**KEY, "visits": {"N": "7"}},
        "SET visits = visits + :inc",
        {},
        {":inc": {"N": "1"}},
        {**KEY, "visits": {"N": "8"}},
        id="set-path-plus-value",
    ),
    pytest.param(
        {**KEY, "s": {"S": "INPROGRESS"}, "x": {"N": "1"}},
        "SET #s = :s, #d = :d REMOVE #x",
        {"#s": "s", "#d": "d", "#x": "x"},
        {":s": {"S": "COMPLETED"}, ":d": {"S": "{}"}},
        {**KEY, "s": {"S": "COMPLETED"}, "d": {"S": "{}"}},
        id="set-values-and-remove",
    ),
    pytest.param(
        {**KEY, "a": {"N": "1"}},
        "SET #a = :new ADD #b :v",
        {"#a": "a", "#b": "b"},
        {":new": {"N": "9"}, ":v": {"N": "1"}},
        {**KEY, "a": {"N": "9"}, "b": {"N": "1"}},
        id="two-clauses",
    ),
]


@pytest.mark.parametrize(("old", "expression", "names", "values", "expected"), UPDATES)
def test_update_expressions_apply_as_dynamodb_would(
    old: Any, expression: str, names: dict[str, str], values: dict[str, Any], expected: Any
) -> None:
    # GIVEN an item (or none) WHEN an update expression is applied THEN the result matches DynamoDB's semantics
    assert apply_update(old, KEY, expression, Expression(names, values)) == expected


@pytest.mark.parametrize(
    ("expression", "names", "values"),
    [
        ("SET a.b = :v", {}, {":v": {"N": "1"}}),
        ("SET a[0] = :v", {}, {":v": {"N": "1"}}),
        ("DELETE #s :v", {"#s": "s"}, {":v": {"SS": ["x"]}}),
        ("ADD #s :v", {"#s": "s"}, {":v": {"SS": ["x"]}}),
        ("SET #a = #a + :v", {"#a": "a"}, {":v": {"N": "1"}}),
        ("SET #a = list_append(#a, :v)", {"#a": "a"}, {":v": {"L": []}}),
        ("#a = :v", {"#a": "a"}, {":v": {"N": "1"}}),
    ],
)
def test_anything_outside_the_subset_is_refused_not_guessed(
    expression: str, names: dict[str, str], values: dict[str, Any]
) -> None:
    # GIVEN an update the meter cannot bill exactly WHEN it is applied THEN it raises instead of guessing
    with pytest.raises((UnsupportedRequest, KeyError)):
        apply_update({**KEY, "s": {"S": "x"}}, KEY, expression, Expression(names, values))


def test_shadow_tables_keep_items_by_key_and_refuse_untracked_tables() -> None:
    # GIVEN a tracked table with a composite key
    shadow = ShadowTables()
    shadow.track("t", ["pk", "sk"])
    item = {"pk": {"S": "a"}, "sk": {"S": "all"}, "c": {"N": "1"}}
    # WHEN an item is put, read by its key, and deleted
    shadow.put("t", item)
    key = shadow.key_of("t", item)
    assert shadow.get("t", key) == item
    shadow.delete("t", key)
    # THEN it is gone, and a table nobody declared is refused
    assert shadow.get("t", key) is None
    with pytest.raises(UnsupportedRequest):
        shadow.get("other", key)
