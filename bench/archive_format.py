"""The archive's format, chosen by measurement: size, the writer's CPU, the reader's speed, the package it needs.

``python -m bench archive-format`` builds the archive records of a U stream (1,000 Zipf keys, numbered ids as
the producer library makes them, two counters) as the archive step builds them (``tally.core.archive``), one
object per batch of ``--batch`` records, and writes every object in each candidate format:

- JSON lines, gzip at levels 1, 6 and 9 (the standard library: nothing added to the Lambda package);
- JSON lines, zstd level 3 (``zstandard``, if installed);
- Parquet, zstd (``pyarrow``, if installed), the same nested schema (``events`` a list of structs with maps).

For each it reports bytes per million events (what S3 stores and Athena scans), the CPU to encode one batch's
object (best of ``--repeats``, ``time.process_time``: the Lambda's share), the CPU to read every object back
into records per million events, and, for the libraries, their installed size and import time (what they would
add to the package and to a cold start). Then it times the recount (``tally.audit.recount``) of
``--recount-events`` archived events read back from the chosen format, against the 60 s target of
``tally audit`` for one million.

The optional candidates need ``pip install pyarrow zstandard`` (not in the project's dependencies: they are
what is being judged).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.workloads import u_stream
from tally.audit.recount import gc_paused, recount
from tally.core.archive import archive_record, decode_records, encode_records
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.ledger import Commit
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Message, SourceRecord
from tally.core.windows import parse_window_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally.core.archive import ArchiveRecord

ARN = "arn:aws:sqs:us-east-1:123456789012:tally-events"
T0 = 1_764_633_600_000


def archived_batches(events: int, batch: int, *, packed: bool) -> list[list[ArchiveRecord]]:
    """The records the archive step writes for a U stream of ``events`` events, one list per batch."""
    stream = u_stream(events, packed=packed, numbered=True)
    batches: list[list[ArchiveRecord]] = []
    for number, deliveries in enumerate(stream.batches(batch)):
        now = T0 + number * 1_000
        delivery = uuid.UUID(int=number).hex
        records: list[ArchiveRecord] = []
        for seq, item in enumerate(deliveries):
            message = decode_message(item.body, WIRE_LIMITS)
            assert isinstance(message, Message)
            source = SourceRecord(item.record_id, item.body, now - 20, {"source": ARN})
            records.append(
                archive_record(
                    message,
                    Commit.of_marker(now, None),
                    source,
                    digest=content_digest(message),
                    archived_ms=now + 30,
                    delivery=delivery,
                    seq=seq,
                    counted_here=True,
                )
            )
        batches.append(records)
    return batches


@dataclass(frozen=True)
class Format:
    name: str
    encode: Callable[[Sequence[ArchiveRecord]], bytes]
    decode: Callable[[bytes], Any]
    library: str | None = None
    """The module it needs in the Lambda package (None: the standard library)."""


def _jsonl_gzip(level: int) -> Format:
    def encode(records: Sequence[ArchiveRecord]) -> bytes:
        return gzip.compress(gzip.decompress(encode_records(records)), compresslevel=level, mtime=0)

    return Format(f"JSON lines + gzip {level}", encode, decode_records)


def _jsonl_zstd() -> Format | None:
    if importlib.util.find_spec("zstandard") is None:
        return None
    import zstandard  # noqa: PLC0415 - optional: only when installed

    compressor, decompressor = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()

    def encode(records: Sequence[ArchiveRecord]) -> bytes:
        return bytes(compressor.compress(gzip.decompress(encode_records(records))))

    def decode(body: bytes) -> list[ArchiveRecord]:
        return decode_records(decompressor.decompress(body))

    return Format("JSON lines + zstd 3", encode, decode, "zstandard")


def _parquet() -> Format | None:
    if importlib.util.find_spec("pyarrow") is None:
        return None
    import msgspec  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415 - optional: only when installed
    import pyarrow.parquet as pq  # noqa: PLC0415

    text_map = pa.map_(pa.string(), pa.string())
    gauge = pa.struct([("kind", pa.string()), ("value", pa.string()), ("text", pa.bool_())])
    event = pa.struct(
        [
            ("key", pa.string()),
            ("deltas", text_map),
            ("ts", pa.int64()),
            ("gauges", pa.map_(pa.string(), gauge)),
            ("distinct", text_map),
            ("reset", text_map),
            ("correction", pa.bool_()),
        ]
    )
    schema = pa.schema(
        [
            ("v", pa.int32()),
            ("id", pa.string()),
            ("commit", pa.string()),
            ("committed_ms", pa.int64()),
            ("archived_ms", pa.int64()),
            ("delivery", pa.string()),
            ("seq", pa.int32()),
            ("counted_here", pa.bool_()),
            ("record_id", pa.string()),
            ("received_ms", pa.int64()),
            ("events", pa.list_(event)),
            ("digest", pa.string()),
            ("origin", text_map),
        ]
    )

    def encode(records: Sequence[ArchiveRecord]) -> bytes:
        rows = msgspec.to_builtins(list(records))
        for row in rows:  # maps as pyarrow takes them: lists of pairs; numbers as their exact text
            row["origin"] = list(row.get("origin", {}).items())
            for item in row["events"]:
                item["deltas"] = [(name, str(value)) for name, value in item.get("deltas", {}).items()]
        table = pa.Table.from_pylist(rows, schema=schema)
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        return sink.getvalue()

    def decode(body: bytes) -> list[dict[str, Any]]:
        return pq.read_table(io.BytesIO(body)).to_pylist()  # type: ignore[no-any-return]

    return Format("Parquet + zstd", encode, decode, "pyarrow")


@dataclass(frozen=True)
class Measured:
    name: str
    bytes_per_million: float
    encode_ms_per_batch: float
    decode_s_per_million: float
    library: str | None


def measure(fmt: Format, batches: Sequence[Sequence[ArchiveRecord]], events: int, repeats: int) -> Measured:
    bodies = [fmt.encode(batch) for batch in batches]
    size = sum(len(body) for body in bodies)
    encode_best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for batch in batches:
            fmt.encode(batch)
        encode_best = min(encode_best, (time.process_time() - started) / len(batches))
    decode_best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for body in bodies:
            fmt.decode(body)
        decode_best = min(decode_best, time.process_time() - started)
    scale = 1_000_000 / events
    return Measured(fmt.name, size * scale, encode_best * 1000, decode_best * scale, fmt.library)


def library_cost(module: str) -> tuple[float, float]:
    """(installed MB, import seconds in a fresh interpreter, best of 3) of ``module``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.submodule_search_locations is not None
    root = Path(next(iter(spec.submodule_search_locations)))
    size = sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
    statement = "import pyarrow.parquet" if module == "pyarrow" else f"import {module}"
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True)
        best = min(best, time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return size / 1e6, best - (time.perf_counter() - started)


@dataclass(frozen=True)
class RecountTime:
    read_s: float
    read_cpu_s: float
    recount_s: float
    recount_cpu_s: float
    messages: int


def time_recount(events: int, batch: int) -> RecountTime:
    """Wall and CPU seconds to read back and to recount ``events`` single-event messages, the collector paused
    for both (``gc_paused``), with the template's default windows (hour, day)."""
    bodies = [encode_records(records) for records in archived_batches(events, batch, packed=False)]
    with gc_paused():
        started, cpu = time.perf_counter(), time.process_time()
        records = [record for body in bodies for record in decode_records(body)]
        read_s, read_cpu_s = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        result = recount(records, windows=parse_window_spec("hour,day"))
        recount_s, recount_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return RecountTime(read_s, read_cpu_s, recount_s, recount_cpu_s, result.messages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench archive-format", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per shape (default 20,000)")
    parser.add_argument("--batch", type=int, default=100, help="records per object (default 100)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recount-events", type=int, default=1_000_000, help="0 skips the recount timing")
    args = parser.parse_args(argv)
    formats = [f for f in (_jsonl_gzip(1), _jsonl_gzip(6), _jsonl_gzip(9), _jsonl_zstd(), _parquet()) if f]
    print(
        f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {args.events} events per shape, {args.batch} per object"
    )
    for packed in (False, True):
        batches = archived_batches(args.events, args.batch, packed=packed)
        events = sum(len(r.events) for records in batches for r in records)
        raw = sum(len(gzip.decompress(encode_records(records))) for records in batches) * 1_000_000 / events
        shape = "packed (100 events/message)" if packed else "single-event messages"
        print(f"\n{shape}: {len(batches)} objects, uncompressed {raw / 1e6:.1f} MB per million events")
        print("| format | MB per million events | encode CPU ms per object | read CPU s per million events |")
        print("| --- | ---: | ---: | ---: |")
        for fmt in formats:
            m = measure(fmt, batches, events, args.repeats)
            print(
                f"| {m.name} | {m.bytes_per_million / 1e6:.2f} | {m.encode_ms_per_batch:.2f} "
                f"| {m.decode_s_per_million:.2f} |"
            )
    libraries = sorted({f.library for f in formats if f.library})
    if libraries:
        print("\n| library | installed MB | import s (fresh interpreter, best of 3) |\n| --- | ---: | ---: |")
        for library in libraries:
            megabytes, seconds = library_cost(library)
            print(f"| {library} | {megabytes:.1f} | {seconds:.3f} |")
    if args.recount_events:
        t = time_recount(args.recount_events, args.batch)
        print(
            f"\nrecount of {t.messages:,} archived single-event messages (gzip JSON lines, in memory, windows "
            f"hour and day): read {t.read_s:.1f} s + recount {t.recount_s:.1f} s = {t.read_s + t.recount_s:.1f} s "
            f"wall, {t.read_cpu_s + t.recount_cpu_s:.1f} s CPU (read {t.read_cpu_s:.1f}, recount "
            f"{t.recount_cpu_s:.1f}; target: 60 s; load {os.getloadavg()[0]:.1f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
