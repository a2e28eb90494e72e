"""Each module stands above what it uses.

Why: a newcomer who changes how a batch commits should read the protocol without the retry policy or the
metrics, and the error types without the producer library. ``tests/unit/test_imports.py`` checks the whole
package for cycles; these tests pin the layers of the commit path and the error types.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from bench.imports import graph


def test_the_error_types_import_nothing_of_tally() -> None:
    _, edges = graph()
    assert edges["tally.errors"] == set()


def all_imports(module: str) -> set[str]:
    """Every module ``module`` imports, anywhere in its file (TYPE_CHECKING and functions too)."""
    paths, _ = graph()
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(paths[module]).read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    ("module", "must_not_import"),
    [
        # the protocol: steps and fates only; how steps are retried, timed and counted comes from outside
        ("tally.commit.protocol", {"tenacity", "time", "random", "tally.commit.retrying", "tally.store", "boto3"}),
        # the retry policy knows nothing of markers, batches, messages or the store
        ("tally.commit.retrying", {"tally.commit.protocol", "tally.commit.ports", "tally.core", "tally.store"}),
        # the bookkeeping records; it calls nothing
        ("tally.commit.fates", {"tally.commit.protocol", "tally.commit.retrying", "tally.store", "tenacity"}),
        # the applier chooses paths; it neither retries nor talks to DynamoDB itself
        ("tally.commit.applier", {"tenacity", "tally.store.dynamodb", "tally.store.journal", "tally.errors"}),
    ],
)
def test_each_layer_of_the_commit_path_keeps_to_its_own(module: str, must_not_import: set[str]) -> None:
    imported = all_imports(module)
    crossing = {
        name for name in imported for banned in must_not_import if name == banned or name.startswith(banned + ".")
    }
    assert crossing == set()
