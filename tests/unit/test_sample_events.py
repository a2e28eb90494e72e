"""Each sample event of ``events/`` through its real handler on moto, twice, against ``events/expected.json``."""

from __future__ import annotations

from typing import Any

import pytest

from tally.handlers import kinesis as kinesis_handler
from tally.handlers import sqs as sqs_handler
from tests.support.events import expected_of_source, load_event
from tests.support.moto_function import (
    deliver_sample_twice,
    documented_after_two_deliveries,
    moto_stack,
    sample_outcome,
)

HANDLERS: dict[str, Any] = {"sqs": sqs_handler, "kinesis": kinesis_handler}
SAMPLES = [
    pytest.param(source, event_file, spec, id=event_file)
    for source in HANDLERS
    for event_file, spec in sorted(expected_of_source(source).items())
]


@pytest.mark.parametrize(("source", "event_file", "spec"), SAMPLES)
def test_each_sample_event_counts_as_documented(
    source: str, event_file: str, spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a sample event WHEN its handler runs on it twice (SQS: a redelivery of the whole batch; Kinesis:
    # the shard redelivered from its start)
    handler_module = HANDLERS[source]
    with moto_stack(monkeypatch, handler_module) as stack:
        first, second = deliver_sample_twice(handler_module, load_event(event_file), spec, monkeypatch)
        # THEN nothing is reported failed, and counters, dead letters, gauges and distinct counts are as documented
        assert first == {"batchItemFailures": []}
        assert second == {"batchItemFailures": []}
        assert sample_outcome(stack, spec) == documented_after_two_deliveries(spec)
