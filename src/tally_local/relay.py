"""A TCP relay: connections to one address forwarded, byte for byte, to another.

Why: the local stack's endpoints listen on loopback (DynamoDB Local, moto), where a function container of
``sam local invoke`` cannot reach them: a container on Docker's default bridge reaches the host only at
the bridge's address (docker0, 172.17.0.1 by default). A relay on that address lets the containers in and
nothing beyond this machine. A relay on a fixed loopback port also keeps an endpoint's address the same
across restarts of the stack, whatever port the emulator behind it got. It knows nothing of the
protocols it carries.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import socket
import struct
import threading
from typing import Final, Self
from urllib.parse import urlsplit

from tally_local.service import BackgroundService

logger = logging.getLogger(__name__)

_SIOCGIFADDR: Final = 0x8915
_CHUNK: Final = 65536


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface ``name`` (e.g. docker0), or ``None`` if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


class TcpRelay(BackgroundService):
    """Listens on ``host:port`` (0: a free port) and forwards each connection to ``target`` (a URL)."""

    def __init__(self, target: str, host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(target)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"a relay needs a target with host and port, not {target!r}")
        self._target = (parts.hostname, parts.port)
        self._scheme = parts.scheme or "http"
        self._address = (host, port)
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        listener = socket.create_server(self._address, reuse_port=False)
        listener.settimeout(0.5)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, name=f"relay-{self.endpoint_url}", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint_url(self) -> str:
        if self._listener is None:
            raise RuntimeError("the relay is not started")
        host, port = self._listener.getsockname()[:2]
        return f"{self._scheme}://{host}:{port}"

    def stop(self) -> None:
        """Stop accepting (connections in flight end with their peers). Safe to call twice."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _accept(self) -> None:
        while (listener := self._listener) is not None:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError as exc:
                logger.warning("relay %s: cannot reach %s:%s: %s", self._address, *self._target, exc)
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            _Connection(client, upstream).start()


class _Connection:
    """Both directions of one relayed connection; the sockets are closed once both directions end."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self._sockets = (client, upstream)
        self._open = 2
        self._lock = threading.Lock()

    def start(self) -> None:
        client, upstream = self._sockets
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy until ``source`` ends, then end ``sink``'s sending side (a half-close, as TCP allows)."""
        with contextlib.suppress(OSError):
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            self._open -= 1
            done = self._open == 0
        if done:
            for end in self._sockets:
                end.close()
