"""Each module stands above what it uses (issue 18, parts 1 and 2).

Why: a newcomer who changes how a batch commits should read the protocol without the retry policy or the
metrics, and the error types without the producer library. ``tests/unit/test_imports.py`` checks the whole
package for cycles; these tests pin the layers of the commit path and the error types, whose cycles were
removed here, so that one cannot come back while another part of the package still has its own.
"""

from __future__ import annotations

from bench.imports import graph


def test_the_error_types_import_nothing_of_tally() -> None:
    _, edges = graph()
    assert edges["tally.errors"] == set()
