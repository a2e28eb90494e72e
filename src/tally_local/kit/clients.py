"""Clients on local endpoints (DynamoDB Local, moto's server), all from one botocore session.

Why one session: a session parses the JSON of each service model it needs (the endpoints file, the service's
model, its paginators and waiters) the first time a client of that service is created, and a new session parses
them again. A chaos run of 20 events created a dozen DynamoDB clients, each in a session of its own, and spent
1.5 of its 1.9 CPU-s parsing the same files (cProfile: 59 ``json`` decodes); from one session it took 0.3 CPU-s.
A botocore session does not promise thread-safe client creation, and consumers create theirs from threads, so
creation holds a lock; the clients themselves are thread-safe, and each gets its own copy of the session's event
hooks (an instrument registered on one client sees only that client's calls).

The credentials are dummies: nothing created here may reach AWS.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

import botocore.session

if TYPE_CHECKING:
    from botocore.config import Config

_SESSION: Final = botocore.session.get_session()
_SESSION_LOCK: Final = threading.Lock()


def local_client(
    service: str,
    endpoint_url: str,
    *,
    region: str,
    access_key: str = "local",
    secret_key: str = "local",
    config: Config | None = None,
) -> Any:
    """A low-level client of ``service`` on ``endpoint_url`` (a local emulator), with dummy credentials."""
    with _SESSION_LOCK:
        return _SESSION.create_client(
            service,
            region_name=region,
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=config,
        )
