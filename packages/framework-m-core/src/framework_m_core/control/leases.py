"""The leases a run takes: its schedule's overlap lease and its place under a limit.

Their keys are in :mod:`framework_m_core.control.keys`. The holder is ``{job id}@{host}:{pid}``:
``m status`` shows where a run is.
"""

from __future__ import annotations

import os
import socket

from .checks import MAX_LEASE_TTL

_HOST = socket.gethostname()[:60]


def holder_of(job_id: str) -> str:
    """Who holds a run's leases: the job and the process running it."""
    return f"{job_id[:120]}@{_HOST}:{os.getpid()}"


#: Seconds a run's lease lives at most without an extension: a killed replica's leases
#: are free by then even where its reservations last longer (RabbitMQ's 30 minutes).
LEASE_TTL_MOST = 30.0


def lease_ttl(visibility_timeout: float) -> float:
    """A run's leases live as long as its reservation, and at most
    :data:`LEASE_TTL_MOST`: a dead replica frees them within that."""
    return min(max(visibility_timeout, 0.05), LEASE_TTL_MOST, MAX_LEASE_TTL)
