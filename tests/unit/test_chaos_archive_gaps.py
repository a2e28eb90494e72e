"""The chaos run's archive verdict names its messages (``tally_local.chaos.archive.archive_gaps``): each counted
message the archive misses, or holds with other content or under another commit than its marker's."""

from __future__ import annotations

from tally.core.archive import ArchiveRecord, archive_record
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.ledger import Commit, MarkerRecord
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Message, SourceRecord
from tally_local.chaos.archive import archive_gaps

T0 = 1_764_633_600_000


def message(body: str) -> Message:
    decoded = decode_message(body, WIRE_LIMITS)
    assert isinstance(decoded, Message), decoded
    return decoded


def record(body: str, commit: Commit) -> ArchiveRecord:
    counted = message(body)
    return archive_record(
        counted,
        commit,
        SourceRecord("r", body, T0),
        digest=content_digest(counted),
        archived_ms=T0 + 5,
        delivery="d1",
        seq=0,
        counted_here=False,
    )


A = '{"id":"m1","key":"k","delta":1}'
B = '{"id":"m1","key":"k","delta":9}'


def test_each_counted_message_the_archive_does_not_hold_as_counted_is_named_with_its_history() -> None:
    direct = Commit(f"direct-{T0}", T0)
    markers = {
        "m1": MarkerRecord("m1", T0, 0, None, content_digest(message(A))),
        "m2": MarkerRecord("m2", T0, 0, None, content_digest(message('{"id":"m2","key":"k","delta":1}'))),
        "m3": MarkerRecord("m3", T0, 0, None, content_digest(message('{"id":"m3","key":"k","delta":1}'))),
        "m4": MarkerRecord("m4", T0, 0, None, content_digest(message('{"id":"m4","key":"k","delta":1}'))),
    }
    records = [
        record(B, direct),  # m1: its other content under its commit
        record('{"id":"m3","key":"k","delta":1}', Commit(f"direct-{T0 + 1}", T0 + 1)),  # m3: another commit only
        record('{"id":"m4","key":"k","delta":1}', direct),  # m4: as counted
    ]
    gaps = archive_gaps(records, ["m1", "m2", "m3", "m4", "m5"], markers.get, lambda mid: (f"{mid} delivered",))
    assert [(gap.message_id, gap.problem) for gap in gaps] == [
        ("m1", "other content"),
        ("m2", "not archived"),
        ("m3", "another commit"),
    ]
    assert gaps[1].describe().startswith("m2: not archived (marker direct-")
    assert gaps[1].describe().endswith("history: m2 delivered")
