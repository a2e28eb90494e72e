"""The archive read back from S3: every object under a prefix (or the hours of a time range), as records.

What the recount (``tally.audit.recount``) is fed by the audit and by the chaos run's check. Objects are listed
with ``ListObjectsV2`` (one request per 1,000 keys) and read with one ``GetObject`` each; with ``since_ms`` /
``until_ms`` only the hour partitions between them are listed (``tally.core.archive.partitions_between``: the
hour an object was *written*, so a record repaired later than its commit is in a later hour).

For the audit (``tally audit``, ``tally events``, ``tally void``): ``written_since`` lists the objects written from
an hour on in one paginated listing (``StartAfter``: keys sort by hour, then by when written), and
``read_objects`` reads many objects at once, ``workers`` ``GetObject`` requests in flight (an audit on AWS waits on
S3's latency, tens of milliseconds a request, not on its own CPU).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.archive import OBJECT_SUFFIX, decode_records, partition, partitions_between
from tally.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from mypy_boto3_s3 import S3Client

    from tally.core.archive import ArchiveRecord


def archive_keys(
    client: S3Client, bucket: str, prefix: str, *, since_ms: int | None = None, until_ms: int | None = None
) -> Iterator[str]:
    """The keys of the archive's objects under ``prefix``, in key order (so in the order they were written)."""
    prefixes = [prefix] if since_ms is None or until_ms is None else partitions_between(prefix, since_ms, until_ms)
    paginator = client.get_paginator("list_objects_v2")
    try:
        for listed in prefixes:
            for page in paginator.paginate(Bucket=bucket, Prefix=listed):
                for entry in page.get("Contents", []):
                    if entry["Key"].endswith(OBJECT_SUFFIX):
                        yield entry["Key"]
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot list the archive s3://{bucket}/{prefix}: {exc}") from exc


def read_object(client: S3Client, bucket: str, key: str) -> list[ArchiveRecord]:
    """The records of one archive object."""
    return decode_records(object_body(client, bucket, key))


def object_body(client: S3Client, bucket: str, key: str) -> bytes:
    """One archive object as stored (gzip'd JSON lines)."""
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot read s3://{bucket}/{key}: {exc}") from exc


def read_archive(
    client: S3Client, bucket: str, prefix: str, *, since_ms: int | None = None, until_ms: int | None = None
) -> Iterator[ArchiveRecord]:
    """Every record of every archive object under ``prefix`` (or in the hours from ``since_ms`` to
    ``until_ms``), copies included: the recount drops them."""
    for key in archive_keys(client, bucket, prefix, since_ms=since_ms, until_ms=until_ms):
        yield from read_object(client, bucket, key)


READ_WORKERS: Final = 16
"""``GetObject`` requests in flight by default: S3 serves thousands a second per prefix; one request waits tens of
milliseconds."""


def written_since(client: S3Client, bucket: str, prefix: str, since_ms: int) -> Iterator[str]:
    """The keys of the archive's objects written in the hour of ``since_ms`` or later, in key order: one
    ``ListObjectsV2`` listing from that hour's partition on."""
    paginator = client.get_paginator("list_objects_v2")
    try:
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix, StartAfter=f"{prefix}{partition(since_ms)}/"):
            for entry in page.get("Contents", []):
                if entry["Key"].endswith(OBJECT_SUFFIX):
                    yield entry["Key"]
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot list the archive s3://{bucket}/{prefix}: {exc}") from exc


def read_objects(
    client: S3Client, bucket: str, keys: Iterable[str], *, workers: int = READ_WORKERS
) -> Iterator[list[ArchiveRecord]]:
    """The records of each object of ``keys``, in the order of ``keys``, ``workers`` objects read at once."""
    for body in read_bodies(client, bucket, keys, workers=workers):
        yield decode_records(body)


def read_bodies(client: S3Client, bucket: str, keys: Iterable[str], *, workers: int = READ_WORKERS) -> Iterator[bytes]:
    """Each object of ``keys`` as stored, in the order of ``keys``, ``workers`` objects read at once."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="archive-read") as pool:
        yield from pool.map(lambda key: object_body(client, bucket, key), keys)
