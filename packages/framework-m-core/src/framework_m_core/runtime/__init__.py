"""The worker runtime: :class:`~.worker.Worker` (the task tree of ticker, consumer and
jobs) and :class:`~.execution.Execution` (one delivery from decoding to its settle)."""
