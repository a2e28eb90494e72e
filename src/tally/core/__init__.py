"""The pure core: decoding, validation, aggregation and transaction planning over plain data.

Nothing in this package imports boto3 or reads the environment; time is always passed in.
"""
