"""What a failed chaos run says about a wrong counter: the messages behind it, their markers and their trails.

A run whose counter is wrong names the counter (``Verdict.examples``), and the next question is always the same:
which messages touch that key, how was each delivered and settled, and what do their markers and batches say now?
A wrong count under load may come once in fifty runs; the run that shows it should carry that answer, so it is read
here, once the run is over and only when a counter is wrong: the markers (one ``BatchGetItem``), the headers of
the batches they name (one ``GetItem`` each, strongly consistent) and each message's trail
(``tally_local.chaos.ledger.MessageTrail``), as lines for the assertion or the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from tally.core.items import make_item
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.schema import FENCE_PREFIX, WINDOW_MOVES, fence_from_item, item_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.chaos.ledger import MessageTrail
    from tally_local.chaos.wiring import Tables
    from tally_local.chaos.workload import Workload

KEYS_EXPLAINED: Final = 2
"""Wrong counters explained per run: one usually shows the pattern, a second tells one key's accident from a rule."""
MESSAGES_PER_KEY: Final = 6
"""Messages explained per key (a hot key has hundreds; the trail of each is several lines)."""
TRAIL_LINES: Final = 12
"""Trail lines shown per message (a message handed back for hours has dozens)."""


def explain_wrong_counters(
    workload: Workload,
    keys: Sequence[str],
    trail: MessageTrail,
    *,
    client: Callable[[], DynamoDBClient],
    tables: Tables,
    marker_ttl_seconds: int,
) -> tuple[str, ...]:
    """For the first ``KEYS_EXPLAINED`` of ``keys`` (none: nothing read, no client made): each valid message touching
    the key (bodies with the most events first), with its marker as it stands, the state of the batch the marker
    names, and its trail."""
    chosen = list(keys[:KEYS_EXPLAINED])
    if not chosen:
        return ()
    touching = {
        key: sorted(
            (message for message in workload.by_body.values() if key in message.sums),
            key=lambda message: (-message.events, message.message_id),
        )
        for key in chosen
    }
    ids = sorted({message.message_id for messages in touching.values() for message in messages[:MESSAGES_PER_KEY]})
    reads = client()
    markers = DynamoDBCounterStore(reads, tables.counters, tables.markers, marker_ttl_seconds).read_markers(ids)
    journal = DynamoDBJournal(reads, tables.counters, tables.markers, marker_ttl_seconds)
    headers: dict[str, str] = {}

    def header(batch_id: str) -> str:
        if batch_id not in headers:
            record = journal.read(batch_id)
            headers[batch_id] = "no header" if record is None else f"{record.state.value}, {record.chunks} chunks"
        return headers[batch_id]

    lines: list[str] = []
    for key, messages in touching.items():
        stored = reads.get_item(TableName=tables.counters, Key=item_key(make_item(key)), ConsistentRead=True)
        lines.append(f"{key}: {_fence_of(stored.get('Item', {}))}")
        lines.append(f"  {len(messages)} message bodies touch it; the {MESSAGES_PER_KEY} biggest at most:")
        for message in messages[:MESSAGES_PER_KEY]:
            marker = markers.get(message.message_id)
            if marker is None:
                stands = "no marker"
            elif marker.batch_id is None:
                stands = f"direct marker, applied at {marker.applied_at_ms}"
            else:
                batch = marker.batch_id
                stands = f"marker of batch {batch} ({header(batch)}), claimed at {marker.applied_at_ms}"
            deltas = ", ".join(f"{name} {value}" for name, value in sorted(message.sums[key].items()))
            lines.append(f"  {message.message_id} ({message.events} events; here {deltas}): {stands}")
            lines.extend(f"      {line}" for line in _trail_of(trail, message.body))
    return tuple(lines)


def _fence_of(item: Mapping[str, Any]) -> str:
    """What a key's item says of who wrote it: the writer epochs' marks (the fenced batches applied to it, as
    ``seq * 1024 + part``) and the window moves it has had."""
    marks = ", ".join(f"{FENCE_PREFIX}{epoch} = {mark}" for epoch, mark in sorted(fence_from_item(item).items()))
    moves = item.get(WINDOW_MOVES, {}).get("N", "0")
    return f"item marks {{{marks}}}, {moves} window moves" if item else "no item"


def _trail_of(trail: MessageTrail, body: str) -> tuple[str, ...]:
    """The body's trail; a long one (a message held for hours) as its first and last lines."""
    lines = trail.of(body) or ("no trail: never delivered",)
    if len(lines) <= TRAIL_LINES:
        return lines
    head, tail = TRAIL_LINES // 3, TRAIL_LINES - TRAIL_LINES // 3 - 1
    return (*lines[:head], f"... {len(lines) - head - tail} lines ...", *lines[-tail:])
