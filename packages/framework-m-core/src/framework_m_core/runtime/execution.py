"""One delivery from start to settle: decode, run the handler, then ack, retry or dead-letter.

Whatever a delivery holds, :meth:`Execution.run` settles it and raises
nothing but ``CancelledError`` (after releasing the delivery): the worker's
task tree relies on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from ..app import App
from ..control import keys, leases
from ..control.debounce import superseded_by
from ..control.replicas import new_replica_id
from ..control.settled import Outcome
from ..control.shared import shared
from ..control.unique import unique_key
from ..errors import BrokerError, DeliveryLostError, MessageDecodeError
from ..jobs import JobContext, JobSpec, Snooze
from ..observability import tracing
from ..observability.logs import JobLogAdapter, job_logger
from ..observability.observer import UNKNOWN_JOB, Observer
from ..observability.tracebacks import bounded_traceback
from ..ports.capabilities import Capability
from ..ports.messages import (
    TRIGGER_PREFIX,
    JobMessage,
    caught_up,
    decode_message,
    schedule_of,
    snoozed,
    snoozes_of,
)
from ..ports.protocols import BrokerProtocol
from ..ports.records import Delivery
from ..ports.statuses import JobState, JobStatus, ResultError, encode_result
from .activity import Activity
from .cancels import Cancellation, CancelWatch
from .deadlines import Deadlines
from .fences import Fence
from .heartbeats import Heartbeats
from .places import KeptPlaces
from .rates import Asked, Rates, Start
from .run_leases import RunLeases
from .statuses import RunningStatuses, StatusWriter

log = logging.getLogger("framework_m.worker")
job_log = logging.getLogger("framework_m.job")

# Longest reason stored with a dead letter: brokers bound header and frame sizes.
MAX_REASON = 2000


@dataclass(slots=True)
class WorkerStats:
    """Counters of one worker."""

    received: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    expired: int = 0  # ticks stored after their not_after (past grace): acked, not run
    skipped: int = 0  # slots whose schedule's previous run was still running: acked, not run
    cancelled: int = 0  # jobs cancelled by request, before or while they ran: acked
    # redeliveries of jobs an earlier attempt finished, its ack lost: acked, not run
    already_finished: int = 0
    snoozed: int = 0  # runs that asked to run again later (Snooze): stored again, acked
    # runs whose delivery the broker took back (a freeze past its reservation): stopped
    # or never started, no status written, not settled (:mod:`.fences`)
    lost: int = 0
    # runs waiting now for their schedule's run, a limit's place or, delivered again,
    # their own run going on in this process
    waiting: int = 0


# A waiting run tries again for its lease after a random pause in this range (seconds):
# random, so that of the runs waiting on every replica none is always the slowest.
_WAIT_POLL = (0.02, 0.2)


# Released jobs a worker's stop names at most; the rest are counted ("and N more").
RELEASED_NAMED = 5


def _name_and_id(delivery: Delivery) -> str:
    """``name[id]`` of the job ``delivery`` carries, as the worker's logs name a job."""
    try:
        message = decode_message(delivery.body)
    except MessageDecodeError:
        return "an undecodable message"
    return f"{message.job_name}[{message.id}]"


def released_jobs(named: list[str], count: int) -> str:
    """`` (a[1], b[2] and 3 more)``: the released jobs ``named``, of ``count`` in all;
    "" when none was."""
    if count <= 0 or not named:
        return ""
    more = count - len(named)
    return f" ({', '.join(named)}{f' and {more} more' if more > 0 else ''})"


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: str
    error: BaseException | None = None  # the handler's exception, for its traceback
    snooze: float | None = None  # seconds the handler asked to be run again in (Snooze)


_CANCELLED = _Failure("cancelled by request")  # not a failure: acked, never retried
_LOST = _Failure("lost its delivery")  # another holder owns the job: nothing settled


def _stopped(cancellation: Cancellation | None, fence: Fence | None) -> _Failure | None:
    """Why a run must stop now: its fence lost, or a cancel; None: it goes on."""
    if fence is not None and fence.lost is not None:
        return _LOST
    if cancellation is not None and cancellation.requested:
        return _CANCELLED
    return None


def _hook(
    cancellation: Cancellation | None, fence: Fence | None, stop: Callable[[], None] | None
) -> None:
    if cancellation is not None:
        cancellation.on_cancel(stop)
    if fence is not None:
        fence.on_lost(stop)


def _schedule_of(spec: JobSpec, message: JobMessage) -> str | None:
    """Whose overlap policy a run obeys: a runtime schedule's (``@{id}``, its runs
    overlap only each other), else the job's own schedule, if it has one."""
    schedule = schedule_of(message.deduplication_id)
    if schedule is not None and schedule.startswith("@"):
        return schedule
    return spec.name if spec.schedule is not None else None


# A worker's clock may be ahead of the ticker's that set a tick's deadline by this much.
DELIVERY_SKEW = 5.0


