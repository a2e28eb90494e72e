"""The content digest of a message: what its marker remembers, to tell a re-send from a reused id.

An id is the unit of idempotency, so a second message under an id is dropped as a duplicate. That is
only right if it carries the same events: two producers, or one buggy producer, may reuse an id for
different events, and dropping those silently loses them. Every marker therefore stores a digest of the
content it counted, and every duplicate is compared with it (``tally.core.ledger.content_conflict``).

**Same content** means the same decoded events, whatever the spelling of the body:

- each event's ``key``, its counters by name with their **values** (``1``, ``1.0`` and ``1.00`` are the
  same number; ``"delta": n`` is ``"deltas": {"count": n}``; counter order does not matter), and its
  ``ts`` as decoded epoch milliseconds (ISO 8601 and epoch ms naming the same millisecond are the same;
  an event without ``ts`` differs from every event with one), its gauge readings, its distinct-count
  members (set name and member), and its dimensions (name and value; ``_canonical_event``);
- a packed message's events as a multiset: the same events in another order are the same content (they
  count the same), two events merged into one are not; a single-event message and a packed message of
  that one event are the same content;
- never anything that differs between deliveries of one message: not the receive time (nor the windows
  an event without ``ts`` gets from it), not the hot-key shard (chosen at random per batch), not the
  record id, not whitespace or field order.

The digest is BLAKE2b with a 16-byte (128-bit) output over a format version and the canonical msgpack
encodings of the events, sorted (``_canonical_event``, ``_canonical``). Why 16 bytes: a producer who
*wanted* to hide a reused id could find two contents with equal 8-byte digests in about 2**32 tries (the
birthday bound), and cannot at 2**64; accidental equality is out of reach either way. The 8 bytes more
than that cost a marker a write unit only when it is within 8 bytes of 1 KB (docs/journal.md, "Marker
size"). Changing this definition makes old markers disagree with new digests of the same content: it
needs a new marker attribute (markers without a digest match anything). ``test_the_format_is_pinned``
guards it.
"""

from __future__ import annotations

from decimal import Decimal
from hashlib import blake2b
from typing import TYPE_CHECKING, Final

import msgspec

from tally.core.numbers import Number, canonical

if TYPE_CHECKING:
    from tally.core.model import CounterEvent, Message

DIGEST_BYTES: Final = 16
"""Length of a content digest (BLAKE2b output size)."""
_FORMAT: Final = b"\x01"
"""Version of the canonical encoding below, hashed first."""
_encode: Final = msgspec.msgpack.Encoder().encode
_MSGPACK_INT_MIN: Final = -(2**63)
_MSGPACK_INT_MAX: Final = 2**64 - 1

_CanonicalNumber = int | str
_CanonicalEvent = tuple[str, int | None, object]
"""Key, ts, counters (a one-entry map, or a list of pairs: see ``_canonical_event``)."""


def content_digest(message: Message) -> bytes:
    """The 16-byte digest of a decoded message's events (see the module docstring for what counts).

    Runs once per message on the handler's CPU path, so the common shapes take the shortest way: no sort
    for one event or one counter, no conversion of small ints or of decimals already in canonical form.
    Its cost on the handler's path is measured with ``python -m bench.cpu --process-time`` (docs/explanation/costs.md,
    "Measured: tally against the peers").
    """
    events = message.events
    if len(events) == 1:
        return blake2b(_FORMAT + _encode(_canonical_event(events[0])), digest_size=DIGEST_BYTES).digest()
    # Each event's encoding is one self-delimiting msgpack value: sorted and concatenated, they name the
    # multiset of events without ambiguity.
    encoded = sorted([_encode(_canonical_event(event)) for event in events])
    return blake2b(_FORMAT + b"".join(encoded), digest_size=DIGEST_BYTES).digest()


def short_digest(digest: bytes | None) -> str:
    """The first 6 bytes in hex, for dead-letter details and logs (``"none"`` for an unknown digest)."""
    return digest[:6].hex() if digest else "none"


