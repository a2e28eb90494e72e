"""``tally audit``, ``tally audit --fix``, ``tally void`` and ``tally events`` end to end on the local stack: the
pollers drive the real handlers, which archive to moto's S3; the commands read it back, publish their
corrections to the stack's queue, and the pollers count them like any message."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.producer import SqsPublisher
from tests.integration.test_local_end_to_end import DRAIN_S, planned
from tests.support.local_stack import pollers, running_stack, tally_json, tally_lines

if TYPE_CHECKING:
    from pathlib import Path

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

FAST = ("--settle", "0.5")


def run(*args: str) -> tuple[int, Any]:
    """A ``tally ... --json`` command's exit status and its JSON."""
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_audit_fix_void_and_events_on_the_local_stack(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    messages, expected = planned(300, seed=11)
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, {"Source": "SQS"}) as stack:
        assert stack.queue_url is not None
        assert stack.archive_bucket is not None
        with pollers(stack, tmp_path) as mappings:
            # GIVEN 300 events counted (and some re-sent once counted: duplicates), archived by the handlers; a copy
            # met while its original's journal batch is still open is held by that batch's lease and comes back one
            # visibility timeout later (420 s, as on AWS), which no drain here waits for (a clean-clone CI run met
            # two)
            publisher = SqsPublisher(stack.client("sqs"), stack.queue_url)
            assert publisher.send(messages).ok
            mappings.wait_until_drained(DRAIN_S)
            assert publisher.send(messages[:5]).ok
            mappings.wait_until_drained(DRAIN_S)
            # WHEN audited: every key, every window, exact
            status, report = run("audit", *FAST)
            assert (status, report["ok"], report["keys"]) == (0, True, len(expected))
            assert report["verdicts"]["drift"] == 0 == report["verdicts"]["unsettled"]
            assert report["archive"]["countings"] == len(messages)
            # WHEN a counter is edited by hand
            key = sorted(expected)[0]
            stack.client("dynamodb").update_item(
                TableName=stack.counters_table,
                Key={"pk": {"S": key}, "sk": {"S": "all"}},
                UpdateExpression="ADD #c :d",
                ExpressionAttributeNames={"#c": "c#count"},
                ExpressionAttributeValues={":d": {"N": "-2"}},
            )
            # THEN the audit says so and exits 1; --fix --dry-run shows the repair (a reset: days are kept forever)
            status, report = run("audit", *FAST)
            assert status == 1
            ((drift),) = report["findings"]
            assert (drift["key"], drift["window"], drift["verdict"], drift["difference"]) == (key, "all", "drift", 2)
            status, dry = run("audit", "--fix", "--dry-run", "--quiet", "0", *FAST)
            assert status == 1
            ((repair),) = dry["fix"]["repairs"]
            assert repair["reset"] == {"count": expected[key]["count"]}
            # AND --fix repairs it through the queue, waits until it is counted, and audits the key again
            status, fixed = run("audit", "--fix", "--quiet", "0", *FAST)
            assert (status, fixed["fix"]["not_counted_yet"], fixed["fix"]["after"]["ok"]) == (0, [], True)
            assert tally_json("get", key, "--json") == expected[key]
            # AND a second --fix finds nothing to repair
            status, again = run("audit", "--fix", "--quiet", "0", *FAST)
            assert (status, again["ok"], again["fix"]["repairs"]) == (0, True, [])
            # WHEN one counted message is voided (twice: the second is a duplicate)
            voided = messages[0]
            (event,) = voided.events
            status, plan = run("void", voided.message_id)
            assert (status, plan["sent"]) == (0, True)
            run("void", voided.message_id)
            mappings.wait_until_drained(DRAIN_S)
            # THEN its deltas are gone once from its key, and a third void is refused: already voided
            left = {name: value - event.deltas.get(name, 0) for name, value in expected[event.key].items()}
            assert tally_json("get", event.key, "--json") == left
            status, refused = run("void", voided.message_id)
            assert status == 1
            assert "already voided" in refused["refused"]
            status, report = run("audit", *FAST)
            assert (status, report["ok"]) == (0, True)
            # AND tally events lists what made the key, newest first: the voids, then the message
            history = tally_lines("events", event.key, "--json")
            assert [row["kind"] for row in history[:1]] == ["void"]
            assert voided.message_id in [row["id"] for row in history]
            assert [row["counted_ms"] for row in history] == sorted(
                (row["counted_ms"] for row in history), reverse=True
            )