def _late(message: JobMessage, delivery: Delivery) -> float | None:
    """How many seconds past its ``not_after`` ``message`` was stored, if it was: by the
    broker's word (``stored_at``), or, where it cannot say, by the time it was first
    delivered (``stored_by``) less a clock skew."""
    if message.not_after is None:
        return None
    if delivery.stored_at is not None:
        late = delivery.stored_at - message.not_after
    elif delivery.stored_by is not None:
        late = delivery.stored_by - DELIVERY_SKEW - message.not_after
    else:
        return None
    return late if late > 0 else None


def _over_snoozes(spec: JobSpec, message: JobMessage, seconds: float) -> _Failure | None:
    """The failure a snooze counts as once the job snoozed its ``max_snoozes`` times."""
    if snoozes_of(message) < spec.max_snoozes:
        return None
    return _Failure(
        f"snoozed {snoozes_of(message)} times, its max_snoozes, and asked for {seconds:g}s more"
    )


def bounded(reason: str) -> str:
    """``reason`` cut to :data:`MAX_REASON` characters, saying so."""
    if len(reason) <= MAX_REASON:
        return reason
    return reason[: MAX_REASON - 20] + f"... ({len(reason)} chars)"


def _job_log(message: JobMessage, delivery: Delivery) -> JobLogAdapter:
    return job_logger(job_log, message.job_name, message.id, delivery.attempt, message.scheduled_at)


def _trace(error: BaseException | None) -> str | None:
    """A handler's traceback, for the log and the job's status; bounded, since the
    exception text can be any size."""
    return None if error is None else bounded_traceback(error)


