"""Operator tools' logic (the dead-letter queue), shared by the ``tally`` CLI and the local demo."""
