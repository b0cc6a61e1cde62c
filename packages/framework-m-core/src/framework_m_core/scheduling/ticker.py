"""The in-process ticker: every replica enqueues every due slot; the broker keeps one."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..control import steering
from ..errors import ConfigurationError, InvalidJobError
from ..jobs import Catchup, JobSpec
from ..observability.observer import Observer
from ..ports.capabilities import Capability
from ..ports.messages import CAUGHT_UP, JobMessage, tick_deduplication_id
from ..ports.protocols import BrokerProtocol
from ..runtime.events import first_of, reraise_if_cancelled, said
from .clocks import CHECK_EVERY, ClockCheck
from .following import RuntimeFollower
from .schedules import Every, Schedule, slot_datetime

log = logging.getLogger("framework_m.ticker")

DEFAULT_CLOCK_SKEW = 5.0
DEFAULT_MAX_GRACE = 30.0
# Longest single sleep: wake this often to notice wall-clock steps (NTP, suspend).
_MAX_SLEEP = 60.0
_PUBLISH_RETRY_MAX = 2.0
# Skipped slots are counted up to this many (cron) so a long stall costs no more.
_COUNT_LIMIT = 100
#: The most missed slots one catch-up enqueues (``catchup="all"``): the latest ones.
CATCHUP_LIMIT = 100
_CATCHUP_SCAN = 100_000  # cron slots looked at in a window, at most
_LATE_ATTEMPT = 5.0  # seconds one attempt at a missed slot may take
_RECORD_EVERY = 60.0  # seconds between records of a schedule without catch-up


def check_grace(grace: float, clock_skew: float, dedup_window: float) -> None:
    """Refuse settings under which a late replica could enqueue an already-forgotten slot.

    A slot is published at most ``grace`` seconds late on a clock that is at most
    ``clock_skew`` seconds off from the others; the broker must still remember the
    first publish of that slot, so ``grace + clock_skew < dedup_window``.
    """
    if grace < 0 or clock_skew < 0:
        raise ConfigurationError(
            f"grace ({grace:g}s) and clock skew ({clock_skew:g}s) must not be negative"
        )
    if grace + clock_skew >= dedup_window:
        raise ConfigurationError(
            f"grace {grace:g}s + clock skew {clock_skew:g}s = {grace + clock_skew:g}s is not "
            f"below the broker's dedup window of {dedup_window:g}s: a late replica could "
            "enqueue a slot twice; lower --grace or --clock-skew, or widen the window"
        )


def default_grace(clock_skew: float, dedup_window: float) -> float:
    """Half of what the window leaves after the skew, at most 30 s."""
    return max(0.0, min(DEFAULT_MAX_GRACE, (dedup_window - clock_skew) / 2))


@dataclass(frozen=True, slots=True)
class Ticked:
    """What the ticker ticks: a job's code schedule, or a runtime schedule."""

    name: str  # the job's name, or ``@{id}``: dedup ids, state, logs, metrics
    job: str
    schedule: Schedule
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    catchup_window: float | None = None
    catchup: Catchup = "latest"

    @classmethod
    def of(cls, spec: JobSpec) -> Ticked:
        assert spec.schedule is not None
        return cls(spec.name, spec.name, spec.schedule, {}, spec.catchup_window, spec.catchup)


@dataclass(slots=True)
class TickerStats:
    """Counters of one ticker."""

    published: int = 0  # slots this replica enqueued first
    duplicates: int = 0  # slots another replica had already enqueued
    skipped: int = 0  # slots older than grace or superseded, never published
    failed: int = 0  # slots that could not be published within grace
    unknown: int = 0  # slots whose last publish got no answer in time: maybe stored
    unanswered: int = 0  # publish attempts that got no answer in time, stored or not
    clock_held: int = 0  # slots not published while this clock was off the broker's
    paused: int = 0  # slots not published because their schedule is paused
    caught_up: int = 0  # missed slots this replica enqueued late, inside the catch-up window


