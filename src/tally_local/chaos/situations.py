"""The smoke run with one situation at the journal's edges at a time, to show which code the harness catches.

``python -m tally_local.chaos.situations LABEL VARIANT[@SEED]...`` prints one JSON line per variant: the
verdict, the claim faults injected and the situations counted. Run it on the code before the fixes (its
``src`` extracted and put first on ``PYTHONPATH``; the harness is this one) and on today's; the figures are
in docs/reliability.md ("The journal's edges, in the model").

- ``kill``: kills between a journal claim and the commit (rate 0.3), redelivered after the lease, to warm
  consumers whose marker read gate has closed (defect 1);
- ``lost_claim``: claims whose answer is lost near the deadline (rate 0.5; defect 2);
- ``precision``: messages whose sum needs more than 38 digits in a later journal chunk (defect 3);
- ``all``: the smoke configuration as it is;
- ``sessions``: 500 events, 16 bounded sessions (a big message then bounded sales of one producer
  session), minute windows (the big messages: 60 keys over two minutes), kills after a claim at 0.3.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from functools import partial

from tally.runtime import CLIENT_CONFIG
from tally_local.chaos.__main__ import create_tables
from tally_local.chaos.config import SMOKE
from tally_local.chaos.harness import run_chaos
from tally_local.dynamodb_local import DynamoDBLocal

_QUIET = replace(SMOKE.dynamodb, kill_after_claim=0.0, lost_claim_near_deadline=0.0)
VARIANTS = {
    "kill": replace(SMOKE, dynamodb=replace(_QUIET, kill_after_claim=0.3), precision_doomed=0),
    "lost_claim": replace(
        SMOKE, dynamodb=replace(_QUIET, lost_claim_near_deadline=0.5), precision_doomed=0, closed_gate_consumers=0
    ),
    "precision": replace(SMOKE, dynamodb=_QUIET, closed_gate_consumers=0),
    "all": SMOKE,
    "sessions": replace(
        SMOKE,
        events=500,
        bounded_sessions=16,
        windows="minute,hour,day",
        dynamodb=replace(SMOKE.dynamodb, kill_after_claim=0.3),
    ),
}


def main(label: str, variants: list[str]) -> None:
    with DynamoDBLocal() as ddb:
        for variant in variants:
            name, _, seed = variant.partition("@")
            config = VARIANTS[name] if not seed else replace(VARIANTS[name], seed=int(seed))
            result = run_chaos(config, partial(ddb.client, CLIENT_CONFIG), create_tables(ddb.client()))
            verdict = result.verdict
            row = {
                "code": label,
                "variant": variant,
                "passed": result.passed,
                "lost": verdict.lost_events,
                "doubled": verdict.doubled_events,
                "counters_wrong": verdict.counters_wrong,
                "unrecoverable_in_dlq": f"{verdict.doomed_in_dlq}/{verdict.doomed}",
                "claim_faults": {kind: count for kind, count in result.faults.items() if "claim" in kind},
                "situations": result.situations,
                "refused_chunks": result.counts.get("pipeline.refused_chunks", 0),
                "valid_refused": verdict.valid_refused,
                "bound_violations": verdict.bound_violations,
                "bounded_journaled": verdict.bounded_journaled,
                "examples": list(verdict.examples[:3]),
                "seconds": round(result.seconds, 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
