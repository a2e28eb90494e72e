"""What SQS bills to carry messages once: send, receive and delete requests, each 64 KB of a payload a request."""

from __future__ import annotations

from tally.cost.sqs import BILLED_CHUNK_BYTES, SqsRequests, billed_requests, carried


def test_a_request_is_billed_per_started_64_kb_of_its_payload() -> None:
    assert billed_requests(0) == 1
    assert billed_requests(BILLED_CHUNK_BYTES) == 1
    assert billed_requests(BILLED_CHUNK_BYTES + 1) == 2
    assert billed_requests(256 * 1024) == 4


def test_small_messages_travel_ten_a_request() -> None:
    # 25 messages of 100 bytes: three SendMessageBatch, three receives of up to 10, three DeleteMessageBatch
    assert carried([100] * 25) == SqsRequests(send=3, receive=3, delete=3)
    assert carried([100] * 25).total == 9


def test_large_messages_cost_a_request_per_64_kb() -> None:
    # ten 40 KB messages: a send batch holds 256 KiB (six of them, 240 KB: four chunks; then four, 160 KB: three);
    # one receive of all ten (400 KB: seven chunks); one delete
    assert carried([40 * 1024] * 10) == SqsRequests(send=4 + 3, receive=7, delete=1)
