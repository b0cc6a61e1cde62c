"""The leases a run takes: its schedule's overlap lease and its place under a limit.

Keys, one word each: ``overlap:{job}`` (the running run of a schedule),
``overlap-wait:{job}`` (the one run ``buffer_one`` lets wait) and
``concurrency:{job}`` or ``concurrency:{job}:{kwarg}={json value}`` (the limit's
places). The holder is ``{job id}@{host}:{pid}``: ``m status`` shows where a run is.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Mapping

from ..jobs import JobSpec
from ..ports.leases import MAX_LEASE_TEXT, MAX_LEASE_TTL

_HOST = socket.gethostname()[:60]


def holder_of(job_id: str) -> str:
    """Who holds a run's leases: the job and the process running it."""
    return f"{job_id[:120]}@{_HOST}:{os.getpid()}"


def overlap_key(job: str) -> str:
    return _bounded(f"overlap:{job}")


def waiting_key(job: str) -> str:
    return _bounded(f"overlap-wait:{job}")


def concurrency_key(spec: JobSpec, kwargs: Mapping[str, object]) -> str:
    """The limit's key for a run of ``spec`` with ``kwargs``: one per value of its key."""
    if spec.concurrency_key is None:
        return _bounded(f"concurrency:{spec.name}")
    value = json.dumps(
        kwargs.get(spec.concurrency_key), sort_keys=True, separators=(",", ":"), default=str
    )
    return _bounded(f"concurrency:{spec.name}:{spec.concurrency_key}={value}")


#: Seconds a run's lease lives at most without an extension: a killed replica's leases
#: are free by then even where its reservations last longer (RabbitMQ's 30 minutes).
LEASE_TTL_MOST = 30.0


def lease_ttl(visibility_timeout: float) -> float:
    """A run's leases live as long as its reservation, and at most
    :data:`LEASE_TTL_MOST`: a dead replica frees them within that."""
    return min(max(visibility_timeout, 0.05), LEASE_TTL_MOST, MAX_LEASE_TTL)


def _bounded(key: str) -> str:
    """``key`` if it is a valid lease key, else its readable start and a digest of it."""
    if len(key) <= MAX_LEASE_TEXT and key.isprintable() and key == key.strip():
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    start = "".join(c if c.isprintable() and not c.isspace() else "_" for c in key[:120])
    return f"{start}#{digest}"
