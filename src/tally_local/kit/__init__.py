"""The botocore kit: instruments that hook a client's botocore events, so the code under test runs unmodified.

One module per instrument, each used by the tests, the benchmarks, the chaos run and the local stack:

- ``answers``: what an instrument answers in place of the service (an error, a cancelled transaction, a
  response lost after the write), shaped as AWS sends it; the items a transaction names;
- ``faults``: scripted faults for one DynamoDB client (``DynamoDBFaults``) or one SQS/Kinesis producer client
  (``BatchFaults``), and TTL's sweep just before a chosen request of one client (``SweepBefore``); the chaos run's
  seeded, rate-based faults are ``tally_local.chaos.faults``, built on these;
- ``conflicts``: DynamoDB's rule that concurrent transactions on one item conflict (DynamoDB Local serialises
  them and never says ``TransactionConflict``);
- ``meter``: the bill of one client's DynamoDB calls in capacity units (``DynamoDBMeter``, over ``shadow``'s
  copy of the items), and ``writes``: the writes by kind of every client a process creates (``WriteMeter``);
- ``calls``: every AWS call of a test session with the code that made it (the IAM contract's input);
- ``lambda_events``: the events Lambda's SQS and Kinesis event source mappings deliver;
- ``clients``: clients on local endpoints (DynamoDB Local, moto's server), all from one botocore session.
"""
