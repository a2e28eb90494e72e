"""The botocore configuration of tally's AWS clients, in a module of its own so that what needs only it (the
operator CLI) does not import the Lambda wiring (``tally.runtime``) to get it."""

from __future__ import annotations

from typing import Final

from botocore.config import Config

# botocore retries throttling and 5xx on its own (reusing the transaction's ClientRequestToken); tally's
# applier retries what is left (conflict cancellations, which botocore never retries) under its deadline.
# No client-side parameter validation: the store encodes every request itself from typed plans, and DynamoDB
# validates each one again; botocore's walk of every request took 11% of a packed batch's CPU and 15% of a
# single-event batch's (`python -m bench duration`, the pipeline's CPU with and without it, three rounds each), and
# a fenced batch at 512 MB is CPU-bound. The test session validates every call as botocore would instead
# (tally_local.kit.calls), so an encoding mistake still fails a test where it is made.
CLIENT_CONFIG: Final = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=3,
    read_timeout=10,
    tcp_keepalive=True,
    parameter_validation=False,
)