def _canonical_event(event: CounterEvent) -> _CanonicalEvent | tuple[object, ...]:
    """``_counters_event``, with a fourth element, the gauge readings, for an event that carries any.

    An event without gauges encodes exactly as before gauges existed, so markers written then still match.
    Gauges are ``(name, kind, is_text, value)`` sorted by name, numbers canonical like deltas (a string
    ``"1.5"`` and the number 1.5 differ: ``is_text``).
    """
    base = _counters_event(event)
    if event.reset is not None or event.correction:
        return (*base, _operator_part(event))
    if event.dims:
        # Dimensions: a sixth element, the (name, value) pairs sorted, after the readings and the members (empty
        # lists when there are none): an event without dims encodes as before, and the shapes never meet.
        return (*base, _readings(event), sorted((event.distinct or {}).items()), sorted(event.dims.items()))
    if not event.gauges and not event.distinct:
        return base
    readings = _readings(event)
    if not event.distinct:
        return (*base, readings)
    # Distinct members: a fifth element, the (set, member) pairs sorted, after the
    # readings (an empty list when there are none: a 4-tuple always has readings, so the shapes never meet).
    return (*base, readings, sorted(event.distinct.items()))


def _readings(event: CounterEvent) -> list[tuple[str, str, bool, object]]:
    return sorted(
        (name, str(gauge.kind), True, gauge.value)
        if isinstance(gauge.value, str)
        else (name, str(gauge.kind), False, _canonical(gauge.value))
        for name, gauge in (event.gauges or {}).items()
    )


def _operator_part(event: CounterEvent) -> object:
    """A reset's or correction's fourth element: a map, where gauges are a list, so the two never meet.

    A reset to 100 and a delta of 100 are different content, and so are a correction and the same delta
    sent as an ordinary event (only one of them records a correction).
    """
    part: dict[str, object] = (
        {"reset": sorted((name, _canonical(value)) for name, value in event.reset.items())}
        if event.reset is not None
        else {"correction": True}
    )
    if event.dims:  # the item a reset sets, the views a correction counts in: content, like the key
        part["dims"] = sorted(event.dims.items())
    return part


def canonical_number(value: Number) -> _CanonicalNumber:
    """One representation per numeric value (``1``, ``1.0``, ``1E+0`` are one): see ``_canonical``."""
    return _canonical(value)


def _counters_event(event: CounterEvent) -> _CanonicalEvent:
    """``(key, ts or None, counters)``: msgpack's nil for no ``ts``; one counter as a map of one entry,
    several as a list of ``(counter, value)`` pairs in counter order.

    The common case only checks: small ints, and Decimals whose text is canonical already (msgpack then
    writes that very text), go to the encoder as they are.
    """
    deltas = event.deltas
    if len(deltas) == 1:  # one counter: a msgpack map of one entry, built only if its value needs it
        for name, value in deltas.items():
            if type(value) is int and _MSGPACK_INT_MIN <= value <= _MSGPACK_INT_MAX:
                return (event.key, event.ts_ms, deltas)
            return (event.key, event.ts_ms, {name: _canonical(value)})
    items = sorted(deltas.items())  # names are unique: two values are never compared
    for _, value in items:
        if type(value) is int:
            if _MSGPACK_INT_MIN <= value <= _MSGPACK_INT_MAX:
                continue
        else:
            text = str(value)
            if "E" not in text and "." in text and text[-1] != "0":
                continue
        return (event.key, event.ts_ms, [(name, _canonical(value)) for name, value in items])
    return (event.key, event.ts_ms, items)


def _canonical(value: Number) -> _CanonicalNumber:
    """One representation per value, whatever its spelling (``1``, ``1.0``, ``1E+0`` are one value).

    Integral values are msgpack integers, or their decimal digits as text beyond msgpack's 64 bits; other
    values are the text of the Decimal without trailing zeros, which always holds a ``.`` or an ``E``:
    the three forms never meet. (msgpack writes a Decimal as its text, so a Decimal already in that form
    may be passed as it is.)
    """
    if type(value) is not int:
        text = str(value)
        if "E" not in text and "." in text and text[-1] != "0":
            return text  # a plain fraction without trailing zeros: the decoder's usual, canonical already
        reduced = canonical(value)
        exponent = Decimal(reduced).as_tuple().exponent
        assert isinstance(exponent, int)  # decoded deltas are finite
        if exponent < 0:
            return str(reduced)
        value = int(reduced)
    return value if _MSGPACK_INT_MIN <= value <= _MSGPACK_INT_MAX else str(value)
