"""``tally audit``, ``tally void`` and ``tally events`` at the command line: what they refuse before reading anything,
where they find the archive, and the JSON a script reads (the work itself: tests/integration/test_audit.py and,
end to end on the local stack, tests/integration/test_local_audit.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from click.testing import CliRunner

from tally.audit.auditor import AuditReport
from tally.audit.compare import Finding, Kind, Scope, Slot, Verdict
from tally.cli.audit import audit_document, unplaced_warning
from tally.cli.main import cli
from tally.cli.resolve import OUTPUT_VARIABLES, StackDescription
from tests.support.environment import set_environment


@pytest.fixture
def no_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    set_environment(monkeypatch, {"AWS_REGION": "us-east-1"}, without=("TALLY_ARCHIVE_BUCKET", "TALLY_STACK"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["audit", "--dry-run"], "--dry-run goes with --fix"),
        (["audit", "--fix", "--window", "hour"], "--fix needs the full audit"),
        (["audit", "--fix", "--since", "2026-12-01T00:00:00Z"], "--fix needs the full audit"),
        (["audit", "--since", "yesterday"], "neither epoch milliseconds nor ISO 8601"),
        (["audit", "--since", "2026-12-02T00:00:00Z", "--until", "2026-12-01T00:00:00Z"], "--since is after --until"),
        (["audit"], "give the archive bucket: --archive-bucket, --stack NAME, $TALLY_ARCHIVE_BUCKET or $TALLY_STACK"),
        (["void", "m-1"], "--archive-bucket"),
        (["events", "k"], "--archive-bucket"),
        (["audit", "--archive-bucket", "b", "--archive-prefix", "/events"], "must end with '/'"),
    ],
)
def test_what_is_refused_before_anything_is_read(no_stack: None, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_archive_bucket_is_a_stack_output() -> None:
    assert OUTPUT_VARIABLES["ArchiveBucketName"] == "TALLY_ARCHIVE_BUCKET"
    stack = StackDescription("s", {"ArchiveBucketName": "s-archivebucket-1"}, {})
    assert stack.variables() == {"TALLY_ARCHIVE_BUCKET": "s-archivebucket-1"}


def test_the_json_counts_values_and_keys_by_verdict_and_lists_every_value_not_exact() -> None:
    findings = (
        Finding(Slot("a", "all", Kind.COUNTER, "count"), Decimal(5), 7, Verdict.DRIFT),
        Finding(Slot("a", "d#2026-12-01", Kind.COUNTER, "count"), Decimal(7), 7, Verdict.EXACT),
        Finding(Slot("b", "all", Kind.COUNTER, "count"), Decimal("1.50"), Decimal("1.5"), Verdict.EXACT),
    )
    report = AuditReport(
        findings=findings,
        objects=3,
        records=10,
        countings=9,
        repairs=(),
        digest_mismatches=(),
        recounted_twice=("p",),
        reused_ids=(),
        reads=2,
        last_counted={"a": 1},
        started_ms=1_000,
        finished_ms=3_500,
    )
    document = audit_document(report, Scope(), "")
    assert document["ok"] is False
    assert (document["keys"], document["values"]) == (2, 3)
    assert document["verdicts"] == {"exact": 2, "drift": 1, "inexact": 0, "pending": 0, "unsettled": 0}
    assert document["keys_by_verdict"]["drift"] == 1
    (drift,) = document["findings"]
    assert (drift["stored"], drift["recounted"], drift["difference"]) == (5, 7, 2)
    assert (document["seconds"], document["recounted_twice"], document["reads"]) == (2.5, ["p"], 2)
    assert document["not_landed"] == []


def test_batches_never_seen_landed_are_listed_and_without_a_markers_table_warned_of() -> None:
    # GIVEN an audit that could not place the records two fenced batches wrote before their deltas landed
    report = AuditReport(
        findings=(Finding(Slot("a", "all", Kind.COUNTER, "count"), None, None, Verdict.UNSETTLED, "landing"),),
        objects=1,
        records=2,
        countings=2,
        repairs=(),
        digest_mismatches=(),
        recounted_twice=(),
        reused_ids=(),
        reads=1,
        last_counted={},
        started_ms=0,
        finished_ms=1,
        not_landed=("e1:00000001", "e2:00000007"),
    )
    # THEN --json lists them; a run that had no markers table warns why their values are unsettled, one that read
    # the headers (they were still landing) does not
    assert audit_document(report, Scope(), "")["not_landed"] == ["e1:00000001", "e2:00000007"]
    warning = unplaced_warning(report, markers_known=False)
    assert warning is not None
    assert warning.startswith("warning: 2 batch(es) archived before their deltas landed")
    assert "--markers-table" in warning
    assert unplaced_warning(report, markers_known=True) is None
