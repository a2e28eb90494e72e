"""A Lambda context for local runs and tests, with a controllable deadline."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class LocalLambdaContext:
    """What the handler and Powertools read from a real ``LambdaContext``.

    By default the remaining time is fixed (``remaining_ms``), which tests control directly; the local
    runtime gives each invocation a real deadline instead (``deadline_monotonic``, see ``with_timeout``),
    so the handler's retries see the clock run out as they would in Lambda.
    """

    remaining_ms: int = 60_000
    function_name: str = "tally-local-CounterFunction"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:tally-local-CounterFunction"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    deadline_monotonic: float | None = None
    """``time.monotonic()`` at which the invocation times out; None: ``remaining_ms`` forever."""

    @classmethod
    def with_timeout(
        cls, timeout_ms: int, *, function_name: str, function_arn: str, request_id: str
    ) -> LocalLambdaContext:
        """A context whose deadline is ``timeout_ms`` from now, as Lambda starts an invocation's clock."""
        return cls(
            remaining_ms=timeout_ms,
            function_name=function_name,
            invoked_function_arn=function_arn,
            aws_request_id=request_id,
            deadline_monotonic=time.monotonic() + timeout_ms / 1000,
        )

    def get_remaining_time_in_millis(self) -> int:
        if self.deadline_monotonic is None:
            return self.remaining_ms
        return max(0, int((self.deadline_monotonic - time.monotonic()) * 1000))
