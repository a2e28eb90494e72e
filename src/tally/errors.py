"""The exception hierarchy of tally.

One base class, a few specific subclasses. Infrastructure errors (botocore's ``ClientError`` and
connection errors) are translated exactly once, in the adapter that made the call, with ``raise ... from``
so the original stays attached for logs and traces.

This module is the bottom of the package: it imports nothing of tally, so every layer can raise these.
An error that carries a richer value lives beside that value (``tally.producer.result.PublishError``
carries a ``PublishResult``; ``tally.core.plan.ConditionRefusedError`` the values a refused condition met, per
``ItemKey``; ``tally.core.ledger.MarkersExistError`` what each marker in a write's way says) and subclasses
``TallyError`` from there.
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


class BatchStateError(StoreError):
    """A journal batch was not in the state a conditional step required (e.g. it was aborted)."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id} is not in the expected state")
        self.batch_id = batch_id


class ChunkAppliedError(StoreError):
    """A journal apply chunk had already been applied (by this invocation's lost attempt or another)."""


class WriteRejectedError(StoreError):
    """DynamoDB rejected the write itself (e.g. a counter would exceed 38 significant digits).

    Retrying the same transaction can never succeed; the caller isolates the responsible message.
    """

    def __init__(self, detail: str, *, number_range: bool = True) -> None:
        super().__init__(detail)
        self.detail = detail
        self.number_range = number_range
        """True: a counter would leave the Number range; False: another per-action limit (a size)."""


class UnsettledMessagesError(TallyError):
    """The applier lost track of a message (no fate, or two): the whole batch fails and is redelivered.

    A defect, never an expected outcome: a message without a fate would otherwise be reported done and
    deleted by the source without being counted.
    """


class DeadLetterError(TallyError):
    """Poison records could not be handed to the dead-letter queue (so they must stay in the source)."""


class OperatorError(TallyError):
    """An operator tool (``tally dlq``, ``tally top``, ``tally stack``) could not read or move what it was asked to."""


class InvalidReadError(TallyError, ValueError):
    """A read asked for something tally cannot answer: a malformed key, an unknown window, bad or too wide
    bounds. The caller's mistake, never the store's (the HTTP endpoint answers it with 400)."""
