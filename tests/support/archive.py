"""An archive bucket on the session's moto server, and the recount of what it holds."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.archive_writer import S3ArchiveWriter
from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally_local.chaos.archive import ArchiveSite

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from tally.audit.recount import Recount
    from tally.core.archive import ArchiveRecord
    from tally.core.windows import WindowSpec

PREFIX = "events/"


@dataclass(frozen=True)
class ArchiveBucket:
    """A fresh bucket; ``writer`` is the production adapter on ``client``."""

    client: S3Client
    bucket: str

    @classmethod
    def on(cls, endpoint_url: str) -> ArchiveBucket:
        site = ArchiveSite(endpoint_url, f"tally-archive-{uuid.uuid4().hex[:12]}").create()
        return cls(site.client(), site.bucket)

    @property
    def writer(self) -> S3ArchiveWriter:
        return S3ArchiveWriter(self.client, self.bucket)

    def records(self) -> list[ArchiveRecord]:
        return list(read_archive(self.client, self.bucket, PREFIX))

    def objects(self) -> int:
        return sum(
            1
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
            for _ in page.get("Contents", [])
        )

    def recount(self, windows: WindowSpec | None = None) -> Recount:
        return recount(self.records(), windows=windows, clock_tolerance_ms=0)
