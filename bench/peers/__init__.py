"""The peers: what a user would otherwise write, and tally, behind one small interface.

Each peer is a Lambda SQS handler (``handle(event, context)`` returns the partial batch response) over
its own freshly created tables, given one boto3 client (the metered one). ``read_counters`` reads the
results back through a different, unmetered client once the run is over.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast

from tally_local.context import LocalLambdaContext
from tally_local.kit.meter import DynamoDBMeter
from tally_local.kit.shadow import UnsupportedRequest

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from decimal import Decimal

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient


class Peer(Protocol):
    """A counting approach under test."""

    name: str

    @property
    def items_per_key(self) -> int:
        """Counter items one key's events write (tally's time windows add items); for the write floor."""
        ...

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        """Process one Lambda SQS event; returns ``{"batchItemFailures": [...]}``."""
        ...

    def read_counters(self, keys: Iterable[str]) -> dict[str, dict[str, Decimal]]:
        """The counters of ``keys`` after the run (absent keys read as empty)."""
        ...

    def track(self, meter: DynamoDBMeter) -> None:
        """Declare this peer's tables (and their key attributes) to the meter."""
        ...

    def drop(self) -> None:
        """Delete the peer's tables."""
        ...


@contextmanager
def metered(peer: Peer, client: DynamoDBClient) -> Iterator[DynamoDBMeter]:
    """A meter billing ``peer``'s calls on ``client`` while the block runs; the peer's tables are dropped after it."""
    meter = DynamoDBMeter()
    peer.track(meter)
    try:
        with meter.attached(client):
            yield meter
    except UnsupportedRequest as exc:
        raise UnsupportedRequest(f"{peer.name}: {exc}") from exc
    finally:
        peer.drop()


def lambda_context(remaining_ms: int = 900_000) -> LambdaContext:
    """A local Lambda context (tally's ``LocalLambdaContext``), typed as the handlers expect it."""
    return cast("LambdaContext", LocalLambdaContext(remaining_ms=remaining_ms))
