"""The archive adapter: one ``PutObject`` per archive object, S3's answers translated once, here.

``put`` replaces whatever the key holds (a retry of the same object writes the same bytes). What may succeed
later raises ``RetryableStoreError``: throttling (``SlowDown``, 503), S3's own errors (5xx), a timeout, a lost
connection or answer (the object may or may not be there: writing it again is harmless). Anything else S3
refuses (``AccessDenied``, ``NoSuchBucket``, a KMS key it may not use) raises ``StoreError``: retrying cannot
help, and the step dead-letters the messages as ``archive_refused`` rather than fail their batch forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.archive import CONTENT_TYPE
from tally.errors import RetryableStoreError, StoreError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_RETRYABLE_CODES: Final = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed", "ExpiredToken"}
)
"""Codes that say "not now" (ExpiredToken: a container's credentials are renewed; RequestTimeTooSkewed: a
clock that NTP corrects)."""


class S3ArchiveWriter:
    """Writes archive objects to ``bucket`` (the template's ``ArchiveBucket``)."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    def put(self, key: str, body: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=CONTENT_TYPE)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            detail = f"{code}: {error.get('Message', '')}"
            if code in _RETRYABLE_CODES or status >= 500 or status == 429:
                raise RetryableStoreError(detail) from exc
            raise StoreError(detail) from exc
        except BotoCoreError as exc:  # no answer: the object may have been written; writing it again is harmless
            raise RetryableStoreError(f"outcome unknown: {exc}") from exc
