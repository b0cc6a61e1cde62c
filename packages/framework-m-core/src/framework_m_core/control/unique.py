"""Unique jobs: one job per key while one waits or runs.

A unique job's key is a lease of one place (:func:`~.keys.unique`) whose holder is the
job's id. An enqueue through the job's handle takes it for the new job's id, for the
job's ``unique_for`` seconds, before it stores the job; finding it held, it stores
nothing and returns the holder's id. The worker running the job takes the place again
(the same holder) for its run's lease ttl, extends it with its heartbeat, and gives it
back when the job settles: succeeded, dead-lettered or cancelled. A failed attempt that
is retried, or a snooze, keeps it for ``unique_for`` again; a worker that dies lets it
lapse within the run's lease ttl.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ..errors import BrokerError
from ..jobs import JobSpec
from ..ports.base import BaseBroker
from ..ports.messages import JobMessage, derived_job_id, new_job_id
from . import keys
from .shared import shared

log = logging.getLogger("framework_m.enqueue")

#: Rounds of take-or-read an enqueue tries before it gives up (each a holder that
#: released its key between the two).
_ROUNDS = 5


def unique_key(spec: JobSpec, kwargs: dict[str, Any]) -> str:
    """The key of ``spec``'s job with ``kwargs``."""
    return keys.unique(spec.name, spec.unique_fields, kwargs)


async def enqueue_unique(broker: BaseBroker[Any], spec: JobSpec, message: JobMessage) -> str:
    """Store ``message`` of unique job ``spec`` unless a job of its key waits or runs:
    the id of the job stored, or of the one holding the key."""
    key = unique_key(spec, message.kwargs)
    dedup = message.deduplication_id
    job_id = derived_job_id(dedup) if dedup is not None else new_job_id()
    store = shared(broker)
    for _ in range(_ROUNDS):
        if await store.acquire_lease(key, job_id, spec.unique_for):
            break
        holders = await store.lease_holders(key)
        if holders:
            log.debug("%s: %s holds its key; not enqueued again", spec.name, holders[0])
            return holders[0]
    else:
        raise BrokerError(f"{spec.name}: its unique key changed hands {_ROUNDS} times at once")
    try:
        return (await broker.publish(dataclasses.replace(message, id=job_id))).job_id
    except BaseException:
        await store.release_lease(key, job_id)
        raise
