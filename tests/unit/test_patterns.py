"""``KeyPattern``: how every declaration (hot keys, defaults, bounds, thresholds) matches keys, written once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.patterns import KeyPattern


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("page:/home", "page:/home", True),
        ("page:/home", "page:/home2", False),
        ("tenant:*", "tenant:7", True),
        ("tenant:*", "tenant:", True),
        ("tenant:*", "tenant", False),
        ("*", "anything", True),
    ],
)
def test_a_pattern_is_an_exact_key_or_a_prefix_ending_in_a_star(pattern: str, key: str, matches: bool) -> None:
    assert KeyPattern(pattern).matches(key) is matches


@pytest.mark.parametrize(
    ("left", "right", "overlap"),
    [
        ("a", "a", True),
        ("a", "b", False),
        ("ab", "a*", True),
        ("b", "a*", False),
        ("a*", "ab*", True),
        ("a*", "b*", False),
    ],
)
def test_two_patterns_overlap_when_some_key_matches_both(left: str, right: str, overlap: bool) -> None:
    assert KeyPattern(left).overlaps(KeyPattern(right)) is overlap
    assert KeyPattern(right).overlaps(KeyPattern(left)) is overlap


PATTERN_TEXT = st.text("ab", max_size=3).flatmap(lambda head: st.sampled_from([head, head + "*"]))


@given(PATTERN_TEXT, PATTERN_TEXT, st.text("ab", max_size=5))
def test_a_key_both_patterns_match_means_they_overlap(left: str, right: str, key: str) -> None:
    # GIVEN any two patterns over a small alphabet and any key
    first, second = KeyPattern(left), KeyPattern(right)
    # THEN a key matching both proves the overlap (the parsers refuse a bound on a key that may be hot by it)
    if first.matches(key) and second.matches(key):
        assert first.overlaps(second)
