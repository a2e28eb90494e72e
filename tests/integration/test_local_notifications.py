"""The notifications path on the local stack: the real function (through the local event source mappings)
records a crossing; the local pipe (``tally_local.pipe``, modelling ``NotificationsPipe``) puts it to moto's
EventBridge with the template's own input template; a rule delivers it to a queue, as a consumer's would. The
pipe is at least once: a put whose answer is lost is put again, under the same ``notification_id``."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally_local.pipe import LocalNotificationsPipe, received, render
from tests.integration.test_local_end_to_end import DRAIN_S
from tests.support.local_stack import pollers, running_stack, tally_json

if TYPE_CHECKING:
    from pathlib import Path

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

LOW_STOCK = {
    "Source": "SQS",
    "BatchingWindowSeconds": "0",
    "CounterDefaults": "stock:*#stock=start:12",
    "CounterThresholds": "stock:*#stock<=10",
}


def test_a_low_stock_crossing_reaches_a_consumer_once_with_its_id(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, LOW_STOCK) as stack:
        pipe = LocalNotificationsPipe(stack)
        inbox = pipe.inbox()
        sqs = stack.client("sqs")
        assert stack.queue_url is not None
        with pollers(stack, tmp_path) as mappings, pipe:
            # WHEN three sales of 1 reach the function (stock 12 -> 9: the third crosses 10), one sent twice
            sales = [json.dumps({"id": f"sale-{n}", "key": "stock:sku-1", "deltas": {"stock": -1}}) for n in range(3)]
            for body in [*sales, sales[2]]:
                sqs.send_message(QueueUrl=stack.queue_url, MessageBody=body)
            mappings.wait_until_drained(DRAIN_S)
            # THEN the consumer's queue gets one event, its detail the recorded crossing
            (event,) = received(sqs, inbox)
            assert (event["source"], event["detail-type"]) == ("tally", "tally.threshold-crossed")
            detail = event["detail"]
            assert (detail["key"], detail["counter"], detail["level"], detail["direction"]) == (
                "stock:sku-1",
                "stock",
                "10",
                "falling",
            )
            assert Decimal(detail["value"]) <= 10
            (recorded,) = tally_json("notifications", "list", "--json")
            assert detail["notification_id"] == recorded["notification_id"]
            assert pipe.lags_ms
            assert all(lag >= 0 for lag in pipe.lags_ms)


def test_the_pipe_puts_again_what_it_could_not_confirm(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, LOW_STOCK) as stack:
        pipe = LocalNotificationsPipe(stack)
        inbox = pipe.inbox()
        dynamodb, sqs = stack.client("dynamodb"), stack.client("sqs")
        item = {
            "notification_id": {"S": "n-1"},
            "key": {"S": 'stock:"quoted"'},
            "counter": {"S": "stock"},
            "level": {"N": "10"},
            "direction": {"S": "falling"},
            "window": {"S": "all"},
            "value": {"N": "9"},
            "step_value": {"N": "9"},
            "message_id": {"S": "m"},
            "at": {"N": "1"},
            "time": {"S": "1970-01-01T00:00:00.001Z"},
            "expires_at": {"N": "9999999999"},
        }
        dynamodb.put_item(TableName=pipe.table, Item=item)
        # WHEN its first put fails and its second is accepted but the answer is lost
        pipe.put_failures = 1
        assert pipe.run_once() == 0
        pipe.lost_answers = 1
        assert pipe.run_once() == 0
        assert pipe.run_once() == 1
        assert pipe.run_once() == 0  # read to the end: nothing new
        # THEN the consumer got it twice (at least once), both times with the same id; a re-write is not announced
        events = received(sqs, inbox, wait_s=1)
        assert [e["detail"]["notification_id"] for e in events] == ["n-1", "n-1"]
        assert events[0]["detail"]["key"] == 'stock:"quoted"'  # escaped as EventBridge does: valid JSON
        dynamodb.put_item(TableName=pipe.table, Item={**item, "value": {"N": "8"}})
        assert pipe.run_once() == 0


def test_render_fills_the_template_with_escaped_values() -> None:
    template = '{"a": "<$.dynamodb.NewImage.a.S>", "n": "<$.dynamodb.NewImage.n.N>"}'
    assert json.loads(render(template, {"a": {"S": 'x"\\y'}, "n": {"N": "1.50"}})) == {"a": 'x"\\y', "n": "1.50"}
