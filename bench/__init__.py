"""Benchmarks of tally against the approaches users would otherwise pick.

One command runs everything on one DynamoDB Local it starts and stops itself::

    make bench          # full size (several minutes): writes docs/benchmarks.md, .png and .json
    make bench-smoke    # a tiny size in seconds, written under .bench/ (CI runs it through pytest)

Layout: ``workloads`` (seeded event streams and their reference sums), ``capacity`` (DynamoDB item sizes
and the pricing rules), ``shadow`` (a model of the items written, for old/new sizes), ``meter``
(botocore hooks that count every request and its capacity units, identically for every peer),
``peers/`` (the naive counter, Powertools idempotency, tally), ``cpu`` and ``memory`` (no-I/O handler
CPU and peak memory, each in its own subprocess), ``suite`` (the run), ``report`` (table, chart,
targets) and ``run`` (the command).
"""
