"""A deterministic refusal settles the message that caused it, never fails the batch again and again.

DynamoDB refuses a request as sent for many reasons (a number it cannot store, a size, an expression limit, a key,
two actions on one item, and rules its docs add later), worded as it pleases, and either for the whole request
(``ValidationException``) or on an action of a transaction (a ``ValidationError`` cancellation reason). Every such
answer is translated to ``WriteRejectedError`` (``tally.store.requests.translate``), and the protocol settles it:
one message's request dead-letters that message with DynamoDB's words (``write_refused``, or
``counter_out_of_range`` for a number), several messages' request is split until the culprit stands alone.
Hypothesis draws the wordings and the cancellations; the batches and the claims are in ``test_apply.py``.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError
from hypothesis import example, given
from hypothesis import strategies as st

from tally.core.ledger import Claim
from tally.errors import StoreError, WriteRejectedError
from tally.store.actions import Role
from tally.store.requests import NUMBER_RANGE, RETRYABLE_REASONS, translate

WORDINGS = st.one_of(
    st.text(max_size=80),
    st.sampled_from(
        [
            # AWS's, and DynamoDB Local's where they differ
            "1 validation error detected: Value '[...]' at 'transactItems' failed to satisfy constraint: "
            "Member must have length less than or equal to 100",
            "Member must have length less than or equal to 100",
            "Transaction request cannot include multiple operations on one item",
            "Attempting to store more than 38 significant digits in a Number",
            "ExpressionAttributeValues contains invalid value: DynamoDB only supports precision up to 38 digits for "
            "key :tl0",
            "Number overflow. Attempting to store a number with magnitude larger than supported range",
            "Item size has exceeded the maximum allowed size",
            "Invalid UpdateExpression: Expression size has exceeded the maximum allowed size",
            "Invalid ConditionExpression: The expression contains too many operators; operator count: 301",
            "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of "
            "2048 bytes",
            "Transaction payload size cannot exceed 4MB. Payload Size: 4393093",
            "",
        ]
    ),
)

ROLES = st.one_of(
    st.builds(Role, st.just("marker"), st.text(min_size=1, max_size=8)),
    st.builds(Role, st.just("add"), item=st.text(min_size=1, max_size=8)),
    st.builds(Role, st.just("batch"), st.text(min_size=1, max_size=8)),
    st.builds(Role, st.just("applied"), st.text(min_size=1, max_size=8)),
    st.builds(Role, st.just("notification"), st.text(min_size=1, max_size=8)),
    st.builds(lambda mid: Role("block", claims=(Claim(mid),)), st.text(min_size=1, max_size=8)),
)
REASON_CODES = st.one_of(
    st.sampled_from(
        [
            "None",
            "ConditionalCheckFailed",
            "ValidationError",
            "TransactionConflict",
            "ThrottlingError",
            "ProvisionedThroughputExceeded",
            "ItemCollectionSizeLimitExceeded",
        ]
    ),
    st.text(min_size=1, max_size=20),  # a code not documented yet
)


def failed(code: str, message: str, reasons: list[dict[str, Any]] | None = None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": message}}
    if reasons is not None:
        response["CancellationReasons"] = reasons
    return ClientError(response, "TransactWriteItems")  # type: ignore[arg-type]


@given(message=WORDINGS, roles=st.lists(ROLES, max_size=5))
@example(message="Member must have length less than or equal to 100", roles=[])
def test_a_request_refused_as_sent_is_a_refusal_whatever_its_wording(message: str, roles: list[Role]) -> None:
    # GIVEN DynamoDB refusing a whole request, in any words
    error = translate(failed("ValidationException", message), roles)
    # THEN it is a refusal the protocol settles (its code chosen by whether a number was refused), never a plain
    # error that fails the batch on every delivery
    assert isinstance(error, WriteRejectedError)
    assert error.number_range == (NUMBER_RANGE.search(message) is not None)
    assert error.detail == (message or "ValidationException")


@given(
    cancelled=st.lists(st.tuples(ROLES, REASON_CODES, WORDINGS), min_size=1, max_size=6),
)
def test_a_cancelled_transaction_is_always_read_into_an_outcome_the_protocol_settles(
    cancelled: list[tuple[Role, str, str]],
) -> None:
    # GIVEN a transaction cancelled with any reasons on any of its actions
    roles = [role for role, _, _ in cancelled]
    reasons = [{"Code": code, "Message": text, "Item": {}} for _, code, text in cancelled]
    error = translate(failed("TransactionCanceledException", "cancelled", reasons), roles)
    codes = {(role.kind, code) for role, code, _ in cancelled}
    refused = any(code not in {"None", "ConditionalCheckFailed", *RETRYABLE_REASONS} for _, code in codes)
    conditions = {kind for kind, code in codes if code == "ConditionalCheckFailed"}
    # THEN an action refused as sent (a validation error, or a code not understood) is a refusal, unless a condition
    # the protocol settles first failed beside it (a marker, a batch's state, an applied chunk)
    if refused and not conditions & {"marker", "block", "batch", "applied"}:
        assert isinstance(error, WriteRejectedError)
    # and a plain error (which fails the batch) only for reasons that refuse nothing: none at all, or a condition
    # tally never sets on such an action (a defect of its own, never a message's fate)
    if type(error) is StoreError:
        assert {code for _, code in codes} <= {"None", "ConditionalCheckFailed"}
