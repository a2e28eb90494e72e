"""tally's clients skip botocore's parameter validation (``tally.client_config``); the test session validates every
call in its place (``tally_local.kit.calls``), so a request tally encodes wrongly still fails where it is made."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ParamValidationError

from tally.client_config import CLIENT_CONFIG

# Nothing listens here: a request that got past validation would fail to connect instead.
NOWHERE = "http://127.0.0.1:9"


def _client() -> object:
    return boto3.client(
        "dynamodb",
        config=CLIENT_CONFIG,
        endpoint_url=NOWHERE,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_tallys_clients_leave_validation_to_dynamodb() -> None:
    assert CLIENT_CONFIG.parameter_validation is False


@pytest.mark.parametrize(
    "key",
    [
        {"pk": {"S": 42}},  # a number where DynamoDB's wire format wants its text
        {"pk": "a"},  # a bare value where DynamoDB's wire format wants a typed AttributeValue
    ],
)
def test_the_session_still_refuses_a_request_botocore_would(key: dict[str, object]) -> None:
    client = _client()
    with pytest.raises(ParamValidationError):
        client.get_item(TableName="markers", Key=key)  # type: ignore[attr-defined]
