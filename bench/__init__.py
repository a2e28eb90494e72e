"""Benchmarks of tally against the approaches users would otherwise pick, and its cost experiments.

``python -m bench NAME`` runs one of them (``python -m bench`` lists them; ``bench/__main__.py``)::

    make bench          # full size (several minutes): writes docs/benchmarks.md, .png and .json
    make bench-smoke    # a tiny size in seconds, written under .bench/ (CI runs it through pytest)

Layout: ``workloads`` (seeded event streams and their reference sums), ``peers/`` (the naive counter,
Powertools idempotency, tally), ``suite`` (the peer run), ``report`` (its tables, chart and verdicts), ``cpu``
and ``memory`` (no-I/O handler CPU and peak memory, each in its own subprocess), the experiments (``patterns``,
``bounded``, ``distinct``, ``resets``, ``hot_key``, ``journal_compare``, ``plan_check``, ``cost_chart``,
``windows_cost``, ``duration``), and ``results`` (how each reports: one table, one JSON document). What bills
the requests (``tally_local.kit.meter``), the conflict emulator and the latency proxy are the shared tooling
in ``tally_local``; the chaos run is ``tally_local.chaos`` (``python -m bench chaos`` starts it).
"""
