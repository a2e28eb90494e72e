"""What tally costs: DynamoDB's capacity rules (``capacity``) and the planner's bill model (``model``).

Pure: no boto3, no environment. ``tally plan`` (``tally.cli.plan``) and the benchmarks
(``tally_local.kit.meter``, ``bench.plan_check``) share these rules, so a prediction and a measurement bill every
item the same way.
"""
