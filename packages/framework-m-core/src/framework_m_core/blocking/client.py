"""The blocking client: connected once a process, shared by its threads.

Each thread that calls the client runs its calls on an event loop of its own, over a
connection of its own, opened at its first call: a call runs the broker's coroutine to
its end in the calling thread (``run_until_complete``), with no hand-over to another
thread, so a blocking enqueue costs what an awaited one does plus a few microseconds.
Arguments are checked before anything is sent, and errors are the async API's.

Forks and exits, the ways web servers run code:

* A process forked after the client connected (gunicorn ``--preload``, uWSGI) leaves
  the parent's connections alone: the child's first call opens its own. Locks are made
  anew in the child, so a lock another thread held at the fork cannot hang it.
* At exit (or :meth:`SyncClient.close`) the calls under way in other threads are
  waited for, up to :data:`CLOSE_WAIT` seconds, then every idle connection closes; the
  exit logs how many calls were still under way. Nothing is buffered: an enqueue that
  returned a job id is stored.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..adapters.registry import open_broker
from ..control import jobs
from ..errors import BrokerError, ConfigurationError
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import JobStatus

log = logging.getLogger("framework_m.client")

T = TypeVar("T")

#: Seconds a blocking call waits for the broker's answer, unless told otherwise.
DEFAULT_TIMEOUT = 30.0
#: Seconds :meth:`SyncClient.close` (and the exit) waits for the calls under way.
CLOSE_WAIT = 10.0


def connect_sync(
    url: str, *, sync_schema: bool = False, timeout: float = DEFAULT_TIMEOUT
) -> SyncClient:
    """A :class:`SyncClient` connected to the broker at ``url``, for plain ``def`` code.

    Connect once a process (a module-level client, or one made in a web app's start)
    and share it between threads; ``with connect_sync(url) as client:`` closes it after
    the block. With ``sync_schema`` the broker's schema is synced first. A call waits
    at most ``timeout`` seconds for the broker. Raises
    :class:`~.errors.ConfigurationError` for a bad URL and :class:`~.errors.BrokerError`
    when the broker cannot be reached.
    """
    return SyncClient(url, sync_schema=sync_schema, timeout=timeout)


class SyncJob(str):
    """A job id as a blocking enqueue returns it: the ``str`` itself, and what to ask
    about the job through the client it was enqueued with."""

    client: SyncClient

    def __new__(cls, job_id: str, client: SyncClient) -> SyncJob:
        job = super().__new__(cls, job_id)
        job.client = client
        return job

    def status_sync(self) -> JobStatus:
        """The job's status (:func:`~framework_m_core.job_status`)."""
        return self.client.status(self)

    def result_sync(self, *, timeout: float) -> Any:
        """The job's return value, waiting up to ``timeout`` seconds
        (:func:`~framework_m_core.wait_result`, with its errors)."""
        return self.client.result(self, timeout=timeout)

    def cancel_sync(self) -> bool:
        """Cancel the job (:func:`~framework_m_core.cancel_job`)."""
        return self.client.cancel(self)


@dataclass
class _Link:
    """One thread's loop and connection, in the process that opened them."""

    pid: int
    owner: weakref.ref[threading.Thread]
    loop: asyncio.AbstractEventLoop
    broker: BrokerProtocol
    busy: bool = False  # a call of its thread runs on it now

    def orphaned(self) -> bool:
        """Whether its thread has ended (a thread per request, say): nobody calls it."""
        thread = self.owner()
        return thread is None or not thread.is_alive()


_CLIENTS: weakref.WeakSet[SyncClient] = weakref.WeakSet()


class SyncClient:
    """A broker for blocking code: every method blocks until the broker answered, and
    may be called from any thread of the process (see the module docstring)."""

    def __init__(
        self, url: str, *, sync_schema: bool = False, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ConfigurationError(f"timeout must be a number of seconds, got {timeout!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ConfigurationError(f"timeout must be more than 0 seconds, got {timeout!r}")
        if url.startswith("memory:"):
            raise ConfigurationError(
                "memory:// lives in one event loop: the blocking client cannot share it; "
                "use the async API (connect) where the worker runs"
            )
        self._url = url
        self.display_url = open_broker(url).display_url  # a bad URL is refused here
        self._sync_schema = sync_schema
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._links: list[_Link] = []  # every thread's, for close
        self._closed = False
        self._linked().busy = False  # connected now: an unreachable broker raises here
        _CLIENTS.add(self)

    def __repr__(self) -> str:
        return f"<SyncClient {self.display_url}>"

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- enqueueing by name and asking about jobs -------------------------------------------

    def enqueue(self, job_name: str, deduplication_id: str | None = None, **kwargs: Any) -> SyncJob:
        """Enqueue ``job_name`` with ``kwargs``, as the broker's ``enqueue``; its job id.
        A job's handle checks the arguments first: ``handle.enqueue_sync(client, ...)``."""
        return self.job(
            self.run(lambda b: b.enqueue(job_name, deduplication_id, **kwargs), "enqueue")
        )

    def enqueue_in(
        self,
        delay: timedelta | float,
        job_name: str,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> SyncJob:
        """Enqueue ``job_name`` to run ``delay`` (seconds or a timedelta) from now."""
        return self.job(
            self.run(lambda b: b.enqueue_in(delay, job_name, deduplication_id, **kwargs), "enqueue")
        )

    def enqueue_at(
        self,
        when: datetime | float,
        job_name: str,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> SyncJob:
        """Enqueue ``job_name`` to run no sooner than ``when`` (an aware datetime or unix
        seconds)."""
        return self.job(
            self.run(lambda b: b.enqueue_at(when, job_name, deduplication_id, **kwargs), "enqueue")
        )

    def job(self, job_id: str) -> SyncJob:
        """The job ``job_id``, to ask about through this client."""
        return SyncJob(jobs.validate_job_id(job_id), self)

    def status(self, job_id: str) -> JobStatus:
        """The status of ``job_id`` (:func:`~framework_m_core.job_status`)."""
        return self.run(lambda b: jobs.job_status(b, job_id), "reading a job's status")

    def result(self, job_id: str, *, timeout: float) -> Any:
        """The return value of ``job_id``, waiting up to ``timeout`` seconds
        (:func:`~framework_m_core.wait_result`, with its errors)."""
        return self.run(
            lambda b: jobs.wait_result(b, job_id, timeout=timeout),
            "waiting for a job's result",
            wait=timeout if isinstance(timeout, int | float) and math.isfinite(timeout) else 0,
        )

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id`` (:func:`~framework_m_core.cancel_job`)."""
        return self.run(lambda b: jobs.cancel_job(b, job_id), "cancelling a job")

    # -- the calling thread's loop ----------------------------------------------------------

    def run(
        self,
        make: Callable[[BrokerProtocol], Coroutine[Any, Any, T]],
        what: str,
        *,
        wait: float = 0.0,
    ) -> T:
        """``make(broker)`` run to its end on this thread's loop and connection; its
        result or its error. :class:`~.errors.BrokerError` when no answer came within
        the client's timeout (plus ``wait``): ``what`` happened then or not."""
        if _in_async_code():
            raise RuntimeError(
                "a blocking framework-m call from async code would block its event loop: "
                "await the async API (connect, handle.enqueue) there"
            )
        link = self._linked()  # marked busy: a close now waits for this call
        try:
            return link.loop.run_until_complete(
                asyncio.wait_for(make(link.broker), self._timeout + max(0.0, wait))
            )
        except TimeoutError:
            raise BrokerError(
                f"{what} on {self.display_url}: no answer within {self._timeout:g}s "
                "(it may have happened)"
            ) from None
        finally:
            link.busy = False

    def _linked(self) -> _Link:
        """This thread's loop and connection, marked busy; opened at its first call (and
        anew after a fork). Marked under the lock that :meth:`close` takes, so a close
        either waits for the call or the call sees the client closed."""
        link: _Link | None = getattr(self._local, "link", None)
        if link is not None and link.pid == os.getpid():
            with self._lock:
                if self._closed:
                    raise BrokerError(f"the client of {self.display_url} is closed")
                link.busy = True
            return link
        if self._closed:
            raise BrokerError(f"the client of {self.display_url} is closed")
        loop = asyncio.new_event_loop()
        broker = open_broker(self._url)
        try:
            loop.run_until_complete(asyncio.wait_for(self._open(broker), self._timeout))
        except TimeoutError:
            loop.close()
            raise BrokerError(
                f"{self.display_url}: not connected within {self._timeout:g}s"
            ) from None
        except BaseException:
            loop.close()
            raise
        self._sync_schema = False  # synced once: other threads' connections need not
        link = _Link(os.getpid(), weakref.ref(threading.current_thread()), loop, broker, True)
        self._local.link = link
        with self._lock:
            ended = [old for old in self._links if old.orphaned() and not old.busy]
            self._links = [old for old in self._links if old not in ended] + [link]
            closed = self._closed
        _close_links(ended, self._timeout, self.display_url)  # those of threads gone
        if closed:  # closed while this thread connected
            _close_links([link], self._timeout, self.display_url)
            raise BrokerError(f"the client of {self.display_url} is closed")
        return link

    async def _open(self, broker: BrokerProtocol) -> None:
        await broker.connect()
        try:
            if self._sync_schema:
                await broker.sync_schema()
        except BaseException:
            await broker.close()
            raise

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Wait up to ``timeout`` seconds for the calls under way in other threads, then
        close every idle connection of this process. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            links = [link for link in self._links if link.pid == os.getpid()]
            self._links = []
        mine = getattr(self._local, "link", None)
        deadline = time.monotonic() + timeout
        while any(link.busy and link is not mine for link in links):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        under_way = [link for link in links if link.busy and link is not mine]
        if under_way:
            log.error(
                "%s: %d call(s) still under way in other threads after %gs as the client "
                "closed: whether they happened is unknown",
                self.display_url,
                len(under_way),
                timeout,
            )
        idle = [link for link in links if link not in under_way]
        _close_links(idle, timeout, self.display_url)

    def _forked(self) -> None:
        """In a child process: the parent's connections are the parent's; a lock another
        thread held at the fork is not ours."""
        self._lock = threading.Lock()
        self._links = []


def _in_async_code() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _close_links(links: list[_Link], timeout: float, url: str) -> None:
    """Close each link's connection and loop, from this thread (none runs them now)."""
    for link in links:
        if link.loop.is_running() or link.loop.is_closed():
            continue
        try:
            link.loop.run_until_complete(asyncio.wait_for(link.broker.close(), timeout))
        except Exception as exc:
            log.warning("%s: closing a connection failed (%s)", url, exc)
        finally:
            link.loop.close()


def _close_all() -> None:
    for client in list(_CLIENTS):
        client.close()


def _after_fork() -> None:
    for client in list(_CLIENTS):
        client._forked()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork)
