"""The blocking client: one connection a process, shared by its threads.

The client keeps the broker in an event loop of its own (:class:`~.loop.LoopThread`);
each call hands a coroutine to that loop and blocks its thread until the broker answered,
so any number of threads enqueue at once over one connection, their requests interleaved
by the loop. Arguments are checked in the calling thread before anything is handed over.

Forks and exits, the ways web servers run code:

* A process forked after the client connected (gunicorn ``--preload``, uWSGI) leaves
  the parent's connection alone: the child's first call opens its own loop and
  connection. Locks are made anew in the child, so a lock held by another thread at the
  fork cannot hang it.
* At exit (or :meth:`SyncClient.close`) the calls under way are waited for, up to
  :data:`CLOSE_WAIT` seconds, before the connection closes; a call still unanswered
  then raises :class:`~.errors.BrokerError` in its thread, and the exit logs how many
  were cut off. An enqueue that returned a job id is stored: nothing is buffered.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import math
import os
import threading
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
from .loop import LoopThread

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


@dataclass(frozen=True)
class _Link:
    """The loop and the connected broker of one process."""

    pid: int
    thread: LoopThread
    broker: BrokerProtocol


_CLIENTS: weakref.WeakSet[SyncClient] = weakref.WeakSet()
_PARENTS: list[_Link] = []  # links a fork left behind: the parent's, never closed here


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
        self._url = url
        self.display_url = open_broker(url).display_url  # a bad URL is refused here
        self._sync_schema = sync_schema
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._link: _Link | None = None
        self._calls: set[concurrent.futures.Future[Any]] = set()
        self._closed = False
        self._linked()
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

    # -- the loop ---------------------------------------------------------------------------

    def run(
        self,
        make: Callable[[BrokerProtocol], Coroutine[Any, Any, T]],
        what: str,
        *,
        wait: float = 0.0,
    ) -> T:
        """``make(broker)`` run on the client's loop, its result or its error returned in
        this thread; :class:`~.errors.BrokerError` when no answer came within the
        client's timeout (plus ``wait``), or the client closed first: ``what`` happened
        then or not."""
        link = self._linked()
        future = link.thread.submit(make(link.broker))
        with self._lock:
            self._calls.add(future)
        try:
            return future.result(self._timeout + max(0.0, wait))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BrokerError(
                f"{what} on {self.display_url}: no answer within {self._timeout:g}s "
                "(it may have happened)"
            ) from None
        except concurrent.futures.CancelledError:
            raise BrokerError(
                f"{what} on {self.display_url}: the client closed before the broker "
                "answered (it may have happened)"
            ) from None
        finally:
            with self._lock:
                self._calls.discard(future)

    def _linked(self) -> _Link:
        """This process's loop and connection, opened on its first call after a fork."""
        with self._lock:
            if self._closed:
                raise BrokerError(f"the client of {self.display_url} is closed")
            link = self._link
            if link is not None and link.pid == os.getpid():
                return link
            if link is not None:
                _PARENTS.append(link)
            thread = LoopThread(f"framework-m client {self.display_url}")
            broker = open_broker(self._url)
            try:
                thread.submit(self._open(broker)).result(self._timeout)
            except concurrent.futures.TimeoutError:
                thread.stop(1.0)
                raise BrokerError(
                    f"{self.display_url}: not connected within {self._timeout:g}s"
                ) from None
            except BaseException:
                thread.stop(1.0)
                raise
            self._link = _Link(os.getpid(), thread, broker)
            self._calls = set()
            return self._link

    async def _open(self, broker: BrokerProtocol) -> None:
        await broker.connect()
        try:
            if self._sync_schema:
                await broker.sync_schema()
        except BaseException:
            await broker.close()
            raise

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Wait up to ``timeout`` seconds for the calls under way, then close the
        connection; a call still unanswered raises in its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            link, self._link = self._link, None
            calls = set(self._calls)
        if link is None or link.pid != os.getpid():
            return
        _, cut = concurrent.futures.wait(calls, timeout)
        if cut:
            log.error(
                "%s: %d call(s) still under way after %gs were cut off as the client "
                "closed: whether they happened is unknown (each raised BrokerError)",
                self.display_url,
                len(cut),
                timeout,
            )
        try:
            link.thread.submit(link.broker.close()).result(timeout)
        except Exception as exc:
            log.warning("%s: closing the connection failed (%s)", self.display_url, exc)
        link.thread.stop(timeout)

    def _forked(self) -> None:
        """In a child process: a lock another thread held at the fork is not ours."""
        self._lock = threading.Lock()


def _close_all() -> None:
    for client in list(_CLIENTS):
        client.close()


def _after_fork() -> None:
    for client in list(_CLIENTS):
        client._forked()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork)
