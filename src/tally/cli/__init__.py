"""The ``tally`` command line (operator tools; needs the ``cli`` extra, never shipped in the Lambda)."""
