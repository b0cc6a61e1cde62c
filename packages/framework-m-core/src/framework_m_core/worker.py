"""The worker runtime: consume, run handlers, ack, retry with backoff, dead-letter."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .app import App
from .broker import Delivery
from .errors import DeliveryLostError, MessageDecodeError
from .jobs import JobContext, JobSpec
from .messages import JobMessage, decode_message
from .protocols import BrokerProtocol, TickerProtocol

log = logging.getLogger("framework_m.worker")
job_log = logging.getLogger("framework_m.job")

_FETCH_BACKOFF_MAX = 5.0


@dataclass(slots=True)
class WorkerStats:
    """Counters of one worker."""

    received: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0


class Worker:
    """Runs an app's jobs from a broker, and its ticker unless ``ticker`` is None.

    Call :meth:`run`; :meth:`stop` (e.g. from SIGTERM) stops ticking and
    fetching, lets in-flight jobs finish for up to ``shutdown_timeout`` seconds,
    and hands the rest back to the broker.
    """

    def __init__(
        self,
        app: App,
        broker: BrokerProtocol,
        *,
        ticker: TickerProtocol | None = None,
        concurrency: int = 10,
        shutdown_timeout: float = 30.0,
        fetch_timeout: float = 1.0,
        progress_interval: float = 60.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.app = app
        self.broker = broker
        self.ticker = ticker
        self.concurrency = concurrency
        self.shutdown_timeout = shutdown_timeout
        self.fetch_timeout = fetch_timeout
        self.progress_interval = progress_interval
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._slot_free = asyncio.Event()
        self._prepared = False

    def stop(self) -> None:
        """Begin a graceful shutdown (idempotent)."""
        if not self._stopping.is_set():
            log.info("shutdown requested: no new jobs are fetched or ticked")
            self._stopping.set()
            if self.ticker is not None:
                self.ticker.stop()

    def abort(self) -> None:
        """Stop now: running jobs are cancelled and handed back to the broker."""
        self.stop()
        if self._inflight:
            log.warning("aborting: handing %d running job(s) back", len(self._inflight))
        for task in self._inflight:
            task.cancel()

    async def prepare(self) -> None:
        """Sync the broker's schema, then check the ticker against the real dedup window.

        Raises before anything runs when the schema cannot be migrated or the
        ticker's settings break the grace rule. :meth:`run` calls it if needed.
        """
        if self.ticker is not None:
            self.ticker.check()  # against the configured window: refuse before changing anything
        plan = await self.broker.sync_schema()
        if not plan.in_sync:
            log.info("schema synced:\n%s", plan.describe())
        if self.ticker is not None:
            self.ticker.check()
        self._prepared = True

    async def run(self) -> None:
        """Sync the schema, then tick and consume until :meth:`stop`."""
        if not self._prepared:
            await self.prepare()
        ticker_task = asyncio.create_task(self.ticker.run(), name="ticker") if self.ticker else None
        progress = asyncio.create_task(self._report_progress())
        try:
            await self._consume()
        finally:
            self.stop()
            progress.cancel()
            if ticker_task is not None:
                await ticker_task
            await self._drain()
            log.info(
                "worker stopped: %d succeeded, %d retried, %d dead-lettered, %d released",
                self.stats.succeeded,
                self.stats.retried,
                self.stats.dead_lettered,
                self.stats.released,
            )

    async def _consume(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            self._slot_free.clear()
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                await _wait_any(self._slot_free, self._stopping)
                continue
            try:
                deliveries = await self.broker.receive(free, self.fetch_timeout)
            except Exception as exc:  # broker down: keep trying, say so
                log.error("receive failed: %s; retrying in %.1fs", exc, backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                backoff = min(backoff * 2, _FETCH_BACKOFF_MAX)
                continue
            backoff = 0.1
            for delivery in deliveries:
                self.stats.received += 1
                if self._stopping.is_set():
                    await self._release(delivery)
                    continue
                task = asyncio.create_task(self._process(delivery))
                self._inflight.add(task)
                task.add_done_callback(self._done)

    async def _report_progress(self) -> None:
        """Log the counters every ``progress_interval`` seconds while anything changes."""
        if self.progress_interval <= 0:
            return
        last = None
        while True:
            await asyncio.sleep(self.progress_interval)
            s = self.stats
            now = (s.succeeded, s.retried, s.dead_lettered, len(self._inflight))
            if now != last:
                log.info("progress: %d succeeded, %d retried, %d dead-lettered, %d running", *now)
                last = now

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._slot_free.set()

    async def _drain(self) -> None:
        if not self._inflight:
            return
        log.info(
            "waiting up to %gs for %d running job(s)", self.shutdown_timeout, len(self._inflight)
        )
        _, pending = await asyncio.wait(self._inflight, timeout=self.shutdown_timeout)
        if pending:
            log.warning("%d job(s) still running at the deadline: handing them back", len(pending))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _release(self, delivery: Delivery) -> None:
        try:
            await self.broker.release(delivery)
            self.stats.released += 1
        except Exception as exc:
            log.error("release failed (%s): the broker redelivers after its timeout", exc)

    async def _process(self, delivery: Delivery) -> None:
        try:
            message = decode_message(delivery.body)
        except MessageDecodeError as exc:
            await self._dead_letter(delivery, f"undecodable message: {exc}", None)
            return
        spec = self.app.jobs.get(message.job_name)
        if spec is None:
            await self._dead_letter(
                delivery, f"unknown job {message.job_name!r}: not registered in this app", message
            )
            return
        if delivery.attempt > spec.max_attempts:
            # Earlier deliveries ended without a verdict: the worker died or lost the job.
            await self._dead_letter(
                delivery,
                f"delivered {delivery.attempt} times, more than max_attempts="
                f"{spec.max_attempts} (earlier attempts ended without a result)",
                message,
            )
            return
        try:
            inspect.signature(spec.handler).bind(None, **message.kwargs)
        except TypeError as exc:
            await self._dead_letter(
                delivery, f"kwargs do not match handler of {spec.name!r}: {exc}", message
            )
            return
        try:
            reason = await self._run_handler(spec, message, delivery)
        except asyncio.CancelledError:
            await asyncio.shield(self._release(delivery))
            raise
        label = f"{spec.name}[{message.id}]"
        if reason is None:
            if await self._settle(label, "ack", lambda: self.broker.ack(delivery)):
                self.stats.succeeded += 1
        elif delivery.attempt >= spec.max_attempts:
            await self._dead_letter(
                delivery, f"failed after {delivery.attempt} attempt(s): {reason}", message
            )
        else:
            delay = spec.retry_delay(delivery.attempt)
            if await self._settle(label, "retry", lambda: self.broker.retry(delivery, delay)):
                self.stats.retried += 1
                job_log.warning(
                    "%s attempt %d/%d failed: %s; retrying in %.1fs",
                    label,
                    delivery.attempt,
                    spec.max_attempts,
                    reason,
                    delay,
                )

    async def _settle(self, label: str, what: str, call: Callable[[], Awaitable[None]]) -> bool:
        """Run an ack/retry/dead-letter call, retrying it while the broker is unreachable.

        The job has run: giving up early would make the broker deliver it again. The
        calls are idempotent, so retrying is safe; past the visibility timeout the
        broker redelivers anyway, and we stop trying.
        """
        deadline = time.monotonic() + max(5.0, self.broker.visibility_timeout)
        delay = 0.1
        while True:
            try:
                await call()
                return True
            except DeliveryLostError as exc:
                log.warning("%s: %s not possible (%s)", label, what, exc)
                return False
            except Exception as exc:
                if time.monotonic() + delay > deadline:
                    log.error(
                        "%s: %s failed (%s); the broker will deliver it again", label, what, exc
                    )
                    return False
                log.warning("%s: %s failed (%s); retrying in %.1fs", label, what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _run_handler(
        self, spec: JobSpec, message: JobMessage, delivery: Delivery
    ) -> str | None:
        """Run the handler; return None on success, else the failure reason."""
        ctx = JobContext(
            job_id=message.id,
            job_name=spec.name,
            attempt=delivery.attempt,
            max_attempts=spec.max_attempts,
            scheduled_at=(
                datetime.fromtimestamp(message.scheduled_at, UTC)
                if message.scheduled_at is not None
                else None
            ),
            enqueued_at=datetime.fromtimestamp(message.enqueued_at, UTC),
            deduplication_id=message.deduplication_id,
            queue=self.broker,
            log=job_log,
        )
        heartbeat = asyncio.create_task(self._heartbeat(delivery))
        started = time.perf_counter()
        try:
            async with asyncio.timeout(spec.timeout) as deadline:
                await spec.handler(ctx, **message.kwargs)
        except TimeoutError:
            if deadline.expired():
                return f"timed out after {spec.timeout:g}s"
            return "TimeoutError raised by the handler"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            heartbeat.cancel()
        job_log.info(
            "%s[%s] succeeded in %.3fs (attempt %d)",
            spec.name,
            message.id,
            time.perf_counter() - started,
            delivery.attempt,
        )
        return None

    async def _heartbeat(self, delivery: Delivery) -> None:
        interval = max(0.05, self.broker.visibility_timeout / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.broker.extend(delivery)
            except Exception as exc:
                log.warning("could not extend a running job's reservation: %s", exc)

    async def _dead_letter(
        self, delivery: Delivery, reason: str, message: JobMessage | None
    ) -> None:
        label = f"{message.job_name}[{message.id}]" if message else "message"
        if await self._settle(
            label, "dead-lettering", lambda: self.broker.dead_letter(delivery, reason)
        ):
            self.stats.dead_lettered += 1
            job_log.error("%s dead-lettered: %s", label, reason)


async def _wait_any(*events: asyncio.Event) -> None:
    tasks = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
