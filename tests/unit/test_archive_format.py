"""The archive's records (``tally.core.archive``): what a counted message becomes in S3, and back."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally.core.archive import (
    ARCHIVE_VERSION,
    ArchiveFormatError,
    archive_record,
    decode_records,
    encode_records,
    object_key,
    partition,
    partitions_between,
    record_message,
)
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.ledger import Commit
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Message, SourceRecord

AT = 1_764_633_600_000  # 2025-12-02T00:00:00Z
SOURCE = SourceRecord("rec-1", "", AT - 5, {"source": "arn:aws:sqs:us-east-1:1:q"})


def decoded(body: str) -> Message:
    message = decode_message(body, WIRE_LIMITS)
    assert isinstance(message, Message), message
    return message


BODIES = [
    '{"id": "a", "key": "k", "delta": 1}',
    '{"id": "b", "key": "k", "deltas": {"n": 1.50, "m": -3}, "ts": 1764633599000}',
    '{"id": "c", "events": [{"key": "k", "delta": 12345678901234567890123456789012345678}, {"key": "j", "delta": 1E-130}]}',
    '{"id": "d", "key": "k", "gauges": {"peak": {"max": 17}, "last": {"latest": "1.5"}, "v": {"latest": 1.5}}, "ts": 1764633599000}',
    '{"id": "e", "key": "k", "delta": 1, "distinct": {"users": "u-1"}}',
    '{"id": "f", "key": "k", "reset": {"n": 100}}',
    '{"id": "g", "key": "k", "deltas": {"n": -3}, "correction": true}',
]


@pytest.mark.parametrize("body", BODIES)
def test_a_record_gives_back_the_content_that_was_counted(body: str) -> None:
    # GIVEN a decoded message of each shape, archived under a commit
    message = decoded(body)
    commit = Commit.of_marker(AT, None)
    record = archive_record(
        message,
        commit,
        SOURCE,
        digest=content_digest(message),
        archived_ms=AT + 9,
        delivery="x",
        seq=3,
        counted_here=True,
    )
    # WHEN it is written and read back
    (back,) = decode_records(encode_records([record]))
    # THEN it is the same record, its message has the content digest that was counted, and the commit is named
    assert back == record
    assert content_digest(record_message(back)) == content_digest(message)
    assert (back.id, back.commit, back.committed_ms) == (message.message_id, f"direct-{AT}", AT)
    assert back.origin == {"source": "arn:aws:sqs:us-east-1:1:q"}


def test_numbers_are_exact_json_numbers_and_absent_fields_are_omitted() -> None:
    message = decoded(BODIES[2])
    record = archive_record(
        message, Commit("b" * 32, AT), SOURCE, digest=b"", archived_ms=AT, delivery="x", seq=0, counted_here=False
    )
    text = gzip.decompress(encode_records([record])).decode()
    assert '"deltas":{"count":12345678901234567890123456789012345678}' in text
    assert '"deltas":{"count":1E-130}' in text
    line = json.loads(text)
    assert "digest" not in line  # unknown: omitted, read back as ""
    assert line["v"] == ARCHIVE_VERSION
    assert record_message(decode_records(encode_records([record]))[0]).events[1].deltas["count"] == Decimal("1E-130")


def test_the_same_records_make_the_same_bytes() -> None:
    message = decoded(BODIES[0])
    record = archive_record(
        message, Commit.of_marker(AT, None), SOURCE, digest=b"", archived_ms=AT, delivery="x", seq=0, counted_here=True
    )
    assert encode_records([record]) == encode_records([record])


def test_a_later_format_or_a_stranger_object_is_refused() -> None:
    with pytest.raises(ArchiveFormatError, match="format 3"):
        decode_records(
            b'{"v": 3, "id": "a", "commit": "c", "committed_ms": 1, "archived_ms": 1, "delivery": "d", "seq": 0, '
            b'"counted_here": true, "record_id": "r", "received_ms": 1, "events": []}\n'
        )
    with pytest.raises(ArchiveFormatError):
        decode_records(b"\x1f\x8bnot gzip")
    with pytest.raises(ArchiveFormatError):
        decode_records(b'{"id": 1}\n')


def test_objects_are_partitioned_by_the_hour_they_were_written() -> None:
    assert partition(AT + 3_600_000 * 13 + 5) == "dt=2025-12-02/hour=13"
    key = object_key("events/", AT + 42, "0f" * 16)
    assert key == f"events/dt=2025-12-02/hour=00/{AT + 42}-{'0f' * 16}.jsonl.gz"
    assert partitions_between("events/", AT - 1, AT + 3_600_000) == [
        "events/dt=2025-12-01/hour=23/",
        "events/dt=2025-12-02/hour=00/",
        "events/dt=2025-12-02/hour=01/",
    ]


names = st.text(alphabet="abcxyz_", min_size=1, max_size=5)
numbers = st.one_of(
    st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    st.decimals(allow_nan=False, allow_infinity=False, places=None, min_value=-(10**20), max_value=10**20).map(
        lambda value: value.normalize() if value else Decimal(0)
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(names, numbers, min_size=1, max_size=3), min_size=1, max_size=4))
def test_any_counted_content_survives_the_archive(deltas: list[dict[str, object]]) -> None:
    events = ",".join(
        '{"key": "k' + str(index) + '", "deltas": {' + ", ".join(f'"{n}": {v}' for n, v in named.items()) + "}}"
        for index, named in enumerate(deltas)
    )
    parsed = decode_message('{"id": "m", "events": [' + events + "]}", WIRE_LIMITS)
    if not isinstance(parsed, Message):  # a number the decoder refuses (its range): never counted, never archived
        return
    digest = content_digest(parsed)
    commit = Commit.of_marker(AT, None)
    record = archive_record(
        parsed, commit, SOURCE, digest=digest, archived_ms=AT, delivery="d", seq=0, counted_here=True
    )
    (back,) = decode_records(encode_records([record]))
    assert content_digest(record_message(back)) == digest
    assert record_message(back) == parsed
