"""Load the sample events in ``events/``: the handler tests run on these very files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"


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
