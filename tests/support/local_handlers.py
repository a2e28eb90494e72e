"""Handlers for the local runtime's tests: the real handlers, made to fail on cue.

They run inside the local runtime's execution environments (spawned processes), so they take their cue
from the environment: ``TALLY_TEST_FAIL_MARKER`` marks the records to fail (a substring of the body),
and each invocation's record ids are appended, one JSON line per invocation, to the file named by
``TALLY_TEST_INVOCATIONS``, which the test reads afterwards.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from tally.handlers import kinesis as real_kinesis
from tally.handlers import sqs as real_sqs

MARKER = "TALLY_TEST_FAIL_MARKER"
INVOCATIONS = "TALLY_TEST_INVOCATIONS"


def _log(ids: list[str]) -> None:
    with Path(os.environ[INVOCATIONS]).open("a") as log:
        log.write(json.dumps(ids) + "\n")


def _data(record: dict[str, Any]) -> str:
    return base64.b64decode(record["kinesis"]["data"]).decode("utf-8", "replace")


def sqs_reports_marked_records_failed(event: dict[str, Any], context: Any) -> Any:
    """Count the unmarked records with the real handler; report every marked one failed, every time."""
    marker = os.environ[MARKER]
    _log([record["messageId"] for record in event["Records"]])
    marked = [record["messageId"] for record in event["Records"] if marker in record["body"]]
    rest = [record for record in event["Records"] if marker not in record["body"]]
    response = real_sqs.handler({"Records": rest}, context) if rest else {"batchItemFailures": []}
    return {"batchItemFailures": [*response["batchItemFailures"], *({"itemIdentifier": i} for i in marked)]}


def kinesis_fails_marked_record_once(event: dict[str, Any], context: Any) -> Any:
    """The real handler; the first time a marked record is seen, it is also reported failed."""
    _log([record["kinesis"]["sequenceNumber"] for record in event["Records"]])
    response = real_kinesis.handler(event, context)
    marked = [record["kinesis"]["sequenceNumber"] for record in event["Records"] if os.environ[MARKER] in _data(record)]
    failed_once = Path(os.environ[INVOCATIONS] + ".failed-once")
    if not marked or failed_once.exists():
        return response
    failed_once.touch()
    return {"batchItemFailures": [*response["batchItemFailures"], *({"itemIdentifier": i} for i in marked)]}


def kinesis_crashes_on_marked_record(event: dict[str, Any], context: Any) -> Any:
    """A function error (an exception) whenever the batch holds a marked record; else the real handler."""
    _log([record["kinesis"]["sequenceNumber"] for record in event["Records"]])
    if any(os.environ[MARKER] in _data(record) for record in event["Records"]):
        raise RuntimeError("crashed on a marked record")
    return real_kinesis.handler(event, context)
