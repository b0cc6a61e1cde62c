"""What the console shows and does, as plain data: no HTTP here.

Every answer is a JSON-ready dict. Lists are searched (``q``, a case-insensitive
substring) and paged (``offset``, ``limit``) here, so that the page stays usable at
thousands of schedules and dead letters: only the schedules of the page asked for are
looked up in the broker (state, running runs, last outcome).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..app import App
from ..control import activity, history, jobs, keys, replicas, runtime_schedules, steering
from ..control.replicas import Replica
from ..control.settled import SettledRun
from ..control.shared import shared
from ..errors import ConfigurationError, NotFoundError
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import JobState
from ..scheduling.schedules import Cron, Schedule
from ..tracking import lists
from ..tracking.deadletters import Described, described, fresh
from .answers import DeadLetterRow, Pause, PausedSchedule, ScheduleRow

MAX_LIMIT = 200  # items of a page at most
DEAD_LETTERS_READ = 10_000  # the latest dead letters a listing looks through
SAMPLES = 120  # queue samples kept: an hour at the default interval
SAMPLE_EVERY = 30.0


@dataclass(frozen=True, slots=True)
class Page:
    q: str = ""
    offset: int = 0
    limit: int = 50


def page_of(params: Mapping[str, str]) -> Page:
    """``q``, ``offset`` and ``limit`` from a query string, checked."""
    q = params.get("q", "")
    if len(q) > 200:
        raise ConfigurationError("q must be at most 200 characters")
    try:
        offset = int(params.get("offset", "0"))
        limit = int(params.get("limit", "50"))
    except ValueError:
        raise ConfigurationError("offset and limit must be whole numbers") from None
    if offset < 0 or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"offset must be >= 0 and limit 1 to {MAX_LIMIT}")
    return Page(q.strip().lower(), offset, limit)


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str  # the job's name, or @{id} for a runtime schedule
    job: str
    source: Literal["code", "runtime"]
    schedule: Schedule
    text: str
    kwargs: Mapping[str, Any]


class Views:
    """The console's answers over one connected broker (and the app, when given)."""

    def __init__(self, broker: BrokerProtocol, app: App | None) -> None:
        self.broker = broker
        self.app = app
        self.samples: deque[dict[str, Any]] = deque(maxlen=SAMPLES)
        # The fleet's settled deliveries since this console started (processed, failed),
        # from each replica's counts in the roll as last sampled.
        self._since = time.time()
        self._settled = [0, 0]
        self._last: dict[str, tuple[int, int]] = {}
        caps = broker.capabilities
        self.stateful = Capability.STORE in caps
        self.leases = Capability.STORE in caps
        self.memos = Capability.STORE in caps

    # -- overview ------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        return {
            "broker": self.broker.display_url,
            "capabilities": sorted(c.value for c in self.broker.capabilities),
            "jobs": sorted(self.app.jobs) if self.app is not None else None,
        }

    # -- schedules -----------------------------------------------------------------------

    async def _entries(self) -> list[_Entry]:
        out = []
        if self.app is not None:
            for spec in self.app.scheduled():
                assert spec.schedule is not None
                text = spec.schedule.describe()
                out.append(_Entry(spec.name, spec.name, "code", spec.schedule, text, {}))
        if self.stateful:
            for found in await runtime_schedules.list_schedules(self.broker):
                out.append(
                    _Entry(
                        found.name,
                        found.job,
                        "runtime",
                        found.schedule,
                        runtime_schedules.describe(found),
                        found.kwargs,
                    )
                )
        return sorted(out, key=lambda e: e.name)

    async def schedules(self, page: Page) -> dict[str, Any]:
        entries = [
            e for e in await self._entries() if page.q in e.name.lower() or page.q in e.job.lower()
        ]
        shown = entries[page.offset : page.offset + page.limit]
        now = time.time()
        items = await asyncio.gather(*(self._schedule(e, now) for e in shown))
        return {"total": len(entries), "offset": page.offset, "items": list(items)}

    async def _schedule(self, entry: _Entry, now: float) -> dict[str, Any]:
        spec = self.app.jobs.get(entry.job) if self.app is not None else None
        overlap = spec.overlap if spec is not None else None
        state = await steering.read(self.broker, entry.name) if self.stateful else None
        running: list[str] | None = None
        if self.leases and overlap not in (None, "allow"):
            running = sorted(await shared(self.broker).lease_holders(keys.overlap(entry.name)))
        return ScheduleRow(
            name=entry.name,
            job=entry.job,
            source=entry.source,
            schedule=entry.text,
            zone=entry.schedule.tz if isinstance(entry.schedule, Cron) else None,
            kwargs=dict(entry.kwargs),
            next_slot=entry.schedule.next_after(now),
            overlap=overlap,
            catchup_window=spec.catchup_window if spec is not None else None,
            known_job=spec is not None or self.app is None,
            running=running,
            last_run=await self._last_run(entry.name),
            **Pause.fields_of(state, now),
        ).as_dict()

    async def _last_run(self, name: str) -> SettledRun | None:
        """The latest run in the schedule's history, where histories are kept."""
        if not self.stateful:
            return None
        runs = await history.schedule_history(self.broker, name)
        return runs[0] if runs else None

    async def history(self, name: str) -> dict[str, Any]:
        """The schedule's last runs, newest first; NotFoundError (404) for a name that
        is no schedule, where it has none."""
        self._need_state("it keeps no schedule history")
        runs = await history.schedule_history(self.broker, steering.check_name(name))
        if not runs:
            await self._check_schedule(name)
        return {"name": name, "items": [run.as_dict() for run in runs]}

    def _need_state(self, what: str) -> None:
        if not self.stateful:
            raise ConfigurationError(f"{self.broker.display_url} keeps no shared state: {what}")

    async def _check_schedule(self, name: str) -> runtime_schedules.RuntimeSchedule | None:
        """A schedule of the app (when it is known, else one a replica announced) or a
        runtime one (@id, returned) the broker holds; else NotFoundError (404)."""
        names = None if self.app is None else {spec.name for spec in self.app.scheduled()}
        return await steering.check_schedule(self.broker, steering.check_name(name), names)

    async def pause(
        self, name: str, until: float | None, reason: str | None, by: str | None = None
    ) -> dict[str, Any]:
        self._need_state("schedules cannot be paused there")
        await self._check_schedule(name)
        state = await steering.pause(self.broker, name, until=until, reason=reason, by=by)
        return PausedSchedule(name=name, **Pause.fields_of(state, time.time())).as_dict()

    async def resume(self, name: str) -> dict[str, Any]:
        self._need_state("schedules cannot be resumed there")
        await self._check_schedule(name)
        state = await steering.resume(self.broker, name)
        return PausedSchedule(name=name, **Pause.fields_of(state, time.time())).as_dict()

    async def trigger(self, name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        self._need_state("schedules cannot be triggered there")
        runtime = await self._check_schedule(name)
        if self.app is not None:  # a runtime schedule's run takes its kwargs updated by these
            job, args = (
                (name, kwargs) if runtime is None else (runtime.job, {**runtime.kwargs, **kwargs})
            )
            spec = self.app.jobs.get(job)
            if spec is None:
                raise NotFoundError(f"unknown job {job!r}: the app has no such job")
            if (problem := spec.kwargs_problem(dict(args))) is not None:
                raise ConfigurationError(f"kwargs do not fit job {job!r}: {problem}")
        job_id = await steering.trigger(self.broker, name, kwargs)
        return {"name": name, "job_id": job_id}

    async def set_runtime(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._need_state("it cannot hold runtime schedules")
        schedule = runtime_schedules.runtime_schedule(
            _text(body, "id"),
            _text(body, "job"),
            cron_expression=_optional_text(body, "cron"),
            tz=_optional_text(body, "tz"),
            every_seconds=_optional_number(body, "every"),
            kwargs=_object(body, "kwargs"),
        )
        if self.app is None:
            await steering.check_job(self.broker, schedule.job)
        else:
            spec = self.app.jobs.get(schedule.job)
            if spec is None:
                raise NotFoundError(f"unknown job {schedule.job!r}: the app has no such job")
            if (problem := spec.kwargs_problem(dict(schedule.kwargs))) is not None:
                raise ConfigurationError(f"kwargs do not fit job {schedule.job!r}: {problem}")
        await runtime_schedules.set_schedule(self.broker, schedule)
        return {"name": schedule.name, "schedule": runtime_schedules.describe(schedule)}

    async def delete_runtime(self, schedule_id: str) -> dict[str, Any]:
        self._need_state("it holds no runtime schedules")
        runtime_schedules.validate_id(schedule_id)
        if not await runtime_schedules.delete_schedule(self.broker, schedule_id):
            raise LookupError(f"there is no runtime schedule {schedule_id!r}")
        return {"name": f"@{schedule_id}", "deleted": True}

    # -- replicas and queues ----------------------------------------------------------

    async def replicas(self) -> dict[str, Any]:
        """The live replicas, each with its counts and the jobs it runs now (by name)."""
        if not self.stateful:
            return {"items": [], "note": "this broker keeps no shared state: no replica roll"}
        now = time.time()
        found = await replicas.list_replicas(self.broker, now)
        runs, _ = await activity.running_jobs(self.broker)
        jobs: dict[str, dict[str, int]] = {}
        for run in runs:
            named = jobs.setdefault(run.replica, {})
            named[run.job] = named.get(run.job, 0) + 1
        items = [
            {**dataclasses.asdict(r), "age": max(0.0, now - r.seen_at), "jobs": jobs.get(r.id, {})}
            for r in found
        ]
        return {"quiet_after": replicas.QUIET, "items": items}

    async def sample(self) -> None:
        """Add the broker's counts now, and the deliveries the fleet settled since this
        console started (``processed``, of them ``failed``), to the last hour's samples."""
        stats = await self.broker.queue_stats()
        sample: dict[str, Any] = {"at": time.time(), **dataclasses.asdict(stats)}
        if self.stateful:
            self._count(await replicas.list_replicas(self.broker))
            sample["processed"], sample["failed"] = self._settled
        self.samples.append(sample)

    def _count(self, found: list[Replica]) -> None:
        """Add what each replica settled since the last sample: a replica first seen
        counts from its start when it started after this console, else from now."""
        last = {}
        for r in found:
            done = sum(r.counts.values())
            failed = r.counts.get("retried", 0) + r.counts.get("dead_lettered", 0)
            before = self._last.get(r.id)
            if before is None:
                before = (0, 0) if r.started_at >= self._since else (done, failed)
            self._settled[0] += max(0, done - before[0])
            self._settled[1] += max(0, failed - before[1])
            last[r.id] = (done, failed)
        self._last = last

    async def queues(self) -> dict[str, Any]:
        counts: dict[str, Any] | None = None
        if Capability.QUEUE_STATS in self.broker.capabilities:
            counts = dataclasses.asdict(await self.broker.queue_stats())
        oldest = await lists.oldest_waiting(self.broker)
        outbox = None
        if self.stateful:
            outbox = replicas.outbox_seen(await replicas.list_replicas(self.broker))
        return {
            "queue": self.broker.display_url,
            "counts": counts,
            "oldest_waiting": None if oldest is None else dataclasses.asdict(oldest),
            "outbox": None if outbox is None else dataclasses.asdict(outbox),
            "waiting_listed": Capability.WAITING_INSPECTION in self.broker.capabilities,
            "samples": list(self.samples),
            "sample_every": SAMPLE_EVERY,
        }

    # -- dead letters --------------------------------------------------------------------

    async def _dead(self) -> list[Described]:
        if Capability.DEAD_LETTER_INSPECTION not in self.broker.capabilities:
            raise ConfigurationError(f"{self.broker.display_url} cannot list dead letters")
        letters = await self.broker.dead_letters(DEAD_LETTERS_READ)
        return sorted(map(described, letters), key=lambda d: -d.letter.dead_lettered_at)

    async def dead_letters(self, page: Page) -> dict[str, Any]:
        found = [d for d in await self._dead() if _matches(d, page.q)]
        shown = found[page.offset : page.offset + page.limit]
        return {
            "total": len(found),
            "offset": page.offset,
            "items": [DeadLetterRow.of(d).as_dict() for d in shown],
        }

    async def settle_dead(
        self, keys: list[str] | None, requeue: bool, job: str | None = None
    ) -> dict[str, Any]:
        """Requeue (then remove) or purge the dead letters with these keys, or every
        dead letter of ``job``; the keys not found (gone since) are returned as such,
        and ``count`` says how many were settled."""
        if Capability.DEAD_LETTER_REMOVAL not in self.broker.capabilities:
            raise ConfigurationError(f"{self.broker.display_url} cannot remove dead letters")
        found = await self._dead()
        wanted = set(keys or ())
        chosen = [d for d in found if (d.job == job if job is not None else d.key in wanted)]
        for d in chosen:
            if requeue:
                await self.broker.requeue(fresh(d.letter.body))
            await self.broker.remove_dead_letters([d.letter])
        done = {d.key for d in chosen}
        return {"done": sorted(done), "not_found": sorted(wanted - done), "count": len(chosen)}

    # -- jobs ----------------------------------------------------------------------------

    async def jobs(self, state: str, job: str | None, page: Page) -> dict[str, Any]:
        """The jobs in ``state`` (of ``job`` only, when given), searched by job name and
        id, and paged; ``total`` counts them all."""
        chosen = lists.validate_state(state)
        items, total = await lists.jobs_in_state(self.broker, chosen, job or None)
        if page.q:
            items = [i for i in items if page.q in f"{i['job']} {i['job_id']}".lower()]
            total = len(items)
        shown = items[page.offset : page.offset + page.limit]
        return {"state": chosen, "total": total, "offset": page.offset, "items": shown}

    async def job(self, job_id: str) -> dict[str, Any]:
        """A job's status (its latest failed attempt's traceback with it) and its settled
        attempts as far back as the workers' records reach."""
        status = await jobs.job_status(self.broker, jobs.validate_job_id(job_id))
        out = dataclasses.asdict(status)
        out["state"] = status.state.value
        runs = await activity.job_runs(self.broker, job_id)
        return {**out, "runs": [r.as_dict() for r in runs]}

    async def cancel_waiting(self, job: str) -> dict[str, Any]:
        """Cancel every job of ``job`` the broker holds; ``count`` says how many."""
        return {"job": job, "count": await lists.cancel_held(self.broker, job)}

    async def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job; NotFoundError (404) when no status of it is kept."""
        status = await jobs.job_status(self.broker, jobs.validate_job_id(job_id))
        if status.state is JobState.UNKNOWN:
            raise NotFoundError(
                f"no status of job {job_id} is kept: never enqueued here, enqueued with "
                "keep_result=0, or expired"
            )
        cancelled = await jobs.cancel_job(self.broker, job_id)
        return {"job_id": job_id, "cancelled": cancelled}


def _matches(d: Described, q: str) -> bool:
    return not q or any(q in text.lower() for text in (d.job, d.job_id, d.letter.reason))


def _text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string")
    return value


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    return None if body.get(name) is None else _text(body, name)


def _optional_number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number")
    return float(value)


def _object(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = body.get(name, {})
    if not isinstance(value, dict):
        raise ConfigurationError(f"{name} must be a JSON object")
    return value
