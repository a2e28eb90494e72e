"""How a batch's messages are committed to the store exactly once (docs/journal.md), in four layers.

Read them in this order; each imports only the ones after it (and ``tally.core``, ``tally.errors``):

- ``protocol``: the steps themselves, over the store's port, top to bottom beside docs/journal.md:
  what the markers already say, the direct transaction and the isolation of a refused message, the
  journal (claim, check of later chunks, pages, commit, chunks, finish) and the resolution or abort of
  another invocation's batch. It decides each message's fate; it never retries, waits or counts.
- ``retrying``: how each step is run: retried with backoff while the invocation has time, and counted.
- ``fates``: the batch's bookkeeping: one fate per message, the figures for metrics, and the outcome.
- ``ports``: what the protocol needs from outside: the counter store, the journal, the step runner.

``tally.commit.applier.Applier`` puts them together once per invocation. This package imports nothing itself,
so importing one layer never drags in another.
"""
