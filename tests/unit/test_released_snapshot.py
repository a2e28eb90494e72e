"""The released code's snapshot (``tests/support/released-src.tar.xz``) is that commit's ``src/tally``, file for file.

The rollout tests run the released handler from git's history, or from the snapshot in a clone without it; this
keeps the two the same wherever the history is there (every full clone, CI's included).
"""

from __future__ import annotations

import lzma
import tarfile
from io import BytesIO

import pytest

from tests.support.released import RELEASED_COMMIT, SNAPSHOT, released_archive_from_git


def _files(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        return {
            member.name: extracted.read()
            for member in tar.getmembers()
            if member.isfile() and (extracted := tar.extractfile(member)) is not None
        }


def test_the_snapshot_holds_the_released_commits_source_file_for_file() -> None:
    from_git = released_archive_from_git()
    if from_git is None:
        pytest.skip(f"this clone lacks {RELEASED_COMMIT[:7]} (a shallow clone): the snapshot is what the tests use")
    snapshot = _files(lzma.decompress(SNAPSHOT.read_bytes()))
    released = _files(from_git)
    assert "src/tally/handlers/sqs.py" in released
    assert snapshot == released
