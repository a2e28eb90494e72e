"""The archive's readers' side: what the counters must hold, recounted from the archive (``recount``).

Never shipped in the Lambda package (the function only writes the archive: ``tally.post_commit.archive``);
used by the operator's commands and the chaos run's check. ``recount`` is pure, like the core it counts with.
"""
