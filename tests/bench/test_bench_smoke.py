"""The benchmark suite at a tiny size: it runs, its accounting holds, its files are written.

This keeps ``bench/`` alive in CI. It asserts what must hold at any size (exact counts for tally, the
peers' double count of re-sends being measured rather than hidden, computed capacity agreeing with
DynamoDB Local where DynamoDB Local is right), never a time or a speed: those belong to ``make bench``.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING

import pytest
from bench.report import verdicts
from bench.run import run_suite
from bench.suite import SMOKE
from rich.console import Console

if TYPE_CHECKING:
    from pathlib import Path

    from bench.report import SuiteResults

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smoke(dynamodb_local: DynamoDBLocal, tmp_path_factory: pytest.TempPathFactory) -> tuple[SuiteResults, Path]:
    out = tmp_path_factory.mktemp("bench-smoke")
    console = Console(file=io.StringIO(), width=200)
    results = run_suite(
        SMOKE, out, label="smoke test", command="pytest", console=console, ddb=dynamodb_local, profile=False
    )
    return results, out


def test_every_peer_ran_on_every_workload(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    ran = {(run.workload, run.peer) for run in results.runs}
    for workload in ("U", "H"):
        assert {(workload, peer) for peer in ("naive", "powertools", "tally-single", "tally-packed")} <= ran
    assert {("U", "powertools-body-id"), ("U", "tally-single-windows"), ("U", "tally-packed-windows")} <= ran
    assert ("U", "tally-packed-chunked") in ran


def test_tally_runs_the_template_default_apply_and_one_chunked_row(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    tally = {run.peer: run for run in results.runs if run.peer.startswith("tally") and run.workload == "U"}
    # GIVEN the template's FencedApply default (true) THEN every tally row runs the fenced apply but the one
    # deployed with FencedApply=false, whose journal batches are applied by chunk transactions
    assert {peer for peer, run in tally.items() if not run.fenced} == {"tally-packed-chunked"}
    chunked, fenced = tally["tally-packed-chunked"], tally["tally-packed"]
    # AND the floor bills the fenced path's items at 1 unit, the chunked path's at 2, from the same batches
    assert chunked.footprints == fenced.footprints
    messages = sum(m for m, _, _ in fenced.footprints)
    items = sum(k for _, k, _ in fenced.footprints)
    assert (fenced.floor_write_units, chunked.floor_write_units) == (2 * messages + items, 2 * (messages + items))
    assert fenced.usage.calls["UpdateItem"] >= items


def test_tally_counts_exactly_and_applies_each_message_once(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    for run in results.runs:
        if not run.peer.startswith("tally"):
            continue
        assert run.correctness.exact, (run.workload, run.peer, run.correctness)
        assert run.pipeline is not None
        assert run.pipeline["events_applied"] == run.events
        assert run.pipeline["failed_records"] == run.pipeline["dead_letters"] == run.redelivered == 0
        # Committed writes can never go below the design's floor (one marker per message, one ADD per item).
        assert run.usage.write_units - run.usage.cancelled_write_units >= run.floor_write_units


def test_the_peers_double_count_every_resend_and_the_suite_reports_it(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    for run in results.runs:
        if run.peer not in ("naive", "powertools"):
            continue
        # GIVEN re-sends in the stream THEN each delivery was counted once: over the truth, never hidden
        correctness = run.correctness
        assert correctness.counted == correctness.delivered
        assert correctness.counted["units"] > correctness.expected["units"]
        assert not correctness.exact
        assert correctness.error_pct > 0


def test_powertools_keyed_on_the_producers_id_catches_the_resends(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    run = results.run("powertools-body-id", "U")
    assert run is not None
    # GIVEN the idempotency key is the body's id THEN a re-send fails the INPROGRESS put and is not counted
    assert run.correctness.exact
    distinct = run.records - run.usage.conditional_failures
    assert run.usage.calls == {"PutItem": run.records, "UpdateItem": 2 * distinct}
    assert run.usage.conditional_failures > 0


def test_accounting_matches_the_request_pattern_and_dynamodb_local(smoke: tuple[SuiteResults, Path]) -> None:
    results, _ = smoke
    for run in results.runs:
        usage = run.usage
        assert usage.single_item_mismatches == 0, (run.peer, usage)
        if run.peer == "naive":  # one UpdateItem of a sub-KB item per delivery
            assert usage.calls == {"UpdateItem": run.records}
            assert usage.write_units == run.records
        if run.peer == "powertools":  # INPROGRESS put, the ADD, COMPLETED update per record
            assert usage.calls == {"PutItem": run.records, "UpdateItem": 2 * run.records}
            assert usage.write_units == 3 * run.records
        if run.peer.startswith("tally"):
            # BatchWriteItem: the journal's pages (the meter bills them too)
            assert set(usage.calls) <= {"TransactWriteItems", "GetItem", "BatchGetItem", "UpdateItem", "BatchWriteItem"}
            assert usage.largest_item_bytes < 1024
            # In a fault-free, single-consumer run only existing markers can cancel a transaction.
            assert set(usage.cancellation_reasons) <= {"ConditionalCheckFailed on markers"}


def test_reports_are_written_with_every_target(smoke: tuple[SuiteResults, Path]) -> None:
    results, out = smoke
    text = (out / "benchmarks.md").read_text(encoding="utf-8")
    for section in ("## Results", "## Targets", "## Handler CPU", "## Peak memory", "## How it is measured"):
        assert section in text
    assert (out / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    payload = json.loads((out / "benchmarks.json").read_text(encoding="utf-8"))
    assert len(payload["runs"]) == len(results.runs)
    targets = {verdict.target for verdict in verdicts(results)}
    assert len(targets) >= 14
    assert {figure["path"] for figure in results.cpu["figures"]} >= {
        "tally core, single-event records",
        "powertools loop + json_body sum, single-event records",
    }
    assert results.memory["pipeline"]["failed"] == 0
