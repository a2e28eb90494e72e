"""moto's server (SQS, Kinesis, CloudFormation, ...) on 127.0.0.1, handling one request at a time.

Why not moto's ``ThreadedMotoServer`` as it is: it runs each request in a thread of its own, and moto's
service models are not thread-safe. Measured here with concurrent producers and pollers: Kinesis
``PutRecord`` computes a shard's next sequence number as ``max + 1`` and stores the record under it, so
two concurrent puts can get the same number and one record silently replaces the other (2 of 2,719
records lost in a 100,000-event demo run), and SQS ``ReceiveMessage`` failed with "Set changed size
during iteration" while another request changed the queue. Real SQS and Kinesis serialise these
internally; this server does the same for moto, with one lock around the application (the connections
are still accepted and read by threads). Clients should not long-poll it: a waiting ``ReceiveMessage``
holds the lock for its whole wait (the local pollers short-poll and pause instead).

Why not on top of ``ThreadedMotoServer``: it builds its server inside its thread and offers no hook for the
application, so wrapping it would reach into its private ``_server``; moto's application and request
handler, used here as ``ThreadedMotoServer`` uses them, are the pieces that matter. This module serves
moto; it must not create resources (``tally_local.stack`` does).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Self

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from tally_local.service import BackgroundService

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from werkzeug.serving import BaseWSGIServer


class _Serialised:
    """A WSGI application that lets one request at a time into the one it wraps."""

    def __init__(self, application: Callable[..., Iterable[bytes]]) -> None:
        self._application = application
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with self._lock:
            # moto's Flask views build the whole body before returning: nothing runs after the lock.
            return list(self._application(environ, start_response))


class SerialMotoServer(BackgroundService):
    """Start with ``start()`` (or ``with``); ``endpoint_url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._server is not None:
            return self
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        application = _Serialised(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._host, self._port, application, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        """Stop serving and wait for the server thread. Safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
