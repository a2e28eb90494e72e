"""``python -m bench.fenced_apply``: write units per event with journal batches applied by fenced single-item writes
(``tally.core.fence``) beside today's chunk transactions, on the same streams.

Workload U (``bench.workloads``: 1,000 Zipf keys, two counters, numbered ids), the template's defaults (hour and
day windows on the key's item), DynamoDB Local billed by ``tally_local.kit.meter``: packed messages of 100 events
in batches of 700 records, and single events in batches of 100 records. Prints write and read units per event, the
largest item a write touched, whether every key read back exact, and the write units per event of each class of
item (``bench.views.item_class``: key items, markers, marker blocks, journal pages, headers, applied-records).
With the fenced apply on, the planner sends a unit through the journal when it costs less there than in direct
transactions (``tally.core.write_cost``: write units, and the fenced path's reads), so single-event batches take it
too.

``--sweep`` measures where that starts paying: single events in batches of 2 to 16 records, the routing as it was
(the chunked apply: such batches take direct transactions) beside the fenced routing, write units per event each.
"""

from __future__ import annotations

import math
from functools import partial

import click

from bench.peers.tally_pipeline import TallyCounter
from bench.results import console
from bench.suite import run_peer
from bench.views import item_class
from bench.workloads import PACK, u_stream
from tally.runtime import CLIENT_CONFIG
from tally_local.dynamodb_local import DynamoDBLocal

SEED = 20_261_124
SWEEP_RECORDS = (2, 4, 6, 8, 10, 12, 16)


@click.command()
@click.option("--min-events", default=20_000, show_default=True, help="Events per configuration, at least 2 batches.")
@click.option("--keys", default=1000, show_default=True)
@click.option(
    "--sweep",
    is_flag=True,
    help="Single events in small batches (2-16 records, --min-events each): where the fenced routing starts paying.",
)
def main(*, min_events: int, keys: int, sweep: bool) -> None:
    """Each configuration chunked, then fenced, on one DynamoDB Local."""
    out = console()
    configurations = [(False, records) for records in SWEEP_RECORDS] if sweep else [(True, 700), (False, 100)]
    with DynamoDBLocal() as ddb:
        admin, client = ddb.client(), ddb.client(CLIENT_CONFIG)
        for packed, records in configurations:
            per_batch = records * (PACK if packed else 1)
            events = max(2, math.ceil(min_events / per_batch)) * per_batch
            for fenced in (False, True):
                stream = u_stream(events, packed=packed, keys=keys, seed=SEED, numbered=True)
                peer = partial(TallyCounter, packed=packed, windows=True, fenced=fenced, classify=item_class)
                run = run_peer(peer, stream, client=client, admin=admin, batch_size=records)
                out.print(
                    f"{'packed' if packed else 'single'} {records} records, {'fenced ' if fenced else 'chunked'}: "
                    f"{run.write_units_per_event:.5f} WU/event, {run.usage.read_units / run.events:.5f} RU/event, "
                    f"largest item {run.usage.largest_item_bytes} B, {run.events} events, exact {run.correctness.exact}"
                )
                for name, usage in sorted(run.usage.by_class.items(), key=lambda entry: -entry[1].write_units):
                    out.print(
                        f"    {name}: {usage.write_units / run.events:.5f} WU/event "
                        f"({usage.write_units / run.usage.write_units:.0%}, {usage.writes} writes)"
                    )


if __name__ == "__main__":
    main()
