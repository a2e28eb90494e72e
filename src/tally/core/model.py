"""Values that flow through the core: decoded events and messages, and the reasons records are refused.

The values made once per record, message or event (``SourceRecord``, ``Message``, ``CounterEvent``) are
frozen ``msgspec.Struct`` rather than frozen dataclasses: the same value semantics (immutable, typed,
compared field by field), built in C. Measured on this project's 2-vCPU machine: 114 ns per
construction against 897 ns for a frozen, slotted dataclass, which made construction alone several
microseconds of each single-event message's handler CPU (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.numbers import Number


class RejectCode(StrEnum):
    """Stable machine-readable reasons a record is sent to the dead-letter queue
    (documented in docs/reference/event-format.md)."""

    MALFORMED_JSON = "malformed_json"
    LONE_SURROGATE = "lone_surrogate"
    INVALID_FIELD = "invalid_field"
    MISSING_ID = "missing_id"
    ID_TOO_LONG = "id_too_long"
    MISSING_KEY = "missing_key"
    KEY_TOO_LONG = "key_too_long"
    INVALID_KEY = "invalid_key"
    INVALID_COUNTER_NAME = "invalid_counter_name"
    MISSING_DELTA = "missing_delta"
    AMBIGUOUS_SHAPE = "ambiguous_shape"
    INVALID_NUMBER = "invalid_number"
    NUMBER_OUT_OF_RANGE = "number_out_of_range"
    INVALID_TS = "invalid_ts"
    EMPTY_MESSAGE = "empty_message"
    TOO_MANY_EVENTS = "too_many_events"
    TOO_MANY_COUNTERS = "too_many_counters"
    TOO_MANY_KEYS = "too_many_keys"
    TOO_OLD = "too_old"
    TS_IN_FUTURE = "ts_in_future"
    COUNTER_OUT_OF_RANGE = "counter_out_of_range"
    WRITE_REFUSED = "write_refused"
    ID_CONFLICT = "id_conflict"
    INVALID_GAUGE = "invalid_gauge"
    BELOW_FLOOR = "below_floor"
    ABOVE_CEILING = "above_ceiling"
    INVALID_RESET = "invalid_reset"
    INVALID_DISTINCT = "invalid_distinct"
    INVALID_DIMENSION = "invalid_dimension"
    TOO_MANY_DIMENSIONS = "too_many_dimensions"
    UNKNOWN_DIMENSION = "unknown_dimension"
    MISSING_DIMENSION = "missing_dimension"
    GAUGE_REFUSED = "gauge_refused"
    """Counted, but DynamoDB refuses its gauge write for good (e.g. the key's item is at the 400 KB limit)."""
    MEMBERS_REFUSED = "members_refused"
    """Counted, but DynamoDB refuses its distinct members' write for good (e.g. the key's item at 400 KB)."""
    ARCHIVE_REFUSED = "archive_refused"
    """Counted, but S3 refuses its archive write for good (access denied, no such bucket): not archived."""


COUNTED_REFUSALS = frozenset({RejectCode.GAUGE_REFUSED, RejectCode.MEMBERS_REFUSED, RejectCode.ARCHIVE_REFUSED})
"""Codes of letters whose counters count by definition (a post-commit step refused the rest): a redrive is what
writes that rest once its cause is gone, so a redrive never skips them as already counted."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record can never be counted: a stable code and a human-readable detail."""

    code: RejectCode
    detail: str


@dataclass(frozen=True, slots=True)
class IdConflict(Rejection):
    """An ``id_conflict``: the id already counts other content, whose digest ``counted`` is (if known).

    The pipeline needs ``counted`` to judge the other copies of the id in the same batch: a copy equal to
    what counts is a duplicate, any other is a conflict too.
    """

    counted: bytes | None = None


class GaugeKind(StrEnum):
    """How a gauge keeps one value out of many readings."""

    MAX = "max"
    MIN = "min"
    LATEST = "latest"
    """The reading of the latest event (by ``ts``, ties broken by ``tally.core.gauges.latest_order``)."""


class Gauge(msgspec.Struct, frozen=True, gc=False):
    """One gauge reading of an event: a number for ``max``/``min``, a number or a string for ``latest``."""

    kind: GaugeKind
    value: Number | str


class CounterEvent(msgspec.Struct, frozen=True, gc=False):
    """One validated event: deltas for named counters of one key, and gauge readings.

    ``deltas`` may be empty when the event carries gauges only; ``gauges`` is None when it carries none
    (the common case costs no map).
    """

    key: str
    deltas: Mapping[str, Number]
    ts_ms: int | None = None
    gauges: Mapping[str, Gauge] | None = None
    distinct: Mapping[str, str] | None = None
    """Distinct-count set name -> the member this event names; None when it names none."""
    reset: Mapping[str, Number] | None = None
    """An operator's reset: counter -> the value its all-time total is set to. A reset
    event carries no deltas; None for every other event."""
    correction: bool = False
    """An operator's correction: its deltas count like any event's, and the key's all-time item records it."""
    dims: Mapping[str, str] | None = None
    """Dimension name -> value: the event counts once more in each view its key declares
    (``tally.core.views``); a reset's name the one view item it sets. None when it carries none."""


class Message(msgspec.Struct, frozen=True, gc=False):
    """One validated message: the unit of idempotency, whether it carries one event or many."""

    message_id: str
    events: tuple[CounterEvent, ...]


class SourceRecord(msgspec.Struct, frozen=True, gc=False):
    """One record as the source delivered it, before decoding: the start of the one-way data flow."""

    record_id: str
    """What the source's partial-failure report names (an SQS messageId, a Kinesis sequence number)."""
    body: str | bytes
    received_ms: int
    """When the source accepted the record (SQS ``SentTimestamp``, Kinesis arrival time), epoch ms."""
    origin: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Where it came from (source ARN, FIFO message group): copied onto its dead letter, if any."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that can never be counted, with the reason it goes to the dead-letter queue."""

    record: SourceRecord
    rejection: Rejection
