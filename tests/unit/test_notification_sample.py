"""events/notifications/threshold-crossed.json is what a consumer receives for the first crossing of
events/sqs-thresholds.json: its detail is the pipe's input template (template.yaml) filled from the item the
store writes for that crossing, so the sample cannot drift from the code or the template."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from tally.core.thresholds import Crossing, Direction, notification_id
from tally.store.notifications import notification_item
from tally_local.pipe import render
from tally_local.template import load_template

ROOT = Path(__file__).resolve().parents[2]


def test_the_sample_event_is_the_pipe_rendering_of_the_samples_first_crossing() -> None:
    sample = json.loads((ROOT / "events" / "notifications" / "threshold-crossed.json").read_text())
    expected = json.loads((ROOT / "events" / "expected.json").read_text())["sqs-thresholds.json"]
    first = expected["notifications"][0]
    detail = sample["detail"]
    # the id is the deterministic name of the documented crossing
    direction = Direction(first["direction"])
    assert detail["notification_id"] == notification_id(
        first["key"], first["counter"], Decimal(first["level"]), direction, first["message_id"]
    )
    crossing = Crossing(
        detail["notification_id"],
        first["key"],
        first["counter"],
        Decimal(first["level"]),
        direction,
        first["message_id"],
        Decimal(detail["value"]),
        Decimal(detail["step_value"]),
        int(detail["at"]),
    )
    pipe = load_template(ROOT / "template.yaml")["Resources"]["NotificationsPipe"]["Properties"]
    rendered = render(pipe["TargetParameters"]["InputTemplate"], notification_item(crossing, 0))
    assert json.loads(rendered) == detail
    assert (sample["source"], sample["detail-type"]) == (
        pipe["TargetParameters"]["EventBridgeEventBusParameters"]["Source"],
        pipe["TargetParameters"]["EventBridgeEventBusParameters"]["DetailType"],
    )
    # the value after the sample's batch is the documented count
    assert detail["value"] == expected["counters"][first["key"]][first["counter"]]
