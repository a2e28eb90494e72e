"""A Lambda context for local runs and tests, with a controllable deadline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LocalLambdaContext:
    """What the handler and Powertools read from a real ``LambdaContext``; the deadline is fixed."""

    remaining_ms: int = 60_000
    function_name: str = "tally-local-CounterFunction"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:tally-local-CounterFunction"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms
