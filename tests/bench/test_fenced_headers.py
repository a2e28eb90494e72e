"""``bench.fenced_headers`` at a tiny size: containers sharing keys read the other epochs' headers in one request
per fenced batch at most, and count exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bench import fenced_headers

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal


@pytest.mark.integration
def test_three_containers_on_the_same_keys_read_other_epochs_headers_once_a_batch(
    dynamodb_local: DynamoDBLocal,
) -> None:
    # every counter is checked against the stream's sums inside (a mismatch raises)
    figures = fenced_headers.measure(dynamodb_local, 3, keys=10, batches=2, messages=2)
    assert figures.batches == 6
    # a batch that met the others' marks asked for their headers in one request at most, never a GetItem each (how
    # many it met depends on how the threads interleave: tests/integration/test_fenced_journal.py pins it down)
    assert figures.header_requests <= figures.batches
    assert figures.headers_asked >= figures.header_requests
    assert "GetItem" not in figures.requests
