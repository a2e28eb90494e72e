"""``tally.local`` has no import cycle (issue 18): each module stands above what it uses.

The rest of ``src/tally`` is checked by ``test_imports.py``; this holds the local tooling to it on its own,
so a cycle elsewhere cannot hide one here.
"""

from bench.imports import cycles, graph


def test_no_import_cycle_in_the_local_tooling() -> None:
    _, edges = graph()
    local = {
        module: {target for target in targets if target.startswith("tally.local")}
        for module, targets in edges.items()
        if module.startswith("tally.local")
    }
    assert cycles(local) == []
