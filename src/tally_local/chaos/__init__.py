"""The chaos run: exactly-once counting under every fault the AWS path can produce, in figures.

``python -m tally_local.chaos --config full|smoke`` (``make chaos``, ``make chaos-smoke``); docs/reliability.md
has the method and the full run's figures. Layout, one job per module:

- ``config``: the presets and every fault rate;
- ``workload``: the seeded load (valid, poison, doomed, re-sends) and its reference sums;
- ``clock``: the virtual wall clock and each invocation's deadline;
- ``faults``: DynamoDB faults at the botocore layer, and the run's counts;
- ``sqs`` / ``kinesis``: the event sources, in-process, around ``tally_local.esm`` (the mappings' decisions);
- ``invoke``: one consumer (a production-wired pipeline invoked like the handlers);
- ``dlq``: the dead-letter queue; ``ledger``: attempted/acknowledged messages and the Jepsen-style monitor;
- ``check``: the verdict; ``harness``: the run; ``report``: the summary table and JSON.
"""
