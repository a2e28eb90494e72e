"""Every size limit tally works within, declared once: the wire format's and AWS's.

The wire limits are one contract between two parties: the producer library refuses a message the consumer
would dead-letter (``tally.producer``), and the decoder dead-letters what breaks them (``tally.core.decode``);
both read ``WIRE_LIMITS``, so they cannot disagree. The AWS limits are the services' published quotas that
the planner, the store and the producers cut their requests by; a module that needs one imports it from here
rather than writing the number again.

Plain constants only: this module imports nothing, so any layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# ---------------------------------------------------------------------------------------------- wire format


@dataclass(frozen=True, slots=True)
class WireLimits:
    """What one message may hold. The defaults are what the deployed consumer accepts; tests shrink them."""

    max_id_bytes: int = 1024
    """A message id's UTF-8 length: its marker id must fit DynamoDB's 2,048-byte partition key with a prefix."""
    max_key_bytes: int = 2000
    """A counter key's UTF-8 length: DynamoDB's 2,048-byte partition key less room for shard suffixes."""
    max_counter_name_bytes: int = 255
    max_counters_per_event: int = 100
    max_events_per_message: int = 10_000


WIRE_LIMITS: Final = WireLimits()
MAX_OPERATOR_COUNTERS: Final = 20
"""The most counters one reset or correction names."""
MAX_MEMBER_BYTES: Final = 512
"""The longest distinct-count member (UTF-8): a member item's sort key holds it whole."""
MAX_GAUGE_TEXT_BYTES: Final = 1024
"""The longest string a ``latest`` gauge may hold (UTF-8)."""
MAX_DIMENSIONS: Final = 8
"""The most dimensions one event carries (``dims``), and one view declaration names for a key pattern."""
MAX_DIMENSION_NAME_CHARS: Final = 64
"""A dimension's name: 1 to 64 ASCII letters, digits, ``_`` and ``-`` (``tally.core.views``)."""
MAX_DIMENSION_VALUE_BYTES: Final = 256
"""A dimension's value (UTF-8): a view item's sort key holds its window id and up to ``MAX_VIEW_DIMENSIONS`` values
whole, within DynamoDB's 1,024 bytes."""
MAX_VIEW_DIMENSIONS: Final = 3
"""The most dimensions one view groups by."""
MAX_VIEWS: Final = 8
"""The most views one key pattern declares: each is one more counter item per event."""
VIEW_PARTITION_ROOM: Final = 8
"""What a view item's partition key holds besides its key and its view's name (separators, a shard number): an
event's key plus the longest view name its key declares must fit ``PARTITION_KEY_MAX_BYTES`` with it."""
MAX_TS_MS: Final = 253_402_300_799_999
"""The latest event time or read time accepted: 9999-12-31T23:59:59.999Z."""

# ------------------------------------------------------------------------------------------------ DynamoDB
TRANSACT_MAX_ACTIONS: Final = 100
"""Actions in one ``TransactWriteItems`` (no two on one item)."""
BATCH_GET_MAX_KEYS: Final = 100
"""Keys one ``BatchGetItem`` may ask for."""
BATCH_WRITE_MAX_ITEMS: Final = 25
"""Requests in one ``BatchWriteItem``."""
UPDATE_EXPRESSION_MAX_BYTES: Final = 4096
"""The length of one update expression."""
PARTITION_KEY_MAX_BYTES: Final = 2048
ITEM_MAX_BYTES: Final = 400 * 1024

# ------------------------------------------------------------------------------------------- SQS and Kinesis
SQS_BATCH_MAX_ENTRIES: Final = 10
"""Entries in one ``SendMessageBatch`` or ``DeleteMessageBatch``."""
SQS_BATCH_MAX_BYTES: Final = 256 * 1024
"""Payload of one ``SendMessageBatch`` (and a message's size at the queue's default maximum)."""
KINESIS_PUT_MAX_RECORDS: Final = 500
KINESIS_PUT_MAX_BYTES: Final = 5 * 1024 * 1024
KINESIS_RECORD_MAX_BYTES: Final = 1024 * 1024
KINESIS_PARTITION_KEY_MAX_CHARS: Final = 256

# ------------------------------------------------------------------------------------------------- Lambda
LAMBDA_PAYLOAD_MAX_BYTES: Final = 6 * 1024 * 1024
"""A synchronous invocation's payload: an event source mapping never delivers a bigger event (a batch is cut
to fit it)."""
