"""tally on one machine: the local stack (DynamoDB Local and a moto server, resources read from
template.yaml), the event source pollers and function runtime that drive the real handlers as Lambda
would, and the demo. Used by ``make demo``, ``tally-local`` (``python -m tally_local.stack``) and the tests."""
