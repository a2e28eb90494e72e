"""No import cycles among ``src/tally`` modules.

Why: a cycle means a reader cannot understand either module without the other; lazy and
TYPE_CHECKING imports count too (see bench/imports.py).
"""

import sys

from bench.imports import cycles, graph


def test_no_import_cycles() -> None:
    _, edges = graph()
    assert cycles(edges) == []


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_cycle_finder_leaves_the_recursion_limit_alone() -> None:
    """msgspec's JSON nesting limit follows the interpreter's recursion limit: a test process that raised it
    decoded, as numbers, 3,000-deep bodies that production refuses as ``malformed_json``."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Lambda's python3.13 runs with the default
    try:
        cycles(graph()[1])
        assert sys.getrecursionlimit() == 1000
    finally:
        sys.setrecursionlimit(before)
