"""The alarm topic: CloudWatch alarms must be able to publish to it.

A topic encrypted with the AWS managed key ``alias/aws/sns`` deploys cleanly, and every notification is
dropped: that key's policy cannot grant ``cloudwatch.amazonaws.com`` the ``kms:Decrypt`` and
``kms:GenerateDataKey*`` a publish to an encrypted topic needs, and nothing local (moto, cfn-lint, checkov)
notices. So the topic gets a customer managed key of its own, created only with the topic, whose policy
grants exactly that to CloudWatch, for this account only, and leaves the account in charge of the key.
"""

from __future__ import annotations

from typing import Any

import pytest
from moto.iam.access_control import IAMPolicyStatement, PermissionResult

from tests.template.conditions import parameter_values, prune
from tests.template.test_template import _as_list

CLOUDWATCH = "cloudwatch.amazonaws.com"
ACCOUNT_ROOT = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}


def _resources(template: dict[str, Any], transformed: dict[str, Any], **values: str) -> dict[str, Any]:
    resources: dict[str, Any] = prune(transformed, parameter_values(template, **values))["Resources"]
    return resources


def _allows(statement: dict[str, Any], action: str) -> bool:
    probe = IAMPolicyStatement({"Effect": "Allow", "Action": statement["Action"], "Resource": statement["Resource"]})
    return probe.is_action_permitted(action, "*") is PermissionResult.PERMITTED


def test_the_alarm_topic_has_a_key_cloudwatch_alarms_may_use(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # GIVEN a stack that creates the alarm topic (an e-mail address, no topic of one's own)
    resources = _resources(template, transformed, AlarmEmail="ops@example.com")
    key_id = resources["AlarmTopic"]["Properties"]["KmsMasterKeyId"]
    # THEN the topic is not under an AWS managed key (whose policy nobody can change)
    assert not (isinstance(key_id, str) and key_id.startswith("alias/aws/")), key_id
    # AND its key is a customer managed key of this stack, rotated yearly
    assert set(key_id) <= {"Ref", "Fn::GetAtt"}, key_id
    logical_id = key_id.get("Ref") or key_id["Fn::GetAtt"][0]
    key = resources[logical_id]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    # AND its policy lets CloudWatch encrypt and decrypt with it, on behalf of this account only
    cloudwatch = [s for s in statements if CLOUDWATCH in _as_list(s.get("Principal", {}).get("Service", []))]
    assert cloudwatch, statements
    for statement in cloudwatch:
        assert statement["Effect"] == "Allow"
        assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
        assert not _allows(statement, "kms:ScheduleKeyDeletion")
    for action in ("kms:Decrypt", "kms:GenerateDataKey"):
        assert any(_allows(statement, action) for statement in cloudwatch), action
    # AND the account stays in charge of the key (without it, nobody could manage or delete it)
    assert any(
        s["Effect"] == "Allow" and s["Principal"] == {"AWS": ACCOUNT_ROOT} and _allows(s, "kms:PutKeyPolicy")
        for s in statements
    )
    # AND nobody else is named
    principals = [s["Principal"] for s in statements]
    assert all(p in ({"AWS": ACCOUNT_ROOT}, {"Service": CLOUDWATCH}, {"Service": [CLOUDWATCH]}) for p in principals)


@pytest.mark.parametrize(
    "values",
    [{}, {"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops", "AlarmEmail": "ops@example.com"}],
    ids=["no alarm e-mail", "a topic of one's own"],
)
def test_the_key_exists_only_with_the_topic(
    template: dict[str, Any], transformed: dict[str, Any], values: dict[str, str]
) -> None:
    # GIVEN a stack that creates no alarm topic THEN it creates no key either (a key costs monthly)
    resources = _resources(template, transformed, **values)
    assert "AlarmTopic" not in resources
    assert [r for r in resources.values() if r["Type"] == "AWS::KMS::Key"] == []


def test_with_the_topic_there_is_exactly_one_key(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    resources = _resources(template, transformed, AlarmEmail="ops@example.com")
    assert len([r for r in resources.values() if r["Type"] == "AWS::KMS::Key"]) == 1