class Execution:
    """Runs deliveries of ``app``'s jobs on ``broker``; counts into ``stats``."""

    def __init__(
        self,
        app: App,
        broker: BrokerProtocol,
        stats: WorkerStats,
        observer: Observer | None = None,
        threads: Executor | None = None,
    ) -> None:
        self.app = app
        self.threads = threads  # where plain ``def`` handlers run (None: asyncio's default)
        self.broker = broker
        self.stats = stats
        self.observer = observer or Observer()
        #: Whether runs take their leases (the broker keeps them); else they run at once.
        self.leases = Capability.STORE in broker.capabilities
        #: Called with +1/-1 as runs start and stop waiting (the worker's capacity).
        self.on_waiting: Callable[[int], None] = lambda delta: None
        self.statuses = StatusWriter(broker, self.observer)
        self.running_statuses = RunningStatuses(self.statuses)
        self.deadlines = Deadlines()
        #: The runs going on and the latest settled, for lists by state and histories.
        self.activity = Activity(broker, new_replica_id())
        self.cancels = CancelWatch(broker, self.observer)
        #: Places of limits kept between this worker's runs of a key (:mod:`.places`).
        self.places = KeptPlaces(broker)
        self.heartbeats = Heartbeats(broker, self.places)
        #: Starts spent under rate limits, one queue per key (:mod:`.rates`).
        self.rates = Rates(broker)
        self._cancellations: dict[str, Cancellation] = {}  # by job id, of runs going on
        self._fences: dict[int, Fence] = {}  # by id() of the deliveries being processed
        broker.watch_losses(self._lost)
        self._here: dict[str, asyncio.Event] = {}  # by job id, set when its delivery ends
        #: The first :data:`RELEASED_NAMED` jobs released, as ``name[id]``, for the log.
        self.released: list[str] = []

    def _job_name(self, name: str | None) -> str:
        """``name`` if it is a registered job, else ``unknown`` (labels stay bounded)."""
        return name if name is not None and name in self.app.jobs else UNKNOWN_JOB

    def _named_in(self, delivery: Delivery) -> str:
        """The registered job a delivery names, or ``unknown``."""
        try:
            return self._job_name(decode_message(delivery.body).job_name)
        except MessageDecodeError:
            return UNKNOWN_JOB

    async def run(self, delivery: Delivery) -> None:
        try:
            await self._run(delivery)
        except asyncio.CancelledError:
            await asyncio.shield(self.release(delivery))
            raise
        except Exception:  # a bug must not cost the worker its task tree, or the job
            log.exception("processing a delivery failed; releasing it")
            await self.release(delivery)

    async def release(self, delivery: Delivery) -> None:
        """Release ``delivery``; a failure is logged (the broker redelivers it anyway)."""
        try:
            await self.broker.release(delivery)
            self.stats.released += 1
            if len(self.released) < RELEASED_NAMED:
                self.released.append(_name_and_id(delivery))
            self.observer.job_finished(self._named_in(delivery), "released", None)
        except Exception as exc:
            log.error("release failed (%s): the broker redelivers after its timeout", exc)

    async def _run(self, delivery: Delivery) -> None:
        try:
            message = decode_message(delivery.body)
        except MessageDecodeError as exc:
            await self._dead_letter(delivery, f"undecodable message: {exc}", None)
            return
        task = asyncio.current_task()
        if task is not None:  # named for the stall watchdog's warning
            task.set_name(f"{message.job_name}[{message.id}]")
        if (late := _late(message, delivery)) is not None:
            await self._expire(delivery, message, late)
            return
        spec = self.app.jobs.get(message.job_name)
        if spec is None:
            reason = f"unknown job {message.job_name!r}: not registered in this app"
            await self._dead_letter(delivery, reason, message)
            return
        ongoing = self._here.get(message.id)
        if ongoing is not None:
            # Delivered again while this process still runs it (its reservation lapsed,
            # or a partition made the broker take it back): its leases are this run's
            # too, so wait for it; its status then says whether this one must run.
            log.info("%s[%s] delivered again while it runs here; waiting", spec.name, message.id)
            beat = self.heartbeats.start(delivery)
            try:
                with self._waiting(spec):
                    await ongoing.wait()
            finally:
                self.heartbeats.stop(beat)
        here = self._here[message.id] = asyncio.Event()
        ttl = leases.lease_ttl(self.broker.visibility_timeout)
        self._fences[id(delivery)] = Fence(ttl, delivery.reserved_since, delivery.handle)
        try:
            await self._deliver(spec, message, delivery)
        finally:
            del self._fences[id(delivery)]
            if self._here.get(message.id) is here:
                del self._here[message.id]
            here.set()

    async def _deliver(self, spec: JobSpec, message: JobMessage, delivery: Delivery) -> None:
        """Settle ``delivery`` of one of the app's jobs: unrun, cancelled, or run."""
        if await self._settled_unrun(spec, message, delivery):
            await self._free_unique(spec, message)
            return
        if spec.debounce is not None and self.leases:
            later = await superseded_by(self.broker, spec, message)
            if later is not None:
                await self._debounced(delivery, message, spec, later)
                return
        if self.cancels.on and self.statuses.keep(spec, message)[0] > 0:
            cancellation = Cancellation()
            if not await self.cancels.start(message.id, cancellation, message.enqueued_at):
                await self._cancel(delivery, message, spec)
                await self._free_unique(spec, message)
                return
            self._cancellations[message.id] = cancellation
            try:
                await self._admitted(spec, message, delivery)
            finally:
                self._cancellations.pop(message.id, None)
                self.cancels.end(message.id)
        else:
            await self._admitted(spec, message, delivery)

    async def _settled_unrun(self, spec: JobSpec, message: JobMessage, delivery: Delivery) -> bool:
        """Settle ``delivery`` without running it, and say so, when it must not run:
        out of attempts, or kwargs that do not fit."""
        if delivery.attempt > spec.max_attempts:
            # Earlier deliveries ended unsettled: the worker died or lost the job.
            reason = (
                f"delivered {delivery.attempt} times, more than max_attempts="
                f"{spec.max_attempts} (earlier attempts ended without a result)"
            )
            await self._dead_letter(delivery, reason, message)
            return True
        problem = spec.kwargs_problem(message.kwargs)
        if problem is not None:
            reason = f"kwargs do not match handler of {spec.name!r}: {problem}"
            await self._dead_letter(delivery, reason, message)
            return True
        return False

    async def _admitted(self, spec: JobSpec, message: JobMessage, delivery: Delivery) -> None:
        """Run ``delivery`` once its overlap policy and limits let it, unless an earlier
        attempt finished its job (read after its cancel mark: a job cancelled while it
        waited to be retried counts as cancelled)."""
        if delivery.attempt > 1 and self.statuses.on:
            done = await self.statuses.finished_before(spec, message)
            if done is not None:
                await self._finished_before(delivery, message, done)
                return
        schedule = _schedule_of(spec, message)
        kept = (
            spec.concurrency is not None
            or spec.rate is not None
            or spec.unique is not False
            or (schedule is not None and spec.overlap != "allow")
        )
        if not (kept and self.leases):
            if await self._still_held(spec, message, delivery, "before it started"):
                await self._traced(spec, message, delivery, None)
            return
        holder = leases.holder_of(message.id)
        limit = None  # the key of the job's limit, whose place is kept after the run
        if spec.concurrency is not None:
            limit = keys.concurrency(spec.name, spec.concurrency_key, message.kwargs)
        unique = unique_key(spec, message.kwargs) if spec.unique is not False else None
        run = RunLeases(self.places, self._release, limit, unique)
        ttl = leases.lease_ttl(self.broker.visibility_timeout)
        try:
            if unique is not None and await self._acquire(unique, message.id, ttl, 1):
                run.held.append((unique, message.id))
            if await self._admit(spec, schedule, message, delivery, holder, limit, run.held):
                if await self._rated(spec, message, delivery, run.held):
                    await self._traced(spec, message, delivery, run)
            else:
                self._if_lost(spec, message, delivery, "while it waited")
        finally:
            await run.left()
            if unique is not None and (unique, message.id) in run.held:
                await self._unique_settled(spec, unique, message.id, run.final)

    async def _unique_settled(
        self, spec: JobSpec, key: str, job_id: str, final: bool | None
    ) -> None:
        """Give the job's unique key back when it settled for good; hold it for
        ``unique_for`` when it runs again (a retry, a snooze); leave it when the run was
        lost (whoever has the job holds it)."""
        if final is None:
            return
        if final:
            await self._release(key, job_id)
            return
        try:
            await shared(self.broker).acquire_lease(key, job_id, spec.unique_for)
        except BrokerError as exc:
            log.warning("holding unique key %s failed (%s); it lapses by itself", key, exc)

    async def _free_unique(self, spec: JobSpec, message: JobMessage) -> None:
        """Give back the unique key of a job settled without a run (cancelled, not
        runnable): taken again under this worker's name first, then released."""
        if spec.unique is False or not self.leases:
            return
        key, ttl = (
            unique_key(spec, message.kwargs),
            leases.lease_ttl(self.broker.visibility_timeout),
        )
        try:
            if await shared(self.broker).acquire_lease(key, message.id, ttl):
                await shared(self.broker).release_lease(key, message.id)
        except BrokerError as exc:
            log.warning("freeing unique key %s failed (%s); it lapses by itself", key, exc)

    def _lost(self, handles: Sequence[object], why: str) -> None:
        """The broker says deliveries it handed out are no longer this consumer's: the
        runs of those being processed here are stopped (:mod:`.fences`)."""
        lost = {id(h) for h in handles}
        fences = [f for f in self._fences.values() if f.handle is not None and id(f.handle) in lost]
        if fences:
            log.warning("%d run(s) lost their deliveries: %s; stopping them", len(fences), why)
        for fence in fences:
            fence.lose(why)

    async def _still_held(
        self, spec: JobSpec, message: JobMessage, delivery: Delivery, when: str
    ) -> bool:
        """Whether the run still holds ``delivery`` (asked only when its reservation may
        have lapsed, :mod:`.fences`); a lost one is counted and logged."""
        fence = self._fences.get(id(delivery))
        if fence is None or await fence.holds(self.broker, delivery):
            return True
        self._if_lost(spec, message, delivery, when)
        return False

    def _if_lost(self, spec: JobSpec, message: JobMessage, delivery: Delivery, when: str) -> None:
        """Count and log the run as lost, if its fence says so: nothing more is done
        with it here (whoever holds the job now runs it and keeps its status)."""
        fence = self._fences.get(id(delivery))
        if fence is None or fence.lost is None:
            return
        self.stats.lost += 1
        self.observer.job_finished(spec.name, "lost", None)
        _job_log(message, delivery).warning(
            "%s[%s] lost %s: %s; not settled here, and its status is left to the "
            "replica that has it now (was this process frozen or its event loop blocked?)",
            spec.name,
            message.id,
            when,
            fence.lost,
        )

    async def _traced(
        self, spec: JobSpec, message: JobMessage, delivery: Delivery, run: RunLeases | None
    ) -> None:
        if tracing.active():
            with tracing.processing(message, delivery.attempt, self.broker.display_url) as span:
                await self._attempt(spec, message, delivery, span, run)
        else:
            await self._attempt(spec, message, delivery, None, run)

    # -- leases: overlap policies and limits ----------------------------------------------

    async def _admit(
        self,
        spec: JobSpec,
        schedule: str | None,
        message: JobMessage,
        delivery: Delivery,
        holder: str,
        limit: str | None,
        held: list[tuple[str, str]],
    ) -> bool:
        """Take the run's leases into ``held`` (key and holder: a place kept from an
        earlier run keeps that run's name), waiting where its policy says; False when
        the delivery was settled as skipped instead, or lost while it waited."""
        ttl = leases.lease_ttl(self.broker.visibility_timeout)
        if schedule is not None and spec.overlap != "allow":
            key = keys.overlap(schedule)
            if not await self._overlap(spec, schedule, message, delivery, holder, ttl):
                return False
            held.append((key, holder))
        if limit is not None and spec.concurrency is not None:
            kept = self.places.take(limit, ttl)
            if kept is not None:
                held.append((limit, kept))
                return True
            sent = time.monotonic()
            if not await self._acquire(limit, holder, ttl, spec.concurrency):
                took = await self._wait(spec, delivery, limit, holder, ttl, spec.concurrency, held)
                if took is None:
                    return False  # lost meanwhile
                sent = took
            self.places.written(limit, holder, sent)
            held.append((limit, holder))
        return True

    async def _overlap(
        self,
        spec: JobSpec,
        schedule: str,
        message: JobMessage,
        delivery: Delivery,
        holder: str,
        ttl: float,
    ) -> bool:
        """Take the schedule's overlap lease as its policy says; False when the delivery
        was settled as skipped instead, or lost while it waited."""
        key = keys.overlap(schedule)
        if await self._acquire(key, holder, ttl, 1):
            return True
        # a slot on time skips or buffers; one caught up late waits its turn
        ticked = message.scheduled_at is not None and not caught_up(message)
        if ticked and spec.overlap == "skip":
            await self._skip(delivery, message, key)
            return False
        buffer = keys.overlap_wait(schedule)
        if ticked and not await self._acquire(buffer, holder, ttl, 1):
            await self._skip(delivery, message, key)  # one waits already
            return False
        # buffer_one's waiting run; or a run enqueued by hand, which waits its turn
        try:
            waiting = [(buffer, holder)] * ticked
            return await self._wait(spec, delivery, key, holder, ttl, 1, waiting) is not None
        finally:
            if ticked:
                await asyncio.shield(self._release(buffer, holder))

    async def _acquire(self, key: str, holder: str, ttl: float, limit: int) -> bool:
        """acquire_lease, tried again while the broker is out of reach (a False from a
        broker error would skip a slot); raises once the reservation would be gone."""
        deadline = time.monotonic() + max(5.0, self.broker.visibility_timeout)
        delay = 0.1
        while True:
            try:
                return await shared(self.broker).acquire_lease(key, holder, ttl, limit=limit)
            except BrokerError as exc:
                self.observer.broker_error("lease")
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("lease %s: %s; trying again in %.1fs", key, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _wait(
        self,
        spec: JobSpec,
        delivery: Delivery,
        key: str,
        holder: str,
        ttl: float,
        limit: int,
        also_held: Sequence[tuple[str, str]],
    ) -> float | None:
        """Wait, the delivery and ``also_held`` kept alive, until a place under ``key``
        is this run's; when (monotonic) the claim that took it was sent, or None once
        the delivery is lost (:mod:`.fences`). Waiting uses no attempt and no place of
        the worker's."""
        fence = self._fences.get(id(delivery))
        beat = self.heartbeats.start(delivery, also_held, fence)
        log.debug("%s waits for a place under %s", holder, key)
        try:
            with self._waiting(spec):
                while fence is None or fence.lost is None:
                    await asyncio.sleep(random.uniform(*_WAIT_POLL))
                    sent = time.monotonic()
                    if await self._acquire(key, holder, ttl, limit):
                        return sent
                return None
        finally:
            self.heartbeats.stop(beat)

    async def _rated(
        self,
        spec: JobSpec,
        message: JobMessage,
        delivery: Delivery,
        held: Sequence[tuple[str, str]],
    ) -> bool:
        """Whether the handler is to be called right away: the run still holds its
        delivery and, under a rate, its start is logged (waiting for room); False once
        the delivery was lost."""
        if spec.rate is None:
            return await self._still_held(spec, message, delivery, "before it started")
        key = keys.rate(spec.name, spec.rate_key, message.kwargs)
        start = await self._start(spec, delivery, self.rates.ask(key, spec.rate), held)
        while start is not None:
            if not await self._still_held(spec, message, delivery, "before it started"):
                return False
            if self.rates.in_time(start):
                return True
            start = await self._start(spec, delivery, self.rates.renewing(start), held)
        self._if_lost(spec, message, delivery, "while it waited")
        return False

    async def _start(
        self,
        spec: JobSpec,
        delivery: Delivery,
        asked: Asked,
        held: Sequence[tuple[str, str]],
    ) -> Start | None:
        """The start ``asked`` for, the delivery and ``held`` kept alive meanwhile (and
        the run counted as waiting once the log was found full); None once the delivery
        is lost (:mod:`.fences`)."""
        fence = self._fences.get(id(delivery))
        alive = self.heartbeats.start(delivery, held, fence)
        if fence is not None:
            fence.on_lost(asked.done.cancel)
        try:
            await asked.seen.wait()
            if not asked.done.done():
                self.observer.rate_waiting(spec.name, 1)
                try:
                    with self._waiting(spec):
                        await asyncio.shield(asked.done)
                finally:
                    self.observer.rate_waiting(spec.name, -1)
            return asked.done.result()
        except asyncio.CancelledError:
            if asked.done.cancelled() and fence is not None and fence.lost is not None:
                current = asyncio.current_task()
                if current is None or not current.cancelling():
                    return None
            asked.done.cancel()
            raise
        finally:
            if fence is not None:
                fence.on_lost(None)
            self.heartbeats.stop(alive)

    @contextlib.contextmanager
    def _waiting(self, spec: JobSpec) -> Iterator[None]:
        """Count a delivery as waiting, not running, while the block runs: it holds no
        place of the worker's and shows in the waiting gauge."""
        self.stats.waiting += 1
        self.on_waiting(1)
        self.observer.waiting(spec.name, 1)
        try:
            yield
        finally:
            self.stats.waiting -= 1
            self.on_waiting(-1)
            self.observer.waiting(spec.name, -1)

    async def _skip(self, delivery: Delivery, message: JobMessage, key: str) -> None:
        try:
            running = ", ".join(await shared(self.broker).lease_holders(key)) or "a run just ending"
        except BrokerError as exc:
            running = f"unknown ({exc})"
        why = f"skipped: the previous run of the schedule was still running ({running})"
        spec = self.app.jobs.get(message.job_name)
        await self.statuses.finished(spec, message, JobState.CANCELLED, delivery.attempt, error=why)
        await self._acked_unrun(
            delivery,
            message,
            "skipped",
            logging.INFO,
            "skipped: slot %s came while the previous run was still running (%s); overlap='skip'",
            message.scheduled_at,
            running,
            noted=f"the previous run was still running ({running})",
        )

    async def _release(self, key: str, holder: str) -> None:
        try:
            await shared(self.broker).release_lease(key, holder)
        except Exception as exc:  # it expires with the reservation time
            log.warning("releasing lease %s failed (%s); it expires by itself", key, exc)

    async def _attempt(
        self,
        spec: JobSpec,
        message: JobMessage,
        delivery: Delivery,
        span: object,
        run: RunLeases | None = None,
    ) -> None:
        """Run the handler, then keep its status and settle the delivery by its result
        (the run's leases given back beside them)."""
        started, started_at = time.perf_counter(), time.time()
        fence = self._fences.get(id(delivery))
        noting = self.running_statuses.start(spec, message, delivery.attempt, fence)
        self.activity.started(id(delivery), message, delivery.attempt)
        try:
            held = () if run is None else run.held
            failure, result_json = await self._run_handler(spec, message, delivery, held)
        finally:
            self.activity.stopped(id(delivery))
            if run is not None:
                run.leave(keep=fence is None or fence.fresh())
            await self.running_statuses.done(noting)  # a running status begun lands first
        duration = time.perf_counter() - started
        final = await self._conclude(
            spec, message, delivery, span, failure, result_json, duration, started_at
        )
        if run is not None:
            run.final = final

    async def _conclude(
        self,
        spec: JobSpec,
        message: JobMessage,
        delivery: Delivery,
        span: object,
        failure: _Failure | None,
        result_json: str | None,
        duration: float,
        started_at: float,
    ) -> bool | None:
        """Keep the attempt's status and settle its delivery by its result: True when the
        job is settled for good, False when it runs again, None when the run was lost."""
        label = f"{spec.name}[{message.id}]"
        fence = self._fences.get(id(delivery))
        if failure is not None and failure.snooze is not None:
            over = _over_snoozes(spec, message, failure.snooze)
            if over is None:
                return await self._snooze(spec, message, delivery, span, failure.snooze, duration)
            failure = over
        if not await self._still_held(spec, message, delivery, "while it ran"):
            tracing.finished(span, "lost", None, fence.lost if fence else None)
            return None
        if failure is _CANCELLED:
            tracing.finished(span, "cancelled", None, None)
            await self._cancel(delivery, message, spec, duration, started_at)
            return True
        if failure is None:
            tracing.finished(span, "succeeded", None, None)
            await self.statuses.finished(
                spec,
                message,
                JobState.SUCCEEDED,
                delivery.attempt,
                result_json=result_json,
                started_at=started_at,
            )
            if await self._settle(label, "ack", lambda: self.broker.ack(delivery)):
                self._ended(message, delivery, "succeeded", started_at)
                self.stats.succeeded += 1
                self.observer.job_finished(spec.name, "succeeded", duration)
            return True
        if delivery.attempt >= spec.max_attempts:
            reason = f"failed after {delivery.attempt} attempt(s): {failure.reason}"
            tracing.finished(span, "dead_lettered", failure.error, reason)
            await self._dead_letter(
                delivery, reason, message, failure.error, duration, spec, started_at
            )
            return True
        tracing.finished(span, "retried", failure.error, failure.reason)
        delay = spec.retry_delay(delivery.attempt)
        trace = _trace(failure.error)
        await self.statuses.retrying(spec, message, delivery.attempt, failure.reason, delay, trace)
        if await self._settle(label, "retry", lambda: self.broker.retry(delivery, delay)):
            self._ended(message, delivery, "retried", started_at, failure.reason)
            self.stats.retried += 1
            self.observer.job_finished(spec.name, "retried", duration)
            _job_log(message, delivery).warning(
                "%s attempt %d/%d failed: %s; retrying in %.1fs%s",
                label,
                delivery.attempt,
                spec.max_attempts,
                bounded(failure.reason),
                delay,
                "" if trace is None else "\n" + trace,
            )
        return False

    async def _snooze(
        self,
        spec: JobSpec,
        message: JobMessage,
        delivery: Delivery,
        span: object,
        seconds: float,
        duration: float,
    ) -> bool | None:
        """Store the job again, due in ``seconds``, and ack this delivery: the next run
        is the same job (its id) with no attempt used (:class:`~..jobs.Snooze`). False
        (it runs again), or None when the run was lost."""
        if not await self._still_held(spec, message, delivery, "while it ran (snoozing)"):
            fence = self._fences.get(id(delivery))
            tracing.finished(span, "lost", None, fence.lost if fence else None)
            return None
        tracing.finished(span, "snoozed", None, None)
        label = f"{spec.name}[{message.id}]"
        again = snoozed(message, seconds)
        count = snoozes_of(again)
        why = f"snoozed for {seconds:g}s ({count} of max_snoozes={spec.max_snoozes})"
        await self.broker.publish(again)
        await self.statuses.retrying(spec, message, delivery.attempt, why, seconds)
        if await self._settle(label, "ack", lambda: self.broker.ack(delivery)):
            self._ended(message, delivery, "snoozed", None, why)
            self.stats.snoozed += 1
            self.observer.job_finished(spec.name, "snoozed", duration)
            _job_log(message, delivery).info("%s %s", label, why)
        return False

    def _ended(
        self,
        message: JobMessage,
        delivery: Delivery,
        outcome: Outcome,
        started_at: float | None = None,
        error: str | None = None,
    ) -> None:
        """A delivery of ``message`` was settled as ``outcome``: kept in the lists by
        state, and in its schedule's history when it is a schedule's run."""
        self.activity.settled(message, delivery.attempt, outcome, started_at, error)

    async def _cancel(
        self,
        delivery: Delivery,
        message: JobMessage,
        spec: JobSpec,
        duration: float | None = None,
        started_at: float | None = None,
    ) -> None:
        """Settle a delivery of a cancelled job: its status says so, it is acked."""
        label = f"{spec.name}[{message.id}]"
        await self.statuses.finished(
            spec,
            message,
            JobState.CANCELLED,
            delivery.attempt,
            error="cancelled by request",
            started_at=started_at,
        )
        if await self._settle(label, "ack", lambda: self.broker.ack(delivery)):
            self._ended(message, delivery, "cancelled", started_at, "cancelled by request")
            self.stats.cancelled += 1
            self.observer.job_finished(spec.name, "cancelled", duration)
            _job_log(message, delivery).info(
                "%s cancelled by request %s", label, "while it ran" if duration else "before it ran"
            )

    async def _debounced(
        self, delivery: Delivery, message: JobMessage, spec: JobSpec, later: str
    ) -> None:
        """Settle a debounced job that a later enqueue replaced: acked, not run."""
        why = f"debounced: a later enqueue ({later}) runs instead"
        await self.statuses.finished(spec, message, JobState.CANCELLED, delivery.attempt, error=why)
        await self._acked_unrun(delivery, message, "skipped", logging.DEBUG, "%s", why, noted=why)

    async def _expire(self, delivery: Delivery, message: JobMessage, late: float) -> None:
        why = "expired: the tick was stored after its slot's grace"
        spec = self.app.jobs.get(message.job_name)
        await self.statuses.finished(spec, message, JobState.CANCELLED, delivery.attempt, error=why)
        await self._acked_unrun(
            delivery,
            message,
            "expired",
            logging.WARNING,
            "expired: %s %.1fs after its deadline (slot %s); the tick was "
            "enqueued later than grace allows, not run",
            "stored"
            if delivery.stored_at is not None
            else "first delivered (the broker cannot say when it stored it)",
            late,
            message.scheduled_at,
            noted=f"{why} ({late:.1f}s late)",
        )

    async def _finished_before(
        self, delivery: Delivery, message: JobMessage, status: JobStatus
    ) -> None:
        """A redelivery of a job an earlier attempt finished: that attempt's ack never
        reached the broker (a lost connection, a cluster partition). Acked, not run."""
        await self._acked_unrun(
            delivery,
            message,
            "already_finished",
            logging.INFO,
            "delivered again (attempt %d) after attempt %d %s; its ack was lost, "
            "so it is acked, not run again",
            delivery.attempt,
            status.attempts,
            status.state,
        )

    async def _acked_unrun(
        self,
        delivery: Delivery,
        message: JobMessage,
        outcome: Literal["skipped", "expired", "already_finished"],
        level: int,
        text: str,
        *args: object,
        noted: str | None = None,
    ) -> None:
        """Ack ``delivery`` without running it; once acked, count it as ``outcome``
        (a counter of :class:`WorkerStats` too) and log ``text % args`` at ``level``,
        after the job's ``name[id]``; a skip or an expiry goes into its schedule's
        history with ``noted``."""
        label = f"{message.job_name}[{message.id}]"
        if await self._settle(label, "ack", lambda: self.broker.ack(delivery)):
            if outcome != "already_finished":
                self._ended(message, delivery, outcome, error=noted)
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
            self.observer.job_finished(self._job_name(message.job_name), outcome, None)
            _job_log(message, delivery).log(level, "%s " + text, label, *args)

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
                self.observer.broker_error("settle")
                if time.monotonic() + delay > deadline:
                    log.error(
                        "%s: %s failed (%s); the broker will deliver it again", label, what, exc
                    )
                    return False
                log.warning("%s: %s failed (%s); retrying in %.1fs", label, what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _run_handler(
        self,
        spec: JobSpec,
        message: JobMessage,
        delivery: Delivery,
        held: Sequence[tuple[str, str]] = (),
    ) -> tuple[_Failure | None, str | None]:
        """Run the handler; return what went wrong (None on success) and its return value
        as JSON when it is kept (a value that cannot be kept fails the attempt)."""
        fence = self._fences.get(id(delivery))
        beat = self.heartbeats.start(delivery, held, fence)
        cancellation = self._cancellations.get(message.id)
        started = time.perf_counter()
        self.observer.job_started(spec.name, message.enqueued_at, message.scheduled_at)
        dedup = message.deduplication_id
        if delivery.attempt == 1 and dedup is not None and dedup.startswith(TRIGGER_PREFIX):
            self.observer.job_triggered(spec.name)
            log.info("%s: triggered run %s starts", spec.name, message.id)
        self.observer.running(1)
        logger = _job_log(message, delivery)
        try:
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
                broker=self.broker,
                log=logger,
                state=self.app.state,
                cancel_flag=lambda: _stopped(cancellation, fence) is not None,
            )
            limit = None if spec.timeout is None else self.deadlines.start(spec.timeout)
            try:
                returned = await self._call(spec, ctx, message, cancellation, fence)
            except asyncio.CancelledError:
                if limit is not None and self.deadlines.stop(limit):
                    return _Failure(f"timed out after {spec.timeout:g}s"), None
                raise
            finally:
                if limit is not None:
                    self.deadlines.stop(limit)
            if returned is _CANCELLED or returned is _LOST:
                return returned, None
            result_json = encode_result(returned) if self.statuses.keep(spec, message)[1] else None
        except TimeoutError as exc:
            return _Failure("TimeoutError raised by the handler", exc), None
        except ResultError as exc:
            return _Failure(f"ResultError: {exc}"), None
        except Snooze as exc:
            return _Failure(str(exc), None, exc.seconds), None
        except Exception as exc:
            return _Failure(f"{type(exc).__name__}: {exc}", exc), None
        finally:
            self.heartbeats.stop(beat)
            self.observer.running(-1)
        logger.info(
            "%s[%s] succeeded in %.3fs (attempt %d)",
            spec.name,
            message.id,
            time.perf_counter() - started,
            delivery.attempt,
        )
        return None, result_json

    async def _call(
        self,
        spec: JobSpec,
        ctx: JobContext,
        message: JobMessage,
        cancellation: Cancellation | None,
        fence: Fence | None,
    ) -> object:
        """The handler's return value; :data:`_CANCELLED` when a cancel stopped it,
        :data:`_LOST` when its fence was lost (the broker took the delivery back)."""
        if spec.blocking:  # in the thread pool, with this task's context (a span)
            call = functools.partial(spec.handler, ctx, **message.kwargs)
            run = contextvars.copy_context().run
            returned = await asyncio.get_running_loop().run_in_executor(self.threads, run, call)
            why = _stopped(cancellation, fence)
            return returned if why is None else why
        if cancellation is None and fence is None:
            return await spec.handler(ctx, **message.kwargs)
        if (why := _stopped(cancellation, fence)) is not None:
            return why
        # A cancel or a lost fence cancels the run's own task, once, and only while the
        # handler runs: the callbacks are set and cleared with no await outside it between.
        task = asyncio.current_task()
        assert task is not None
        fired = False

        def stop() -> None:
            nonlocal fired
            if not fired:
                fired = True
                task.cancel()

        _hook(cancellation, fence, stop)
        try:
            returned = await spec.handler(ctx, **message.kwargs)
        except asyncio.CancelledError:
            why = _stopped(cancellation, fence)
            if why is not None and fired and task.uncancel() == 0:
                return why  # this stop alone, not the worker's
            raise
        finally:
            _hook(cancellation, fence, None)
        if fired:  # the handler swallowed the cancel: drop its count
            task.uncancel()
        return returned

    async def _dead_letter(
        self,
        delivery: Delivery,
        reason: str,
        message: JobMessage | None,
        error: BaseException | None = None,
        duration: float | None = None,
        spec: JobSpec | None = None,
        started_at: float | None = None,
    ) -> None:
        label = f"{message.job_name}[{message.id}]" if message else "message"
        reason = bounded(reason)
        trace = _trace(error)
        if message is not None:
            spec = spec if spec is not None else self.app.jobs.get(message.job_name)
            await self.statuses.finished(
                spec,
                message,
                JobState.FAILED,
                delivery.attempt,
                error=reason,
                started_at=started_at,
                traceback=trace,
            )
        if await self._settle(
            label, "dead-lettering", lambda: self.broker.dead_letter(delivery, reason)
        ):
            if message is not None:
                self._ended(message, delivery, "dead_lettered", started_at, reason)
            self.stats.dead_lettered += 1
            name = self._job_name(message.job_name if message else None)
            self.observer.job_finished(name, "dead_lettered", duration)
            logger = job_log if message is None else _job_log(message, delivery)
            logger.error(
                "%s dead-lettered: %s%s", label, reason, "" if trace is None else "\n" + trace
            )
