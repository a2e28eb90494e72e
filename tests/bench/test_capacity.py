"""Unit tests for ``tally.cost.capacity``: DynamoDB item sizes and capacity units, per AWS's documented rules."""

from __future__ import annotations

from typing import Any

import pytest

from tally.cost.capacity import item_size, number_size, read_units, transactional_write_units, write_units

# (item, expected size in bytes): attribute name bytes + value bytes.
ITEM_SIZES: list[Any] = [
    pytest.param(None, 0, id="no-item"),
    pytest.param({"pk": {"S": "abc"}}, 2 + 3, id="string"),
    pytest.param({"é": {"S": "€"}}, 2 + 3, id="utf8-name-and-value"),
    pytest.param({"n": {"N": "123"}}, 1 + 3, id="number-3-digits"),
    pytest.param({"n": {"N": "1000"}}, 1 + 2, id="number-trailing-zeroes-trimmed"),
    pytest.param({"n": {"N": "0.0100"}}, 1 + 2, id="number-leading-zeroes-trimmed"),
    pytest.param({"n": {"N": "-12.345"}}, 1 + 4, id="number-5-digits-negative"),
    pytest.param({"n": {"N": "0"}}, 1 + 2, id="zero"),
    pytest.param({"n": {"N": "1" * 38}}, 1 + 20, id="number-38-digits"),
    pytest.param({"b": {"B": b"\x00\x01\x02"}}, 1 + 3, id="binary-raw-length"),
    pytest.param({"t": {"BOOL": True}, "z": {"NULL": True}}, 2 + 2, id="bool-and-null"),
    pytest.param({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}, 1 + 3 + (1 + 2) + (1 + 2), id="list-overheads"),
    pytest.param({"m": {"M": {"k": {"S": "v"}}}}, 1 + 3 + (1 + 1 + 1), id="map-counts-element-names"),
    pytest.param({"ss": {"SS": ["a", "bc"]}, "ns": {"NS": ["1", "22"]}}, 2 + 3 + 2 + 4, id="sets"),
    pytest.param(
        {"pk": {"S": "usage:tenant-0001"}, "sk": {"S": "all"}, "c#units": {"N": "42"}, "c#cost": {"N": "1.23456"}},
        (2 + 17) + (2 + 3) + (7 + 2) + (6 + 4),
        id="a-tally-counter-item",
    ),
]


@pytest.mark.parametrize(("item", "expected"), ITEM_SIZES)
def test_item_size_follows_the_documented_rules(item: Any, expected: int) -> None:
    # GIVEN an item in DynamoDB's wire shape WHEN its size is computed THEN names and values add up
    assert item_size(item) == expected


@pytest.mark.parametrize(("text", "expected"), [("1", 2), ("12", 2), ("123", 3), ("1E+10", 2), ("-0.5", 2)])
def test_number_size_is_one_byte_per_two_significant_digits_plus_one(text: str, expected: int) -> None:
    assert number_size(text) == expected


@pytest.mark.parametrize(
    ("size", "units", "transactional"),
    [(0, 1, 2), (1, 1, 2), (1024, 1, 2), (1025, 2, 4), (3000, 3, 6), (400 * 1024, 400, 800)],
)
def test_write_units_are_per_started_kilobyte_and_doubled_in_transactions(
    size: int, units: int, transactional: int
) -> None:
    # GIVEN an item size WHEN it is written plainly or in a transaction THEN 1 unit per started KB, twice
    assert write_units(size) == units
    assert transactional_write_units(size) == transactional


@pytest.mark.parametrize(
    ("size", "consistent", "expected"),
    [(0, True, 1.0), (4096, True, 1.0), (4097, True, 2.0), (1, False, 0.5), (8193, False, 1.5)],
)
def test_read_units_are_per_started_4kb_and_halved_when_eventually_consistent(
    size: int, consistent: bool, expected: float
) -> None:
    assert read_units(size, consistent=consistent) == expected


@pytest.mark.parametrize("value", [{"S": "a", "N": "1"}, {"X": "1"}, {"B": 3}])
def test_malformed_values_are_refused_rather_than_guessed(value: Any) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        item_size({"a": value})
