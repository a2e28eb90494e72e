"""What a chaos run wires each consumer's pipeline from: the run's tables and the factory that builds a pipeline.

Apart from ``harness`` so that the pieces the harness drives (``horizon``) can name them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.commit.marker_reads import MarkerReadGate
    from tally.pipeline import BatchPipeline, DeadLetterQueue
    from tally.post_commit import ArchiveWriter
    from tally_local.chaos.config import ChaosConfig


@dataclass(frozen=True, slots=True)
class Tables:
    counters: str
    markers: str


class PipelineFactory(Protocol):
    """Builds one consumer's pipeline on its client (production wiring: ``wire_pipeline``); ``archive`` is where
    it archives what it counts (None: off), its records' times read from ``clock`` (the run's virtual clock);
    ``fenced``: its journal batches applied by fenced single-item writes, else by chunk transactions."""

    def __call__(
        self,
        client: DynamoDBClient,
        tables: Tables,
        dead_letters: DeadLetterQueue,
        config: ChaosConfig,
        *,
        marker_read_gate: MarkerReadGate | None = None,
        archive: ArchiveWriter | None = None,
        clock: Callable[[], int] | None = None,
        fenced: bool = True,
    ) -> BatchPipeline: ...
