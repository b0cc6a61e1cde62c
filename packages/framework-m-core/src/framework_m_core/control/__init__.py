"""The control plane: everything the fleet shares besides its jobs, in one package.

- :mod:`.keys`: every key layout, in one table;
- :mod:`.shared`: leases, state records and memos on the broker's store (the only way
  core reaches shared state), with the argument checks of :mod:`.checks`;
- :mod:`.schedules`: schedule handles (pause, resume, trigger, backfill, describe) over
  :mod:`.steering`, the schedule records, and :mod:`.runtime_schedules`;
- :mod:`.jobs`: a job's status, result and cancel mark (what ``EnqueuedJob`` calls);
- :mod:`.replicas`: the replica roll; :mod:`.leases`: the leases a run takes.
"""
