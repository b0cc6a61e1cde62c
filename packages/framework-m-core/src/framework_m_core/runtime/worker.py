"""The worker runtime: one task tree of the ticker, the consumer and the running jobs.

The tree is ``Worker.run``: leaving it, however it is left (stop, abort, a
crash, cancellation), settles or releases every delivery it took. A ticker
or consumer that dies is logged with its traceback and stops the worker, which
then raises :class:`~.errors.WorkerFailedError`: an orchestrator restarts the
replica instead of it idling alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..app import App
from ..control import fleet, replicas
from ..errors import (
    BrokerError,
    ConfigurationError,
    SchemaConflictError,
    SchemaMissingError,
    WorkerFailedError,
)
from ..observability.observer import Observer
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol, RelayProtocol, TickerProtocol
from ..ports.records import Delivery
from .events import first_of, reraise_if_cancelled
from .execution import Execution, WorkerStats, released_jobs
from .stalls import STALL_WARNING, StallWatchdog

# Jobs one worker runs at once unless told otherwise (the README's Performance section
# says why this number).
DEFAULT_CONCURRENCY = 50

# The names of the threads plain ``def`` handlers run in.
JOB_THREAD_PREFIX = "framework-m-job"

# Below Kubernetes' default termination grace period (30 s), so a drain ends before SIGKILL.
DEFAULT_SHUTDOWN_TIMEOUT = 25.0

log = logging.getLogger("framework_m.worker")

# A receive that failed is tried again after 0.1 s, doubling up to this many seconds.
FETCH_BACKOFF_MIN = 0.1
FETCH_BACKOFF_MAX = 5.0

__all__ = ["DEFAULT_CONCURRENCY", "Worker", "WorkerStats"]


class Worker:
    """Runs an app's jobs from a broker, and its ticker unless ``ticker`` is None.

    Call :meth:`run`; :meth:`stop` (e.g. from SIGTERM) stops ticking and
    fetching, lets in-flight jobs finish for up to ``shutdown_timeout`` seconds,
    and releases the rest to the broker.

    :param app: the jobs to run.
    :param broker: where they come from; not connected here (the caller connects it).
    :param ticker: the ticker to run beside the consumer (``m worker``), or None for a
        worker that only runs jobs (``m worker --no-scheduler``).
    :param concurrency: jobs run at once. Runs waiting for a lease (a limit's place),
        or for their own run going on here, do not count, up to as many again: the
        worker holds at most twice this many.
    :param shutdown_timeout: seconds running jobs may finish after :meth:`stop`; the
        rest are cancelled and released.
    :param fetch_timeout: seconds one receive waits for deliveries.
    :param progress_interval: seconds between progress lines in the log (0: none).
    :param sync_schema: sync the broker's schema at start; False only checks it and
        refuses to start when it differs (``m worker --no-sync-schema``).
    :param observer: receives the events metrics are made of.
    :param threads: plain ``def`` handlers run at once (default: ``concurrency``).
    :param heartbeat: seconds between renewals of this worker's entry in the replica
        roll (:mod:`~framework_m_core.control.replicas`, brokers with shared state);
        0: not listed.
    :param relays: what runs beside the consumer and moves jobs into the broker (the
        outbox relay of ``m worker --outbox-url``), each checked at :meth:`prepare`,
        supervised like the ticker and stopped with the worker.
    :param stall_warning: seconds the event loop may stay blocked (a handler blocking
        it) before a warning names the jobs running and where it is stuck
        (:mod:`~framework_m_core.runtime.stalls`); 0: not watched.
    """

    def __init__(
        self,
        app: App,
        broker: BrokerProtocol,
        *,
        ticker: TickerProtocol | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        fetch_timeout: float = 1.0,
        progress_interval: float = 60.0,
        sync_schema: bool = True,
        observer: Observer | None = None,
        threads: int | None = None,
        heartbeat: float = replicas.HEARTBEAT,
        stall_warning: float = STALL_WARNING,
        relays: Sequence[RelayProtocol] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        self.app = app
        self.broker = broker
        self.ticker = ticker
        self.relays = list(relays)
        self.concurrency = concurrency
        self.shutdown_timeout = shutdown_timeout
        self.fetch_timeout = fetch_timeout
        self.progress_interval = progress_interval
        self.sync_schema = sync_schema  # False: check the schema read-only, refuse if it differs
        self.stats = WorkerStats()
        self._observer = observer or Observer()
        # Plain ``def`` handlers run here: ``threads`` of them at once (default: concurrency).
        self._threads = (
            ThreadPoolExecutor(threads or concurrency, thread_name_prefix=JOB_THREAD_PREFIX)
            if any(spec.blocking for spec in app.jobs.values())
            else None
        )
        self._execution = Execution(app, broker, self.stats, self._observer, self._threads)
        self._stopping = asyncio.Event()
        self._aborting = False  # stopping without waiting for the receive in progress
        self._receiving: asyncio.Future[Sequence[Delivery]] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._waiting = 0  # of those, runs waiting (a lease, their own run here): not counted
        self._execution.on_waiting = self._waiting_changed
        self._slot_free = asyncio.Event()
        self._prepared = False
        self._failure: str | None = None
        self._health = BrokerHealth(self._observer)
        self.heartbeat = (
            replicas.RollEntry(broker, self._described, concurrency=concurrency, interval=heartbeat)
            if heartbeat > 0 and Capability.STORE in broker.capabilities
            else None
        )
        if self.heartbeat is not None:  # its runs listed under its name in the roll
            self._execution.activity.replica = self.heartbeat.id
        self.watchdog = (
            StallWatchdog(stall_warning, self._observer, self._running_jobs)
            if stall_warning > 0
            else None
        )

    def stop(self) -> None:
        """Begin a graceful shutdown (idempotent)."""
        if not self._stopping.is_set():
            log.info("shutdown requested: no new jobs are fetched or ticked")
            self._stopping.set()
            if self.ticker is not None:
                self.ticker.stop()
            for relay in self.relays:
                relay.stop()

    def abort(self) -> None:
        """Stop now: running jobs are cancelled and released to the broker."""
        self.stop()
        self._hurry_up()
        if self._inflight:
            log.warning("aborting: releasing %d running job(s)", len(self._inflight))
        for task in self._inflight:
            task.cancel()

    async def prepare(self) -> None:
        """Sync the broker's schema, then check the ticker against the real dedup window.

        Raises before anything runs when the schema cannot be synced or the
        ticker's settings break the grace rule. :meth:`run` calls it if needed.
        """
        if self.ticker is not None:
            self.ticker.check()  # against the configured window: refuse before changing anything
        for relay in self.relays:
            relay.check(self.broker.dedup_window)
        if self.sync_schema:
            plan = await self.broker.sync_schema()
            if not plan.in_sync:
                log.info("schema synced:\n%s", "\n".join(str(c) for c in plan.changes))
        else:
            plan = await self.broker.plan_schema()
            if not plan.in_sync:
                raise SchemaConflictError(
                    f"the broker's schema is not what this code needs, and --no-sync-schema "
                    f"forbids changing it; run `m sync-schema` first (with a user that may). "
                    f"The plan: {'; '.join(str(c) for c in plan.changes)}"
                )
        for warning in plan.warnings:
            log.warning("schema: %s", warning)
        self._check_leases()
        if self.ticker is not None:
            self.ticker.check()
        for relay in self.relays:
            relay.check(self.broker.dedup_window)
        self._prepared = True
        self._observer.broker_connected(True)

    def _check_leases(self) -> None:
        """Refuse limits the broker cannot hold; say that overlap policies are not held."""
        if Capability.STORE in self.broker.capabilities:
            return
        jobs = self.app.jobs.values()
        limited = sorted(
            spec.name for spec in jobs if spec.concurrency is not None or spec.rate is not None
        )
        if limited:
            raise ConfigurationError(
                f"{self.broker.display_url} has no store for leases, which concurrency= and "
                "rate_limit= need "
                f"(jobs {', '.join(limited)}): use a broker that has them"
            )
        kept = sorted(spec.name for spec in jobs if spec.leased)
        if kept:
            log.warning(
                "%s has no store for leases: runs of %s may overlap whatever their overlap= says",
                self.broker.display_url,
                ", ".join(kept),
            )

    async def connect(self, timeout: float | None = None) -> bool:
        """Connect the broker and :meth:`prepare`, trying again while the broker is out of
        reach (a :class:`~.errors.BrokerError`), each attempt logged with the wait before
        the next; :meth:`readiness` says why meanwhile. False when :meth:`stop` was
        called before the broker answered.

        Raises that error once ``timeout`` seconds passed without an answer (None: keep
        trying); any other error at once. The caller closes the broker.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                await self.broker.connect()
                await self.prepare()
            except BrokerError as exc:
                await self.broker.close()
                wait = self._health.failed(exc)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BrokerError(
                        f"gave up after {timeout:g}s (--connect-timeout) and {attempt} "
                        f"attempt(s): {exc}"
                    ) from None
                wait = wait if left is None else min(wait, left)
                log.warning("broker out of reach at start (%s); trying again in %.1fs", exc, wait)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._stopping.wait()
                if self._stopping.is_set():
                    return False
                continue
            if attempt > 1:
                log.info("the broker answered (attempt %d)", attempt)
            self._health.answered()
            return True

    def liveness(self) -> tuple[bool, str]:
        """Whether the worker is alive (its ticker and consumer run, or it is starting)."""
        if self._failure is not None:
            return False, self._failure
        return True, "ok" if self._prepared else "starting"

    def readiness(self) -> tuple[bool, str]:
        """Whether it takes work: schema checked, broker reachable and storing what the
        ticker publishes, not shutting down."""
        if self._failure is not None:
            return False, self._failure
        if not self._prepared and self._health.problem is not None:
            return False, f"starting: the broker is out of reach: {self._health.problem}"
        if not self._prepared:
            return False, "starting: the schema is not checked yet"
        if self._stopping.is_set():
            return False, "shutting down"
        if self._health.problem is not None:
            return False, f"the broker is out of reach: {self._health.problem}"
        storing = getattr(self.ticker, "store_problem", None)  # tickers of ours say it
        if storing is not None:
            return False, storing
        return True, "ok"

    async def run(self) -> None:
        """Sync the schema, run the app's startup hooks, then tick and consume until
        :meth:`stop`; the shutdown hooks run after the last job ended or was released.

        Raises :class:`WorkerFailedError` after a graceful stop when the ticker or
        the consumer died; ``CancelledError`` propagates once every delivery is
        released.
        """
        if not self._prepared:
            await self.prepare()
        await self.app.startup()
        try:
            async with asyncio.TaskGroup() as tree:
                if self.ticker is not None:
                    tree.create_task(self._supervised("ticker", self.ticker.run()), name="ticker")
                for relay in self.relays:
                    tree.create_task(self._supervised(relay.name, relay.run()), name=relay.name)
                helpers = self._start_helpers(tree)
                try:
                    await self._supervised("consumer", self._consume())
                finally:
                    self.stop()
                    self._execution.cancels.close()
                    if self.heartbeat is not None:
                        self.heartbeat.close()
                    for helper in helpers:
                        helper.cancel()
            await self._execution.places.release_all()
            await self._execution.activity.settle(timeout=2.0)
            await self._leave_roll()
        finally:
            if self._threads is not None:  # a blocking handler past the deadline runs on
                self._threads.shutdown(wait=False, cancel_futures=True)
            await self.app.shutdown()
            s = self.stats
            released = released_jobs(self._execution.released, s.released)
            log.info(
                "worker stopped: %d succeeded, %d retried, %d dead-lettered, %d released%s, "
                "%d skipped (overlap), %d cancelled, %d expired, %d already finished, "
                "%d lost (taken back while frozen)",
                *(s.succeeded, s.retried, s.dead_lettered, s.released, released, s.skipped),
                *(s.cancelled, s.expired, s.already_finished, s.lost),
            )
        if self._failure is not None:
            raise WorkerFailedError(self._failure)

    def _start_helpers(self, tree: asyncio.TaskGroup) -> list[asyncio.Task[None]]:
        """Progress lines, cancel marks, the roll's heartbeat, the stall watchdog: the
        tasks cancelled once the consumer stopped."""
        helpers = [tree.create_task(self._report_progress(), name="progress")]
        if self._execution.cancels.on:
            helpers.append(tree.create_task(self._execution.cancels.run(), name="cancels"))
        if self.heartbeat is not None:
            helpers.append(tree.create_task(self.heartbeat.run(), name="heartbeat"))
            helpers.append(tree.create_task(self._announce(), name="announce"))
        if self.watchdog is not None:
            helpers.append(tree.create_task(self.watchdog.run(), name="watchdog"))
        return helpers

    def _running_jobs(self) -> list[str]:
        """The jobs running now, as ``name[id]`` (for the stall watchdog's thread)."""
        try:
            return sorted(task.get_name() for task in list(self._inflight))
        except RuntimeError:  # the loop ran again and changed the set meanwhile
            return []

    async def _announce(self) -> None:
        """Tell the fleet this app's jobs and schedules (what steering checks names by)."""
        scheduled = [spec.name for spec in self.app.scheduled()]
        await fleet.announce_quietly(self.broker, self.app.jobs, scheduled)

    def _described(self) -> tuple[bool, int, dict[str, int], dict[str, float]]:
        """For the replica roll: ticking or not, handlers running, the deliveries
        settled since it started by outcome, and what its relays last saw."""
        s = self.stats
        counts = {
            "succeeded": s.succeeded, "retried": s.retried, "dead_lettered": s.dead_lettered,
            "skipped": s.skipped, "expired": s.expired, "cancelled": s.cancelled,
        }  # fmt: skip
        seen = {k: v for relay in self.relays for k, v in relay.described().items()}
        return self.ticker is not None, len(self._inflight) - self._waiting, counts, seen

    async def _leave_roll(self) -> None:
        """Take this worker off the replica roll; if the broker does not answer in time,
        the entry drops out by itself once it is quiet."""
        if self.heartbeat is None or not self.heartbeat.beats:
            return
        try:
            async with asyncio.timeout(2.0):
                await self.heartbeat.leave()
        except (BrokerError, TimeoutError) as exc:
            log.info("replica roll: entry left to expire (%s)", str(exc) or "no answer in time")

    async def _supervised(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work``; if it dies, log why, note it and stop the worker at once."""
        try:
            await work
        except Exception as exc:
            log.critical("the %s died; stopping the worker", name, exc_info=exc)
            cause = _innermost(exc)
            self._failure = self._failure or f"the {name} died: {type(cause).__name__}: {cause}"
            self._hurry_up()
            self.stop()

    async def _consume(self) -> None:
        async with asyncio.TaskGroup() as jobs:
            while not self._stopping.is_set():
                self._slot_free.clear()
                free = self.concurrency - len(self._inflight) + min(self._waiting, self.concurrency)
                if free <= 0:
                    await first_of(self._slot_free, self._stopping)
                    await asyncio.sleep(0)  # jobs ending in the same pass: one larger receive
                    continue
                for delivery in await self._receive_or_wait(free):
                    await self._start(jobs, delivery)
            await self._drain()

    async def _receive_or_wait(self, free: int) -> Sequence[Delivery]:
        """Up to ``free`` deliveries; none after a failed receive, once its backoff passed
        (or the worker stops)."""
        try:
            deliveries = await self._receive(free)
        except Exception as exc:  # broker down: keep trying, say so
            reraise_if_cancelled()
            self._observer.broker_error("receive")
            backoff = self._health.failed(exc)
            if isinstance(exc, SchemaMissingError) and await self._sync_again(exc):
                return ()
            log.error("receive failed: %s; retrying in %.1fs", exc, backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._stopping.wait()
            return ()
        self._health.answered()
        return deliveries

    async def _sync_again(self, exc: SchemaMissingError) -> bool:
        """The broker lost the schema (restarted without persistence, say): sync it again
        if this worker may; whether it is synced now."""
        if not self.sync_schema:
            log.error(
                "the broker's schema is gone (%s) and --no-sync-schema forbids creating "
                "it: run `m sync-schema`",
                exc,
            )
            return False
        log.warning("the broker's schema is gone (%s): syncing it again", exc)
        try:
            plan = await self.broker.sync_schema()
        except Exception as again:
            reraise_if_cancelled()
            log.error("could not sync the schema again: %s", again)
            return False
        log.warning(
            "schema synced again: %s", "; ".join(str(c) for c in plan.changes) or "nothing to do"
        )
        return True

    async def _start(self, jobs: asyncio.TaskGroup, delivery: Delivery) -> None:
        """Run ``delivery``'s job in ``jobs``; release it if the worker is stopping."""
        self.stats.received += 1
        if self._stopping.is_set():
            await self._execution.release(delivery)
            return
        task = jobs.create_task(self._execution.run(delivery))
        self._inflight.add(task)
        task.add_done_callback(self._done)

    def _hurry_up(self) -> None:
        """Cut the receive in progress short (a graceful stop lets it end)."""
        self._aborting = True
        if self._receiving is not None:
            self._receiving.cancel()

    async def _receive(self, free: int) -> Sequence[Delivery]:
        """A receive that :meth:`_hurry_up` cuts short. Awaited directly, so its result
        reaches the consumer in one pass of the loop (an idle worker's latency)."""
        if self._aborting:
            return []
        self._receiving = receiving = asyncio.ensure_future(
            self.broker.receive(free, self.fetch_timeout)
        )
        try:
            return await receiving
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if receiving.cancelled() and self._aborting and not (task and task.cancelling()):
                return []  # cut short, the consumer itself was not cancelled
            raise
        finally:
            self._receiving = None

    async def _report_progress(self) -> None:
        """Log the counters every ``progress_interval`` seconds while anything changes."""
        if self.progress_interval <= 0:
            return
        last = None
        while True:
            await asyncio.sleep(self.progress_interval)
            s = self.stats
            now = (
                s.succeeded,
                s.retried,
                s.dead_lettered,
                len(self._inflight) - s.waiting,
                s.waiting,
                s.skipped,
            )
            if now != last:
                log.info(
                    "progress: %d succeeded, %d retried, %d dead-lettered, %d running, "
                    "%d waiting for a lease, %d skipped (overlap)",
                    *now,
                )
                last = now

    def _waiting_changed(self, delta: int) -> None:
        self._waiting += delta
        self._slot_free.set()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._slot_free.set()

    async def _drain(self) -> None:
        """Let running jobs finish until the deadline; cancel (release) the rest."""
        if not self._inflight:
            return
        log.info(
            "waiting up to %gs for %d running job(s)", self.shutdown_timeout, len(self._inflight)
        )
        _, pending = await asyncio.wait(self._inflight, timeout=self.shutdown_timeout)
        if pending:
            log.warning("%d job(s) still running at the deadline: releasing them", len(pending))
            for task in pending:
                task.cancel()


class BrokerHealth:
    """Whether the broker answered the last receive, and how long to wait after a failure.

    Reports each change to the observer (``broker_connected``); the backoff doubles
    with each failure in a row, up to a few seconds, and starts over on an answer.
    """

    def __init__(self, observer: Observer) -> None:
        self._observer = observer
        self.problem: str | None = None  # why the last receive failed; None: it answered
        self._backoff = FETCH_BACKOFF_MIN

    def failed(self, exc: Exception) -> float:
        """A receive failed with ``exc``; return the seconds to wait before the next."""
        if self.problem is None:
            self._observer.broker_connected(False)
        self.problem = str(exc) or type(exc).__name__
        backoff = self._backoff
        self._backoff = min(backoff * 2, FETCH_BACKOFF_MAX)
        return backoff

    def answered(self) -> None:
        """A receive returned: the broker is reachable again."""
        if self.problem is not None:
            self._observer.broker_connected(True)
            self.problem = None
        self._backoff = FETCH_BACKOFF_MIN


def _innermost(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
