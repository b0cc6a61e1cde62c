"""What became of a job, by its id: statuses and results kept as memos in the broker."""
