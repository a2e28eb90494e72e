"""``python -m bench NAME [ARGS...]``: the one runner of every benchmark and experiment under bench/.

``python -m bench`` (or ``python -m bench list``) lists them; ``python -m bench NAME --help`` shows one's
options. Each experiment keeps its own options (they differ: sizes, workloads, proxies) but is found, named
and started here, so the Makefile's ``bench-*`` targets, the docs and a newcomer all use one command; the
modules' own ``python -m bench.X`` entry points keep working for the subprocesses that use them
(``bench.cpu`` and ``bench.memory`` are run pinned to one core by the suite).
"""

from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Experiment:
    """One runnable experiment: the module whose ``__main__`` block runs it, and what it measures."""

    module: str
    measures: str


EXPERIMENTS: Final[dict[str, Experiment]] = {
    "suite": Experiment("bench.run", "tally against the naive counter and Powertools idempotency (docs/benchmarks.md)"),
    "patterns": Experiment("bench.patterns", "cost per event of each counter pattern beside plain sums"),
    "bounded": Experiment("bench.bounded", "cost per event of bounded counters beside plain sums"),
    "notifications": Experiment(
        "bench.notifications", "threshold notifications: cost per event beside plain sums, commit -> PutEvents"
    ),
    "distinct": Experiment("bench.distinct", "cost per event of distinct counts beside plain sums"),
    "views": Experiment("bench.views", "cost per event of 0, 1 and 3 views beside the same keys published by hand"),
    "resets": Experiment("bench.resets", "cost of corrections and resets beside plain sums"),
    "hot-key": Experiment("bench.hot_key", "one hot key under concurrent consumers, with and without write sharding"),
    "fenced-headers": Experiment(
        "bench.fenced_headers", "the requests fenced batches send for other epochs' headers when containers share keys"
    ),
    "journal": Experiment("bench.journal_compare", "the commit journal against the chunked path (docs/journal.md)"),
    "plan-check": Experiment("bench.plan_check", "tally plan's predicted write units against measured runs"),
    "cost-chart": Experiment("bench.cost_chart", "write units per event against batch size, windows on and off"),
    "windows-cost": Experiment("bench.windows_cost", "what hour and day windows add to the write cost"),
    "duration": Experiment("bench.duration", "a batch's handler duration: measured CPU and modelled requests"),
    "cpu": Experiment("bench.cpu", "handler CPU with no I/O, on one core, against Powertools' loop"),
    "memory": Experiment("bench.memory", "peak memory of the handler for one large batch, in a fresh process"),
    "archive-cost": Experiment(
        "bench.archive_cost", "the archive's time per batch beside the handler's, and its bytes"
    ),
    "archive-format": Experiment(
        "bench.archive_format", "the archive's format: size, writer CPU, reader speed, package cost; the recount"
    ),
    "audit": Experiment(
        "bench.audit", "tally audit on a million archived events (local stack), beside a naive recount in the same run"
    ),
    "latency-proxy": Experiment("tally_local.latency_proxy", "an HTTP proxy giving DynamoDB Local AWS-like latencies"),
    "chaos": Experiment("tally_local.chaos", "exactly-once under faults (docs/reliability.md)"),
}


def listing() -> str:
    width = max(map(len, EXPERIMENTS))
    lines = ["usage: python -m bench NAME [ARGS...]   (python -m bench NAME --help: its options)", ""]
    lines += [f"  {name:{width}}  {experiment.measures}" for name, experiment in EXPERIMENTS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run experiment ``argv[0]`` with the rest of ``argv`` as its command line."""
    if not argv or argv[0] in {"list", "-h", "--help"}:
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    experiment = EXPERIMENTS.get(name)
    if experiment is None:
        print(f"no experiment {name!r}\n\n{listing()}", file=sys.stderr)
        return 2
    # The module runs as if started with ``python -m``: its own parser sees its own name and the rest.
    sys.argv = [f"python -m bench {name}", *rest]
    try:
        runpy.run_module(experiment.module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
