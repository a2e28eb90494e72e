"""tally: exactly-once counters from event streams on AWS.

Producers publish counter events to SQS (or Kinesis); a batching Lambda decodes them, pre-aggregates the
deltas per key and applies one atomic ``ADD`` per key to DynamoDB, committed in the same transaction as
the idempotency markers that make every retry and duplicate a no-op.
"""

__version__ = "0.1.0"
