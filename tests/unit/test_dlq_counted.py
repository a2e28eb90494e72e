"""``tally dlq``: letters whose refusal no longer holds (their message counts), and an aimed redrive.

A bounded message refused ``below_floor`` and later counted (a copy decided again after a restock) leaves
its letter in the queue. ``dlq list`` says which letters already count (the idempotency marker of the
letter's id holds that very content); ``dlq redrive`` deletes those instead of sending them, except the
letters of a post-commit refusal (their counters count; the redrive is what writes their gauges), and can be
aimed (``--reason``) and tried first (``--dry-run``). On moto: markers written by the production pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.ledger import Claim
from tally.core.model import Message, SourceRecord
from tally.store.counted import DynamoDBCountedLookup
from tally.store.journal import DynamoDBJournal
from tally_local.template import load_template, table_definitions
from tests.support.pipeline import make_pipeline, make_store

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
NOW_MS = 4_102_444_800_000

REFUSED_THEN_COUNTED = '{"id":"m1","key":"stock:a","delta":-5}'
REFUSED = '{"id":"m2","key":"stock:a","delta":-9}'
OTHER_CONTENT = '{"id":"m1","key":"stock:a","delta":-6}'
GAUGE_REFUSED = '{"id":"m3","key":"g:1","delta":1,"gauges":{"peak":{"max":3}}}'
POISON = '{"id":"m4","key":"k","detla":1}'
LETTERS = {
    REFUSED_THEN_COUNTED: "below_floor",
    REFUSED: "below_floor",
    OTHER_CONTENT: "id_conflict",
    GAUGE_REFUSED: "gauge_refused",
    POISON: "invalid_field",
}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, mocked_aws: None) -> dict[str, Any]:
    dynamodb, sqs = boto3.client("dynamodb"), boto3.client("sqs")
    tables = table_definitions(load_template(TEMPLATE))
    dynamodb.create_table(**tables["CountersTable"].create_table_kwargs("c"))
    dynamodb.create_table(**tables["MarkersTable"].create_table_kwargs("m"))
    # GIVEN two messages counted by the production pipeline (one once refused, one whose gauges were)
    pipeline, _ = make_pipeline(make_store(dynamodb, "c", "m"))
    counted = [SourceRecord(f"r{n}", body, NOW_MS) for n, body in enumerate((REFUSED_THEN_COUNTED, GAUGE_REFUSED))]
    assert pipeline.process(counted, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # AND a dead-letter queue holding five letters (one counted since, one of another content, ...)
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    target = sqs.create_queue(QueueName="target")["QueueUrl"]
    for body, code in LETTERS.items():
        attributes = {"tally.error_code": {"DataType": "String", "StringValue": code}}
        sqs.send_message(QueueUrl=dlq, MessageBody=body, MessageAttributes=attributes)
    monkeypatch.setenv("TALLY_COUNTERS_TABLE", "c")
    monkeypatch.setenv("TALLY_MARKERS_TABLE", "m")
    monkeypatch.setenv("TALLY_DLQ_URL", dlq)
    return {"sqs": sqs, "dynamodb": dynamodb, "dlq": dlq, "target": target}


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def listed(aws: dict[str, Any]) -> dict[str, Any]:
    """body -> its letter as ``dlq list --json`` prints it."""
    result = run("dlq", "list", "--json")
    assert result.exit_code == 0, result.output
    return {letter["body"]: letter for letter in map(json.loads, result.output.splitlines())}


def bodies(sqs: Any, queue_url: str) -> list[str]:
    found = []
    while messages := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        found += [message["Body"] for message in messages]
    return sorted(found)


def test_list_says_which_letters_already_count(aws: dict[str, Any]) -> None:
    # WHEN the queue is listed as JSON
    letters = listed(aws)
    # THEN exactly the letters whose id's marker holds their very content are counted: not the other content
    # under a counted id, not the refused one, not the poison
    assert {body: letter["counted"] for body, letter in letters.items()} == {
        REFUSED_THEN_COUNTED: True,
        REFUSED: False,
        OTHER_CONTENT: False,
        GAUGE_REFUSED: True,
        POISON: False,
    }
    # AND the table says which a redrive deletes (the refusal that no longer holds), and how many count
    table = run("dlq", "list").output
    assert "already counted: 2; a redrive deletes 1 of them" in " ".join(table.split())


def test_list_without_the_tables_says_counted_is_unknown(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_MARKERS_TABLE")
    assert {letter["counted"] for letter in listed(aws).values()} == {None}
    assert "counted: unknown" in run("dlq", "list").output


def test_dry_run_sends_and_deletes_nothing(aws: dict[str, Any]) -> None:
    # WHEN a redrive is tried first
    result = run("dlq", "redrive", "--dry-run", "--to-queue", aws["target"], "--json")
    # THEN it says what it would do: four sent, the counted refusal deleted; and nothing moved
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["dry_run"] is True
    assert len(summary["redriven"]) == 4
    assert [letter["reason"] for letter in summary["counted_deleted"]] == ["below_floor"]
    assert bodies(aws["sqs"], aws["target"]) == []
    assert len(listed(aws)) == 5
    assert "would be redriven" in run("dlq", "redrive", "--dry-run", "--to-queue", aws["target"]).output


def test_redrive_aimed_at_a_reason_deletes_what_counts_and_sends_the_rest_of_it(aws: dict[str, Any]) -> None:
    # WHEN only below_floor letters are redriven
    result = run("dlq", "redrive", "--reason", "below_floor", "--to-queue", aws["target"], "--json")
    # THEN the one that counts since is deleted unsent, the other sent; letters of other reasons stay
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (len(summary["redriven"]), len(summary["counted_deleted"]), summary["not_aimed"]) == (1, 1, 3)
    assert bodies(aws["sqs"], aws["target"]) == [REFUSED]
    assert sorted(listed(aws)) == sorted([OTHER_CONTENT, GAUGE_REFUSED, POISON])


def test_a_counted_post_commit_refusal_is_always_sent(aws: dict[str, Any]) -> None:
    # WHEN the gauge_refused letter (its counters count, its gauges do not) is redriven
    result = run(
        "dlq", "redrive", "--reason", "gauge_refused", "--reason", "invalid_field", "--to-queue", aws["target"]
    )
    # THEN it is sent, not deleted as counted: only the redrive can write its gauges
    assert result.exit_code == 0, result.output
    assert bodies(aws["sqs"], aws["target"]) == sorted([GAUGE_REFUSED, POISON])
    assert "other reasons (left alone)" in result.output


def test_a_marker_of_a_batch_not_committed_does_not_count(aws: dict[str, Any]) -> None:
    # GIVEN a message claimed by a journal batch that never committed (its header PREPARING)
    dynamodb = aws["dynamodb"]
    DynamoDBJournal(dynamodb, "c", "m", 86_400).open("b-1", NOW_MS + 60_000, [Claim("m2")], NOW_MS)
    message = decode_message(REFUSED)
    assert isinstance(message, Message)
    lookup = DynamoDBCountedLookup(dynamodb, "c", "m")
    # WHEN asked THEN it does not count (its batch may yet be aborted), and a counted one does
    assert lookup.counted({"m2": content_digest(message)}) == frozenset()
    counted = decode_message(REFUSED_THEN_COUNTED)
    assert isinstance(counted, Message)
    assert lookup.counted({"m1": content_digest(counted)}) == {"m1"}


def test_a_marker_of_a_fenced_batch_counts_from_its_commit(aws: dict[str, Any]) -> None:
    # GIVEN a message claimed by a fenced journal batch, committed and not yet DONE (FENCED)
    dynamodb = aws["dynamodb"]
    journal = DynamoDBJournal(dynamodb, "c", "m", 86_400)
    journal.open("b-1", NOW_MS + 60_000, [Claim("m2")], NOW_MS)
    journal.commit_header("b-1", 0)
    message = decode_message(REFUSED)
    assert isinstance(message, Message)
    # WHEN asked THEN it counts: whoever meets its marker finishes the batch
    assert DynamoDBCountedLookup(dynamodb, "c", "m").counted({"m2": content_digest(message)}) == {"m2"}
