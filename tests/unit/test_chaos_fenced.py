"""The chaos run tells the fenced apply's requests apart (``tally_local.chaos.fenced.fenced_request``) on the requests
the journal's store really sends: each is captured before it leaves and answered in DynamoDB's place."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.epochs import FencedBatch
from tally.core.fence import mark_value
from tally.core.write import FencedWrite
from tally.errors import TallyError
from tally.store.journal import DynamoDBJournal
from tally_local.chaos.fenced import FencedRequest, fenced_request
from tally_local.kit.answers import error_answer
from tests.support.moto_server import client as boto_client

if TYPE_CHECKING:
    from tally_local.kit.answers import Answer

BATCH = FencedBatch("AAAAAAAAAAA", 3)
OTHER = FencedBatch("BBBBBBBBBBB", 9)


@pytest.fixture
def sent() -> tuple[DynamoDBJournal, list[tuple[str, dict[str, Any]]]]:
    """A journal on a client whose requests are recorded and answered with a throttle (nothing leaves)."""
    client = boto_client("dynamodb", "http://127.0.0.1:9")
    requests: list[tuple[str, dict[str, Any]]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> Answer:
        requests.append((model.name, params))
        return error_answer("ValidationException")

    client.meta.events.register("before-call.dynamodb", record)
    return DynamoDBJournal(client, "counters", "markers", 86_400), requests


def _sent_by(call: Any, requests: list[tuple[str, dict[str, Any]]]) -> FencedRequest | None:
    with pytest.raises(TallyError):  # every request is refused: only what it was matters
        call()
    operation, params = requests[-1]
    return fenced_request(operation, params)


def test_each_fenced_request_is_named_with_its_batch(sent: tuple[DynamoDBJournal, list[Any]]) -> None:
    journal, requests = sent
    adds = {"count": Decimal(1)}
    write = FencedWrite("k:1", adds, {}, BATCH.epoch, mark_value(BATCH.seq, 0), None)
    pruning = FencedWrite(
        "k:1", adds, {}, BATCH.epoch, mark_value(BATCH.seq, 1), mark_value(BATCH.seq, 0), {OTHER.epoch: 9 * 1024}
    )

    assert _sent_by(lambda: journal.apply_fenced(write), requests) == FencedRequest("write", BATCH.batch_id)
    assert _sent_by(lambda: journal.apply_fenced(pruning), requests) == FencedRequest(
        "write", BATCH.batch_id, prunes=True
    )
    assert _sent_by(lambda: journal.commit_header(BATCH.batch_id, 2), requests) == FencedRequest(
        "commit", BATCH.batch_id
    )
    assert _sent_by(lambda: journal.mark_done(BATCH.batch_id, 5), requests) == FencedRequest("done", BATCH.batch_id)


def test_other_requests_are_not_fenced() -> None:
    body = {"TableName": "counters", "Key": {"pk": {"S": "k:1"}}, "UpdateExpression": "ADD #c0 :v0"}
    assert fenced_request("UpdateItem", {"body": json.dumps(body).encode()}) is None
    assert fenced_request("TransactWriteItems", {"body": b"{}"}) is None
