"""One blocking client per broker URL in a process, shared by every thread.

Django makes a task backend per thread (its handlers are thread-local); the connection
is the process's, opened at the first enqueue, not as settings load (``manage.py
check`` and migrations need no broker).
"""

from __future__ import annotations

import threading

from framework_m_core import SyncClient, connect_sync

_lock = threading.Lock()
_clients: dict[tuple[str, float], SyncClient] = {}


def client(url: str, timeout: float) -> SyncClient:
    """The process's client of ``url``, connected on first use."""
    with _lock:
        found = _clients.get((url, timeout))
        if found is None:
            found = _clients[(url, timeout)] = connect_sync(url, timeout=timeout)
        return found
