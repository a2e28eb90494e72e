"""``tally.runtime.report``: what an operator sees of a batch in the logs."""

from __future__ import annotations

import io
import json
import logging

from aws_lambda_powertools import Logger, Metrics

from tally.pipeline import BatchResult, HeldRecord
from tally.runtime import METRICS_NAMESPACE, report

LEASE_END_MS = 4_102_444_890_000


def test_a_record_held_by_a_live_lease_is_logged_at_warning_with_the_batch_and_the_lease_end() -> None:
    # GIVEN a batch result with one record held back by another invocation's journal batch
    result = BatchResult(
        failed_record_ids=("rec-1",),
        dead_letters=(),
        stalls=(HeldRecord("rec-1", "batch-7", LEASE_END_MS),),
        figures={"RecordsReceived": 1, "RecordsFailed": 1, "RecordsHeldByLease": 1},
    )
    logs = io.StringIO()
    logger = Logger(service="tally-test", logger_handler=logging.StreamHandler(logs))
    metrics = Metrics(namespace=METRICS_NAMESPACE, service="tally-test")
    # WHEN it is reported
    report(result, metrics, logger)
    metrics.clear_metrics()
    # THEN one WARNING says which record, which batch holds it, and until when
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    stalls = [line for line in lines if line["level"] == "WARNING"]
    assert len(stalls) == 1
    assert (stalls[0]["record_id"], stalls[0]["batch_id"], stalls[0]["lease_until_ms"]) == (
        "rec-1",
        "batch-7",
        LEASE_END_MS,
    )
    assert stalls[0]["lease_until"] == "2100-01-01T00:01:30.000+00:00"
    assert "held back by a live journal batch" in stalls[0]["message"]
