"""The exception hierarchy of tally.

One base class, a few specific subclasses. Infrastructure errors (botocore's ``ClientError`` and
connection errors) are translated exactly once, in the adapter that made the call, with ``raise ... from``
so the original stays attached for logs and traces.
"""

from __future__ import annotations


class TallyError(Exception):
    """Base class of every error tally raises on purpose."""


class ConfigurationError(TallyError):
    """A required setting is missing or malformed (raised at cold start, never per batch)."""


class StoreError(TallyError):
    """The counter store failed in a way the caller cannot fix by retrying."""


class RetryableStoreError(StoreError):
    """Throttling, a transaction conflict or a lost response: the same write may be tried again.

    Retrying is always safe because every transaction carries conditional idempotency markers: if an
    earlier attempt did commit (the response was lost), the retry is cancelled by those markers instead
    of applying the deltas twice.
    """


class MarkersExistError(StoreError):
    """The transaction was cancelled because some messages were already applied (their markers exist)."""

    def __init__(self, message_ids: frozenset[str]) -> None:
        super().__init__(f"{len(message_ids)} message(s) already applied")
        self.message_ids = message_ids


class WriteRejectedError(StoreError):
    """DynamoDB rejected the write itself (e.g. a counter would exceed 38 significant digits).

    Retrying the same transaction can never succeed; the caller isolates the responsible message.
    """

    def __init__(self, detail: str, keys: frozenset[str]) -> None:
        super().__init__(detail)
        self.detail = detail
        self.keys = keys


class DeadLetterError(TallyError):
    """Poison records could not be handed to the dead-letter queue (so they must stay in the source)."""