class Ticker:
    """A stateless loop that enqueues each job's due slots with a deterministic dedup id.

    It sleeps until the next slot boundary, computes slots from the schedules
    (never from "now" alone), and publishes slot ``s`` of job ``j`` with
    ``deduplication_id=f"tick:{j}:{s}"``. A slot older than ``grace`` seconds is
    never published. On start it fires at most the latest slot inside grace;
    while running it also catches up slots that a stall made late, as long as
    they are inside grace.

    A job with a ``catchup_window`` (on a broker with shared state) also gets its
    missed slots: the ones older than grace, inside the window and after the
    latest slot recorded as enqueued, are published late (the latest, or each),
    each after reading that record, and recorded once stored.
    """

    def __init__(
        self,
        jobs: Iterable[JobSpec],
        broker: BrokerProtocol,
        *,
        grace: float | None = None,
        clock_skew: float = DEFAULT_CLOCK_SKEW,
        clock: Callable[[], float] = time.time,
        observer: Observer | None = None,
    ) -> None:
        self._specs = {spec.name: spec for spec in jobs}
        # Entries by a number of their own; a removed one leaves its heap item behind,
        # dropped when it comes up.
        self._entries = {
            i: Ticked.of(spec) for i, spec in enumerate(self._specs.values()) if spec.schedule
        }
        self._numbers = {entry.name: i for i, entry in self._entries.items()}
        self._due: list[tuple[int, int]] = []  # (next slot, entry number)
        self._woken = asyncio.Event()  # the entries changed: look at the heap again
        self._count = 0
        self._ticking = False  # the first slots were fired
        self._runtime = RuntimeFollower(self, broker, clock)
        self._broker = broker
        self._grace = grace
        self._skew = clock_skew
        self._clock = clock
        self._stop = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None  # the publishes and clock checks of run()
        self._publishing: set[asyncio.Task[None]] = set()
        self._measuring: asyncio.Task[None] | None = None  # a clock check in progress
        self._latest: dict[str, int] = {}  # per job: the latest slot fired
        # Brokers with shared state keep each schedule's pause and latest slot.
        self._stateful = Capability.STORE in broker.capabilities
        # Set while publishes get no answer (a broker that takes connections but stores
        # nothing: RabbitMQ without quorum); the worker's readiness says it.
        self.store_problem: str | None = None
        self._paused_jobs: set[str] = set()  # jobs whose last slot looked at was paused
        self._view = steering.SteeringView(broker)
        self._wakes = 0  # the ticks so far: one steering read serves one tick
        self._recorded: dict[str, float] = {}  # per schedule: when its slot was last recorded
        self._catching_up: set[str] = set()  # jobs with a catch-up in progress
        self.stats = TickerStats()
        self.observer = observer or Observer()
        self.clock_check: ClockCheck | None = None  # set when run() starts

    @property
    def grace(self) -> float:
        """The grace bound in effect (derived from the broker's window when not given)."""
        if self._grace is not None:
            return self._grace
        return default_grace(self._skew, self._broker.dedup_window)

    def check(self) -> None:
        check_grace(self.grace, self._skew, self._broker.dedup_window)
        late = sorted(e.name for e in self._entries.values() if e.catchup_window is not None)
        if late and not self._stateful:
            raise ConfigurationError(
                f"{self._broker.display_url} keeps no shared state, which catchup_window= "
                f"needs (jobs {', '.join(late)}): use a broker that has it"
            )

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        self.check()
        if not self._entries and not self._stateful:
            log.info("ticker idle: the app has no scheduled jobs")
            await self._stop.wait()
            return
        check = self.clock_check = ClockCheck(
            self._broker,
            clock_skew=self._skew,
            limit=(self._broker.dedup_window - self.grace) / 2,
            clock=self._clock,
        )
        await check.run()
        if self._stateful:
            await self._runtime.load()
        log.info(
            "ticker started: %d schedule(s) (%d set at runtime), grace %gs, clock skew %gs, "
            "dedup window %gs",
            len(self._entries),
            sum(e.name.startswith("@") for e in self._entries.values()),
            self.grace,
            self._skew,
            self._broker.dedup_window,
        )
        failure: Exception | None = None
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                if self._stateful:
                    follow = group.create_task(self._runtime.follow(), name="runtime schedules")
                try:
                    await self._tick_until_stopped(check)
                except Exception as exc:  # raised as itself below, not in an ExceptionGroup
                    failure = exc
                    self._stop.set()
                    for task in self._publishing:
                        task.cancel()
                if self._measuring is not None:  # stopping: no new clock reading needed
                    self._measuring.cancel()
                if self._stateful:
                    self._runtime.close()
                    follow.cancel()
        finally:
            s = self.stats
            log.info(
                "ticker stopped: %d published, %d caught up, %d duplicates, %d skipped, "
                "%d failed, %d paused",
                *(s.published, s.caught_up, s.duplicates, s.skipped, s.failed, s.paused),
            )
        if failure is not None:
            raise failure

    async def _tick_until_stopped(self, check: ClockCheck) -> None:
        """Fire the first slots, then sleep to each next slot (or clock check, or a
        change of the runtime schedules) and tick."""
        self._first_slots(self._clock(), check.halted)
        while not self._stop.is_set():
            await self._sleep_until(min(self._due[0][0] if self._due else math.inf, check.next_at))
            if self._stop.is_set():
                return
            now = self._clock()
            self._wakes += 1
            self._tick(now, check.halted)
            if check.due():
                self._start_clock_check(check, now)

    def _first_slots(self, now: float, halted: bool) -> None:
        """On start, fire each schedule's latest slot inside grace (the earlier ones are
        not skipped: another replica ran them, or this one was not up); fill the heap of
        next slots."""
        grace = self.grace
        for i, spec in self._entries.items():
            sched = _schedule(spec)
            latest = sched.next_after(now - grace)
            if latest <= now and halted:
                self.stats.clock_held += 1
                self.observer.tick(spec.name, "clock_held", latest)
            elif spec.catchup_window is not None and not halted:
                self._catch_up(
                    spec, _latest_until(sched, latest, now) if latest <= now else None, now
                )
            elif latest <= now:
                self._fire(spec, _latest_until(sched, latest, now))
            self._due.append((sched.next_after(now), i))
            self.observer.next_slot(spec.name, self._due[-1][0])
        heapq.heapify(self._due)
        self._ticking = True

    def _tick(self, now: float, halted: bool) -> None:
        """Fire (or hold, while the clock is off) every slot due by ``now``."""
        grace = self.grace
        due = self._due
        while due and due[0][0] <= now:
            slot, i = due[0]
            spec = self._entries.get(i)
            if spec is None:  # removed or replaced
                heapq.heappop(due)
                continue
            after = (
                self._hold(spec, slot, now) if halted else self._fire_due(spec, slot, now, grace)
            )
            heapq.heapreplace(due, (after, i))
            self.observer.next_slot(spec.name, after)

    def put(self, entry: Ticked | None, name: str) -> None:
        """Tick ``entry`` from its next slot on, in place of what ``name`` was (None:
        tick nothing under ``name`` any more)."""
        old = self._numbers.pop(name, None)
        if old is not None:
            del self._entries[old]
        if entry is None:
            self.observer.next_slot(name, None)
        else:
            i = self._count = max(self._count, len(self._specs)) + 1
            self._entries[i] = entry
            self._numbers[name] = i
            if self._ticking:  # else the first slots are yet to be looked at
                slot = entry.schedule.next_after(self._clock())
                heapq.heappush(self._due, (slot, i))
                self.observer.next_slot(entry.name, slot)
        self._woken.set()

    def ticked(self, name: str) -> Ticked | None:
        i = self._numbers.get(name)
        return None if i is None else self._entries[i]

    def spec(self, job: str) -> JobSpec | None:
        return self._specs.get(job)

    def _start_clock_check(self, check: ClockCheck, now: float) -> None:
        """Measure the clock beside the ticking, one measurement at a time."""
        if self._measuring is not None and not self._measuring.done():
            return
        assert self._group is not None
        check.next_at = now + CHECK_EVERY
        self._measuring = self._group.create_task(check.run(), name="clock check")

    def _fire_due(self, spec: Ticked, slot: int, now: float, grace: float) -> int:
        """Fire the latest due slot of ``spec`` inside grace (the others are skipped as
        late); return the next slot."""
        sched = _schedule(spec)
        if slot > now:
            return slot
        if slot < now - grace and spec.catchup_window is not None:
            current = sched.next_after(now - grace)
            self._catch_up(
                spec, _latest_until(sched, current, now) if current <= now else None, now
            )
            return sched.next_after(now)
        if slot < now - grace:
            skipped = sched.count_between(slot - 1, now - grace, limit=_COUNT_LIMIT)
            self._skipped(spec, skipped, slot, f"older than grace {grace:g}s")
            slot = sched.next_after(now - grace)
        due: list[int] = []
        while slot <= now:
            due.append(slot)
            slot = sched.next_after(slot)
        if len(due) > 1:
            self._skipped(spec, len(due) - 1, due[0], f"superseded by slot {due[-1]}")
        if due:
            self._fire(spec, due[-1])
        return slot

    def _hold(self, spec: Ticked, slot: int, now: float) -> int:
        """Publish none of ``spec``'s due slots (this clock is off); return the next slot."""
        sched = _schedule(spec)
        if slot > now:
            return slot
        held = sched.count_between(slot - 1, now, limit=_COUNT_LIMIT)
        self.stats.clock_held += held
        self.observer.tick(spec.name, "clock_held", slot, held)
        return sched.next_after(now)

    def _skipped(self, spec: Ticked, count: int, first: int, why: str) -> None:
        self.stats.skipped += count
        self.observer.tick(spec.name, "skipped", first, count)
        log.warning(
            "%s: %s slot(s) from %s on were not enqueued: %s (the process stalled, the "
            "broker was out of reach or the clock jumped)",
            spec.name,
            f"{count}+"
            if count >= _COUNT_LIMIT and not isinstance(spec.schedule, Every)
            else count,
            slot_datetime(first).isoformat(),
            why,
        )

    async def _sleep_until(self, wake_at: float) -> None:
        while not self._stop.is_set():
            if self._woken.is_set():
                self._woken.clear()
                return
            delay = wake_at - self._clock()
            if delay <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delay, _MAX_SLEEP)):
                    await first_of(self._stop, self._woken)

    def _fire(self, spec: Ticked, slot: int) -> None:
        """Publish ``slot`` of ``spec``; it is now the job's latest slot, so an earlier
        slot's publish waiting to try again gives up (after an outage only the latest
        slot runs; an attempt already in flight goes on)."""
        assert self._group is not None
        self._latest[spec.name] = slot
        task = self._group.create_task(self._publish(spec, slot), name=f"tick:{spec.name}:{slot}")
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _catch_up(self, spec: Ticked, current: int | None, now: float) -> None:
        """Publish the slots of ``spec`` missed before ``now`` (as its catch-up policy
        says), then ``current``, the latest slot inside grace, if there is one."""
        if spec.name in self._catching_up or (spec.catchup == "latest" and current is not None):
            if current is not None:  # a due slot supersedes the missed ones ("latest")
                self._fire(spec, current)
            return
        assert self._group is not None
        if current is not None:
            self._latest[spec.name] = current
        self._catching_up.add(spec.name)
        task = self._group.create_task(
            self._catching(spec, current, now), name=f"catch-up:{spec.name}"
        )
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _catching(self, spec: Ticked, current: int | None, now: float) -> None:
        try:
            state = await self._read_for_catch_up(spec, now)
            missed = [] if state is None else self._missed(spec, state, current, now)
            for slot in missed:
                if self._stop.is_set():
                    return
                await self._publish_late(spec, slot)
        finally:
            self._catching_up.discard(spec.name)
        if current is not None and not self._stop.is_set():
            await self._publish(spec, current)

    async def _read_for_catch_up(self, spec: Ticked, now: float) -> steering.ScheduleState | None:
        """The schedule's state, read again after failures while the window lasts."""
        assert spec.catchup_window is not None
        delay = 0.1
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(_LATE_ATTEMPT):
                    return await steering.read(self._broker, spec.name)
            except Exception as exc:
                reraise_if_cancelled()
                self.observer.broker_error("state")
                if self._clock() - now + delay > spec.catchup_window:
                    log.error(
                        "%s: no missed slot enqueued: its latest enqueued slot could not be "
                        "read (%s)",
                        spec.name,
                        said(exc),
                    )
                    return None
                log.warning(
                    "%s: could not read its latest enqueued slot (%s); retrying",
                    spec.name,
                    said(exc),
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _PUBLISH_RETRY_MAX)
        return None

    def _missed(
        self, spec: Ticked, state: steering.ScheduleState, current: int | None, now: float
    ) -> list[int]:
        """The slots of ``spec`` to publish late: after the latest recorded slot (none
        without one) and the last resume, inside the window, before ``current``, not
        paused; the latest only (``"latest"``) or the latest :data:`CATCHUP_LIMIT`
        (``"all"``)."""
        assert spec.catchup_window is not None
        if state.latest_slot is None:  # a new schedule: nothing before it is owed
            log.info("%s: no slot recorded as enqueued yet; nothing to catch up", spec.name)
            return []
        sched = _schedule(spec)
        floor = max(now - spec.catchup_window, state.latest_slot)
        if state.resumed_at is not None:
            floor = max(floor, math.ceil(state.resumed_at) - 1)
        end = now if current is None else current - 1
        keep = 1 if spec.catchup == "latest" else CATCHUP_LIMIT
        start = floor
        if isinstance(sched, Every):  # the latest ones directly, however long the window
            start = max(floor, end - (keep + 1) * sched.seconds)
        slots: deque[int] = deque(maxlen=keep)
        found = 0
        slot = sched.next_after(start)
        while slot <= end and found < _CATCHUP_SCAN:
            if not state.pauses(slot):
                slots.append(slot)
                found += 1
            slot = sched.next_after(slot)
        if not slots:
            log.info("%s: no missed slot to enqueue late", spec.name)
            return []
        older = found - len(slots)
        if start > floor:
            older += sched.count_between(floor, start, limit=_CATCHUP_SCAN)
        if older:
            why = (
                f"superseded by missed slot {slot_datetime(slots[-1]).isoformat()}"
                if spec.catchup == "latest"
                else f"over the catch-up limit of {keep} slots"
            )
            self._skipped(spec, older, sched.next_after(floor), why)
        log.warning(
            "%s: enqueuing %d missed slot(s) late, from %s (catch-up window %gs, %s)",
            spec.name,
            len(slots),
            slot_datetime(slots[0]).isoformat(),
            spec.catchup_window,
            spec.catchup,
        )
        return list(slots)

    async def _publish_late(self, spec: Ticked, slot: int) -> None:
        """Publish missed ``slot`` once: each attempt first reads the latest slot recorded
        and gives up if it is not older (another replica enqueued it); tried again while
        the slot is inside the catch-up window."""
        assert spec.catchup_window is not None
        delay = 0.1
        last: Exception | None = None
        unanswered = False
        while not self._stop.is_set():
            left = slot + spec.catchup_window - self._clock()
            if left <= 0:
                within = f"within the catch-up window of {spec.catchup_window:g}s"
                self._gave_up(spec, slot, last or TimeoutError(), unanswered, within=within)
                return
            publishing = False
            try:
                async with asyncio.timeout(min(left, _LATE_ATTEMPT)):
                    state = await steering.read(self._broker, spec.name)
                    if state.latest_slot is not None and state.latest_slot >= slot:
                        self.stats.duplicates += 1
                        self.observer.tick(spec.name, "duplicate", slot)
                        return
                    message = self._message(spec, slot, late=True)
                    publishing = True
                    result = await self._broker.publish(message)
            except InvalidJobError as exc:
                self._failed(spec, slot, exc)
                return
            except Exception as exc:
                reraise_if_cancelled()
                self.observer.broker_error("publish" if publishing else "state")
                last = exc
                if isinstance(exc, TimeoutError) and publishing:
                    self._unanswered()
                    unanswered = True
                log.warning(
                    "%s: late enqueue of %s failed (%s); retrying",
                    spec.name,
                    tick_deduplication_id(spec.name, slot),
                    said(exc),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _PUBLISH_RETRY_MAX)
                if spec.catchup == "latest" and self._latest.get(spec.name, slot) > slot:
                    self._skipped(spec, 1, slot, "a later slot is due and is enqueued instead")
                    return
                continue
            self.store_problem = None
            if result.duplicate:
                self.stats.duplicates += 1
                self.observer.tick(spec.name, "duplicate", slot)
                return
            self.stats.caught_up += 1
            self.observer.tick(spec.name, "caught_up", slot)
            log.info(
                "%s: enqueued missed slot %s late as job %s",
                spec.name,
                slot_datetime(slot).isoformat(),
                result.job_id,
            )
            await self._record(spec, slot)
            return

    def _grace_left(self, slot: int) -> float:
        return slot + self.grace - self._clock()

    async def _publish(self, spec: Ticked, slot: int) -> None:
        """Publish ``slot`` until it is stored, each attempt bounded by the grace left;
        between attempts, a later slot of the job supersedes it."""
        if self._stateful and await self._paused(spec, slot, self._wakes):
            return
        delay = 0.1
        unanswered = False
        while True:
            error = await self._attempt(spec, slot)
            if error is None:
                return
            unanswered = unanswered or isinstance(error, TimeoutError)
            if self._grace_left(slot) < delay and spec.catchup_window is not None:
                log.warning(
                    "%s: %s not enqueued within grace %gs (%s); trying again inside the "
                    "catch-up window",
                    spec.name,
                    tick_deduplication_id(spec.name, slot),
                    self.grace,
                    said(error),
                )
                await self._publish_late(spec, slot)
                return
            if self._grace_left(slot) < delay or self._stop.is_set():
                self._gave_up(spec, slot, error, unanswered)
                return
            log.warning(
                "%s: enqueue of %s failed (%s); retrying",
                spec.name,
                tick_deduplication_id(spec.name, slot),
                said(error),
            )
            await asyncio.sleep(delay)
            if self._latest.get(spec.name) != slot:
                self._skipped(spec, 1, slot, "a later slot is due and is enqueued instead")
                return
            delay = min(delay * 2, _PUBLISH_RETRY_MAX)

    async def _paused(self, spec: Ticked, slot: int, wake: int) -> bool:
        """Whether ``spec``'s schedule is paused at ``slot`` (counted and logged); a state
        that cannot be read in time pauses nothing."""
        try:
            async with asyncio.timeout(max(0.0, self._grace_left(slot))):
                state = await self._view.state(spec.name, wake)
        except Exception as exc:
            self.observer.broker_error("state")
            log.warning(
                "%s: could not read whether slot %s is paused (%s); enqueuing it",
                spec.name,
                slot,
                said(exc),
            )
            return False
        if not state.pauses(slot):
            if spec.name in self._paused_jobs:
                self._paused_jobs.discard(spec.name)
                log.info(
                    "%s: not paused any more; slot %s is enqueued",
                    spec.name,
                    slot_datetime(slot).isoformat(),
                )
            return False
        self.stats.paused += 1
        self.observer.tick(spec.name, "paused", slot)
        first = spec.name not in self._paused_jobs
        self._paused_jobs.add(spec.name)
        log.log(
            logging.INFO if first else logging.DEBUG,
            "%s: paused%s%s; slot %s is not enqueued",
            spec.name,
            ""
            if state.paused_until is None
            else f" until {slot_datetime(int(state.paused_until)).isoformat()}",
            "" if state.reason is None else f" ({state.reason})",
            slot_datetime(slot).isoformat(),
        )
        return True

    async def _record(self, spec: Ticked, slot: int) -> None:
        """Record ``slot`` as the schedule's latest enqueued one: each slot of a schedule
        with catch-up, else at most one a minute (for ``m schedules``); a failure costs
        only the record, logged."""
        if spec.catchup_window is None:
            at = time.monotonic()
            if at - self._recorded.get(spec.name, -math.inf) < _RECORD_EVERY:
                return
            self._recorded[spec.name] = at
        try:
            await steering.advance(self._broker, spec.name, slot)
        except Exception as exc:
            self.observer.broker_error("state")
            log.warning("%s: could not record slot %s as enqueued: %s", spec.name, slot, exc)

    async def _attempt(self, spec: Ticked, slot: int) -> Exception | None:
        """Publish ``slot`` once; the broker's error to retry on, else None (stored, a
        duplicate, or refused for good)."""
        message = self._message(spec, slot)
        try:
            async with asyncio.timeout(max(0.0, self._grace_left(slot))):
                result = await self._broker.publish(message)
        except InvalidJobError as exc:
            self.stats.failed += 1
            self.observer.tick(spec.name, "failed", slot)
            log.error("%s: slot %s not enqueued: %s", spec.name, slot, exc)
            return None
        except Exception as exc:  # whatever the adapter raises: retried within grace
            reraise_if_cancelled()
            self.observer.broker_error("publish")
            if isinstance(exc, TimeoutError):
                self._unanswered()
            return exc
        self.store_problem = None
        if result.duplicate:
            self.stats.duplicates += 1
            self.observer.tick(spec.name, "duplicate", slot)
        else:
            self.stats.published += 1
            self.observer.tick(spec.name, "enqueued", slot)
            log.debug(
                "%s: enqueued slot %s as job %s", spec.name, message.deduplication_id, result.job_id
            )
            if self._stateful:
                await self._record(spec, slot)
        return None

    def _message(self, spec: Ticked, slot: int, *, late: bool = False) -> JobMessage:
        """Slot ``slot``'s message: stored after grace (from the slot, or for a missed slot
        from now) it never runs."""
        now = self._clock()
        return JobMessage(
            job_name=spec.job,
            kwargs=dict(spec.kwargs),
            deduplication_id=tick_deduplication_id(spec.name, slot),
            enqueued_at=now,
            scheduled_at=slot,
            not_after=(now if late else slot) + self.grace + self._skew,
            meta={CAUGHT_UP: "1"} if late else {},
        )

    def _unanswered(self) -> None:
        self.stats.unanswered += 1
        if self.store_problem is None:
            since = time.strftime("%H:%M:%S", time.gmtime())
            self.store_problem = (
                f"the broker answers no publish since {since} UTC: it may take connections "
                "but store nothing (a cluster without quorum?)"
            )

    def _gave_up(
        self, spec: Ticked, slot: int, error: Exception, unanswered: bool, *, within: str = ""
    ) -> None:
        """The last attempt at ``slot`` ended in ``error``: if any attempt got no answer in
        time the outcome is unknown (the broker may have stored it), else it failed."""
        if self._stop.is_set():
            within = f"before the ticker stopped (slot {self._clock() - slot:.1f}s old)"
        within = within or f"within grace {self.grace:g}s"
        if not unanswered:
            self._failed(spec, slot, said(error), within=within)
            return
        self.stats.unknown += 1
        self.observer.tick(spec.name, "unknown", slot)
        log.error(
            "%s: slot %s: outcome unknown, no answer from the broker %s; it may be stored "
            "and run, and is not tried again",
            spec.name,
            tick_deduplication_id(spec.name, slot),
            within,
        )

    def _failed(self, spec: Ticked, slot: int, reason: object, *, within: str = "") -> None:
        self.stats.failed += 1
        self.observer.tick(spec.name, "failed", slot)
        log.error(
            "%s: slot %s not enqueued %s: %s",
            spec.name,
            tick_deduplication_id(spec.name, slot),
            within or f"within grace {self.grace:g}s",
            reason,
        )


def _latest_until(sched: Schedule, slot: int, now: float) -> int:
    """The last slot at or before ``now``, from ``slot`` (one that is)."""
    while (after := sched.next_after(slot)) <= now:
        slot = after
    return slot


def _schedule(spec: Ticked) -> Schedule:
    return spec.schedule
