"""The control plane's shared state on the broker's store: every key layout in one
table (:mod:`.keys`), and the leases, state records and memos built on the store's
records (:mod:`.shared`)."""
