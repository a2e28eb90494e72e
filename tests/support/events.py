"""Load the sample events in ``events/``: the handler tests run on these very files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tally.sources import kinesis as kinesis_source
from tally.sources import sqs as sqs_source

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.core.model import SourceRecord
    from tally.pipeline import BatchPipeline, BatchResult
    from tally.reader import CounterReader

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"
SAMPLES_SENT_MS: Final = 4_102_444_800_000
"""The samples' SentTimestamp / arrival time (2100-01-01): their events' ``ts`` are never in the future."""
RECORDS_FROM_EVENT: Final[dict[str, Callable[[dict[str, Any]], Sequence[SourceRecord]]]] = {
    "sqs": sqs_source.records_from_event,
    "kinesis": kinesis_source.records_from_event,
}
"""The source's own decoding of a Lambda event, by ``expected.json``'s ``source``."""


def processed_twice(
    pipeline: BatchPipeline, event_file: str, spec: Mapping[str, Any], now_ms: int
) -> tuple[BatchResult, BatchResult]:
    """A sample event read by its source (``spec``'s) and processed twice: a redelivery of the whole batch."""
    records = RECORDS_FROM_EVENT[spec["source"]](load_event(event_file))
    return pipeline.process(records, now_ms, lambda: 60_000), pipeline.process(records, now_ms, lambda: 60_000)


def expected_samples(suffix: str) -> dict[str, Any]:
    """``events/expected.json``'s entries for the sample files whose names end with ``suffix``."""
    specs: dict[str, Any] = json.loads((EVENTS_DIR / "expected.json").read_text(encoding="utf-8"))
    return {name: spec for name, spec in specs.items() if name.endswith(suffix)}


def expected_of_source(source: str) -> dict[str, Any]:
    """``events/expected.json``'s entries for the sample files of one source (``sqs``, ``kinesis``)."""
    specs: dict[str, Any] = json.loads((EVENTS_DIR / "expected.json").read_text(encoding="utf-8"))
    return {name: spec for name, spec in specs.items() if spec["source"] == source}


def load_event(name: str) -> dict[str, Any]:
    """The Lambda event stored in ``events/<name>``."""
    event: dict[str, Any] = json.loads((EVENTS_DIR / name).read_text(encoding="utf-8"))
    return event


def sqs_event(bodies: list[str], *, first: int = 1, sent_ms: int = 4_102_444_800_000) -> dict[str, Any]:
    """A Lambda SQS event with one record per body, shaped like the files in ``events/``."""
    template = load_event("sqs-single.json")["Records"][0]
    records = []
    for offset, body in enumerate(bodies):
        record = json.loads(json.dumps(template))
        record["messageId"] = f"msg-{first + offset:06d}"
        record["body"] = body
        record["attributes"]["SentTimestamp"] = str(sent_ms)
        records.append(record)
    return {"Records": records}


def sample_views(reader: CounterReader, spec: Mapping[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The all-time rows of each view ``spec`` (``events/expected.json``) names, in its shape: the read endpoint's."""
    return {
        key: {
            view: [
                {"dims": dict(row.dims), "counters": {name: str(value) for name, value in row.counters.items()}}
                for row in reader.group(key, view).rows
            ]
            for view in views
        }
        for key, views in spec.get("views", {}).items()
    }
