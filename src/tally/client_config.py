"""The botocore configuration of tally's AWS clients, in a module of its own so that what needs only it (the
operator CLI) does not import the Lambda wiring (``tally.runtime``) to get it."""

from __future__ import annotations

from typing import Final

from botocore.config import Config

# botocore retries throttling and 5xx on its own (reusing the transaction's ClientRequestToken); tally's
# applier retries what is left (conflict cancellations, which botocore never retries) under its deadline.
CLIENT_CONFIG: Final = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=3,
    read_timeout=10,
    tcp_keepalive=True,
)
