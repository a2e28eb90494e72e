"""The template keeps a stalled record alive: it comes back after the journal lease that held it ends.

A record whose marker names another invocation's PREPARING batch with a live lease is handed back to the
source (docs/journal.md, "Liveness"). That lease ends at most the holder's function timeout plus the
applier's ``lease_margin_ms`` after the holder started, and the holder started before the stalled
invocation. So the stalled record is settled on its next delivery if the source's delay outlasts that:

- SQS: the record comes back one visibility timeout after its receive, and the invocation starts at most
  one batching window after the receive: visibility > window + timeout + margin, for every allowed timeout;
- Kinesis: Lambda retries the record from the checkpoint until ``MaximumRetryAttempts`` or
  ``MaximumRecordAgeInSeconds``; the record age must outlast the lease for every allowed timeout and
  batching window, and the retries of a stalled record are spent until the lease ends. AWS does not
  document the retry backoff; with the model of ``src/tally_local/chaos/kinesis.py`` (1 s doubling, at most 60 s),
  the default retry count must outlast the default lease.
"""

from __future__ import annotations

from typing import Any

import pytest

from tally.commit.applier import RetryPolicy
from tally_local.template import load_template
from tests.template.test_template import TEMPLATE_PATH

MARGIN_S = RetryPolicy().lease_margin_ms // 1000


@pytest.fixture(scope="module")
def parameters() -> dict[str, Any]:
    params: dict[str, Any] = load_template(TEMPLATE_PATH)["Parameters"]
    return params


def test_the_queue_visibility_timeout_outlasts_the_lease_for_every_allowed_function_timeout() -> None:
    template = load_template(TEMPLATE_PATH)
    parameters = template["Parameters"]
    rows = template["Mappings"]["QueueVisibility"]
    max_window = parameters["BatchingWindowSeconds"]["MaxValue"]
    for seconds in parameters["FunctionTimeoutSeconds"]["AllowedValues"]:
        lease_s = int(seconds) + MARGIN_S
        assert rows[str(seconds)]["VisibilityTimeout"] > max_window + lease_s, seconds


def test_a_kinesis_record_outlives_the_lease_for_every_allowed_timeout_and_window(parameters: dict[str, Any]) -> None:
    longest_lease_s = max(int(s) for s in parameters["FunctionTimeoutSeconds"]["AllowedValues"]) + MARGIN_S
    longest_window_s = parameters["StreamBatchingWindowSeconds"]["MaxValue"]
    assert parameters["StreamMaximumRecordAgeSeconds"]["MinValue"] > longest_window_s + longest_lease_s


def test_the_default_kinesis_retries_outlast_the_default_lease_under_the_modelled_backoff(
    parameters: dict[str, Any],
) -> None:
    lease_s = int(parameters["FunctionTimeoutSeconds"]["Default"]) + MARGIN_S
    retries = int(parameters["StreamMaximumRetryAttempts"]["Default"])
    span_s = sum(min(60, 2**attempt) for attempt in range(retries))
    assert span_s > lease_s
