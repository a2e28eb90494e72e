"""Peak memory of tally's handler for one large batch, each measurement in a fresh process.

``python -m bench.memory EVENT_FILE --mode pipeline --endpoint URL`` loads a Lambda SQS event from a JSON
file (as the Lambda runtime hands it over), imports what the deployed handler imports, and runs tally's
handler path once (``bench.peers.tally_pipeline.TallyCounter`` with the template's default settings, the
fenced apply on: decode, aggregate, plan, write to DynamoDB Local). It prints, as JSON, the process's peak
resident set (``VmHWM``: interpreter, libraries and the event included, the figure a Lambda memory size must
hold) before and after the batch, and, with ``--tracemalloc``, the peak of Python allocations during the
batch alone. ``--mode core`` does the same for decode + validate + aggregate without I/O.

``measure`` (used by the suite) writes the event file and runs the four measurements.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bench.workloads import Stream

_MB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


def measure(stream: Stream, records: int, endpoint_url: str) -> dict[str, Any]:
    """Peak memory for one batch of the first ``records`` records of ``stream``, four ways."""
    from bench.workloads import lambda_event  # noqa: PLC0415 - keeps the subprocess's imports minimal

    event = lambda_event(stream.deliveries[:records], time.time_ns() // 1_000_000)
    results: dict[str, Any] = {"records": len(event["Records"])}
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as directory:
        path = Path(directory) / "event.json"
        path.write_text(json.dumps(event), encoding="utf-8")
        for mode in ("pipeline", "core"):
            for traced in (False, True):
                command = [sys.executable, "-m", "bench.memory", str(path), "--mode", mode, "--endpoint", endpoint_url]
                if traced:
                    command.append("--tracemalloc")
                output = subprocess.run(
                    command, check=True, capture_output=True, text=True, timeout=900, cwd=ROOT
                ).stdout
                results[f"{mode}{'-traced' if traced else ''}"] = json.loads(output)
    return results


def _max_rss_mb() -> float:
    """This process's peak resident set: ``VmHWM`` (Linux), else ``ru_maxrss``.

    ``ru_maxrss`` is not enough on Linux: it survives ``exec``, so a child started by a large parent
    reports the parent's peak. ``VmHWM`` belongs to the process's own address space.
    """
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / _MB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / _MB  # kilobytes on Linux


def _run(event_file: Path, mode: str, endpoint_url: str, traced: bool) -> dict[str, Any]:
    import boto3  # noqa: PLC0415 - imported here so the footprint measured is the handler's, not argparse's

    import tally.handlers.sqs  # noqa: F401, PLC0415 - the deployed handler's imports (Powertools, X-Ray)
    from bench.cpu import tally_core  # noqa: PLC0415
    from bench.peers import lambda_context  # noqa: PLC0415
    from bench.peers.tally_pipeline import TallyCounter  # noqa: PLC0415

    event = json.loads(event_file.read_text(encoding="utf-8"))
    peer = None
    if mode == "pipeline":
        session = boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
        )
        client = session.client("dynamodb", endpoint_url=endpoint_url)
        peer = TallyCounter(client, client, uuid.uuid4().hex[:10], packed=False, fenced=None)
    before = _max_rss_mb()
    if traced:
        tracemalloc.start()
    try:
        if peer is not None:
            response = peer.handle(event, lambda_context())
            outcome = {"failed": len(response["batchItemFailures"]), "applied": peer.totals.messages_applied}
        else:
            outcome = {"keys": len(tally_core([record["body"] for record in event["Records"]]))}
        traced_peak = tracemalloc.get_traced_memory()[1] / _MB if traced else None
    finally:
        if traced:
            tracemalloc.stop()
        if peer is not None:
            peer.drop()
    return {"max_rss_before_mb": before, "max_rss_mb": _max_rss_mb(), "tracemalloc_peak_mb": traced_peak, **outcome}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("event_file", type=Path)
    parser.add_argument("--mode", choices=("pipeline", "core"), default="pipeline")
    parser.add_argument("--endpoint", default="")
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args(argv)
    json.dump(_run(args.event_file, args.mode, args.endpoint, args.tracemalloc), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
