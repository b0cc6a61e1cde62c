"""``m schedules``: list the schedules, and steer them across the fleet (pause, resume,
trigger, backfill) or set and delete runtime schedules."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from ..adapters.registry import connected
from ..app import App, load_app
from ..control import history, keys, runtime_schedules, steering
from ..control.shared import shared
from ..errors import ConfigurationError, NotFoundError
from ..jobs import JobSpec
from ..ports.capabilities import Capability
from ..ports.messages import tick_deduplication_id
from ..scheduling.schedules import Cron, Schedule
from .options import (
    Subparsers,
    app_arg,
    aware_time,
    check_job,
    configure_logging,
    iso,
    kwargs_of,
    positive_int,
    seconds,
    shared_broker,
)


def add_parser(sub: Subparsers) -> list[argparse.ArgumentParser]:
    """The parsers of ``m schedules`` and of each of its actions."""
    s = sub.add_parser(
        "schedules", help="list schedules, their overlap policies, next slots and dedup ids"
    )
    app_arg(s)
    s.add_argument("--count", type=positive_int, default=3, help="slots to show per job (3)")
    s.add_argument(
        "--broker",
        default=os.environ.get("M_BROKER_URL"),
        help="also show each schedule's pause and latest slot, and which run now and where "
        "(a shared broker; env M_BROKER_URL)",
    )
    steer = s.add_subparsers(
        dest="action", metavar="{pause,resume,trigger,backfill,set,delete,history}"
    )
    sp = steer.add_parser("pause", help="enqueue no slot of JOB, on every replica, until resumed")
    sp.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    sp.add_argument(
        "--until", type=aware_time, default=None, help="resume by itself at this ISO time"
    )
    sp.add_argument("--reason", default=None, help="why, shown in logs and the listing")
    sr = steer.add_parser("resume", help="enqueue JOB's slots again from the next tick")
    sr.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    st = steer.add_parser("trigger", help="run JOB once now, across the whole fleet")
    st.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    st.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    sb = steer.add_parser(
        "backfill", help="enqueue each slot of JOB in a past range, once (needs --app)"
    )
    sb.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    sb.add_argument(
        "--from", dest="start", type=aware_time, required=True, metavar="TIME",
        help="the first slot's earliest ISO time, with its offset",
    )  # fmt: skip
    sb.add_argument(
        "--to", dest="end", type=aware_time, required=True, metavar="TIME",
        help="the last slot's latest ISO time, with its offset (not in the future)",
    )  # fmt: skip
    ss = steer.add_parser(
        "set", help="create or replace runtime schedule ID: JOB runs at each of its slots"
    )
    ss.add_argument("id", help="the schedule's id (letters, digits, '_', '.', '-')")
    ss.add_argument("job", help="the job it runs")
    when = ss.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", default=None, metavar="EXPR", help="a cron expression")
    when.add_argument("--every", type=seconds, default=None, metavar="SECONDS", help="an interval")
    ss.add_argument("--tz", default=None, help="the IANA zone of --cron (UTC)")
    ss.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    sd = steer.add_parser("delete", help="delete runtime schedule ID: nothing runs from it")
    sd.add_argument("id", help="the schedule's id")
    for p in (sp, sr, st, sb, ss, sd):
        p.add_argument(
            "--broker",
            default=os.environ.get("M_BROKER_URL"),
            help="URL of the shared broker (env M_BROKER_URL)",
        )
        p.add_argument(
            "--app",
            default=os.environ.get("M_APP"),
            help="check JOB (and kwargs) against this App (env M_APP); backfill of a code "
            "schedule reads it there",
        )
        p.add_argument(
            "--force",
            action="store_true",
            help="change it even where JOB is no schedule the app or any replica knows, or "
            "the queue has no schema or never had a replica",
        )
    sh = steer.add_parser(
        "history", help="the last runs of JOB: slot, replica, outcome, how long (newest first)"
    )
    sh.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    sh.add_argument("--limit", type=positive_int, default=20, help="runs to show at most (20)")
    sh.add_argument("--json", action="store_true", help="one JSON document of the runs")
    sh.add_argument(
        "--broker",
        default=os.environ.get("M_BROKER_URL"),
        help="URL of the shared broker (env M_BROKER_URL)",
    )
    return [s, sp, sr, st, sb, ss, sd, sh]


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if action in ("set", "delete", "history"):
        configure_logging(args)
        return asyncio.run(_history(args) if action == "history" else _runtime_change(args))
    if action:
        return asyncio.run(_steer(args))
    return _list(args)


def _list(args: argparse.Namespace) -> int:
    """``m schedules``: each schedule, its policies and next slots (and with --broker
    what the broker knows of it)."""
    if not args.app and not args.broker:
        raise ConfigurationError(
            "m schedules needs --app (the code's schedules) or --broker (the runtime ones), or both"
        )
    app = load_app(args.app) if args.app else App()
    configure_logging(args)
    now = time.time()
    specs = list(app.scheduled())
    view = asyncio.run(_shared_view(args.broker, specs)) if args.broker else None
    found = view[1] if view is not None else []
    if not specs and not found:
        print("no scheduled jobs")
    for spec in specs:
        assert spec.schedule is not None
        print(f"{spec.name}: {spec.schedule.describe()}")
        print(f"  overlap: {spec.overlap}")
        if spec.catchup_window is not None:
            print(f"  catch-up: {spec.catchup} missed slot(s) within {spec.catchup_window:g}s")
        if view is not None:
            for line in view[0][spec.name]:
                print(f"  {line}")
        _print_slots(spec.name, spec.schedule, now, args.count)
    for schedule in found:
        print(f"{schedule.name}: {runtime_schedules.describe(schedule)} (set at runtime)")
        job = app.jobs.get(schedule.job)
        unknown = "unknown: the app has no such job" if args.app else "unknown without --app"
        print(f"  overlap: {job.overlap if job else unknown}")
        assert view is not None
        for line in view[0][schedule.name]:
            print(f"  {line}")
        _print_slots(schedule.name, schedule.schedule, now, args.count)
    return 0


def _print_slots(name: str, schedule: Schedule, now: float, count: int) -> None:
    zone = ZoneInfo(schedule.tz) if isinstance(schedule, Cron) else None
    slot: float = now
    for _ in range(count):
        slot = schedule.next_after(slot)
        local = f"  local {datetime.fromtimestamp(slot, zone).isoformat()}" if zone else ""
        utc = datetime.fromtimestamp(slot, UTC).isoformat()
        print(f"  {utc}{local}  {tick_deduplication_id(name, int(slot))}")


async def _steer(args: argparse.Namespace) -> int:
    """``m schedules pause|resume|trigger|backfill JOB``, after checking that JOB is a
    schedule there (unless ``--force``)."""
    configure_logging(args)
    kwargs = kwargs_of(args.kwargs) if args.action == "trigger" else {}
    app = load_app(args.app) if args.app else None
    schedule = _code_schedule(args, app, kwargs)
    broker = shared_broker(args.broker, f"m schedules {args.action}")
    if Capability.STORE not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: schedules cannot be steered there"
        )
    async with connected(broker):
        if not args.force:
            names = None if app is None else {spec.name for spec in app.scheduled()}
            with _forcible():
                await steering.check_schedule(broker, args.job, names)
        if app is not None and args.action == "trigger" and args.job.startswith("@"):
            found = await runtime_schedules.get_schedule(broker, args.job[1:])
            if found is not None:  # its run takes the schedule's kwargs updated by these
                check_job(app, args.app, found.job, {**found.kwargs, **kwargs})
        if args.action == "pause":
            state = await steering.pause(
                broker, args.job, until=args.until, reason=args.reason, by=_who()
            )
            until = "" if state.paused_until is None else f" until {iso(state.paused_until)}"
            print(f"{args.job}: paused{until}; no replica enqueues its slots from its next tick")
        elif args.action == "resume":
            await steering.resume(broker, args.job)
            print(f"{args.job}: resumed; its slots are enqueued from the next tick")
        elif args.action == "trigger":
            job_id = await steering.trigger(broker, args.job, kwargs)
            print(f"{args.job}: triggered as job {job_id}")
        else:
            done = await steering.backfill(broker, args.job, schedule, args.start, args.end)
            for slot, job_id, stored in done.slots:
                said = f"job {job_id}" if stored else f"already enqueued as job {job_id}"
                print(f"  {iso(slot)}  {tick_deduplication_id(args.job, slot)}  {said}")
            print(
                f"{args.job}: backfilled {len(done.slots)} slot(s), "
                f"{done.stored} new, {len(done.slots) - done.stored} already enqueued"
            )
    return 0


def _who() -> str:
    """Who pauses from this command line: ``user@host (m schedules)``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} (m schedules)"


@contextlib.contextmanager
def _forcible() -> Iterator[None]:
    """A refusal of the checks before a change says how to make it anyway."""
    try:
        yield
    except NotFoundError as exc:
        raise NotFoundError(f"{exc} (--force to do it anyway)") from None


def _code_schedule(
    args: argparse.Namespace, app: App | None, kwargs: dict[str, Any]
) -> Schedule | None:
    """The code schedule JOB names, checked against ``app`` when given (None for a
    runtime schedule, ``@ID``, which the broker holds)."""
    steering.check_name(args.job)
    if args.job.startswith("@"):
        return None
    if app is None:
        if args.action == "backfill":
            raise ConfigurationError(
                "m schedules backfill needs --app: the schedule is in its code"
            )
        return None
    if args.job not in {spec.name for spec in app.scheduled()}:
        known = ", ".join(sorted(spec.name for spec in app.scheduled())) or "none"
        raise ConfigurationError(f"{args.job!r} is no scheduled job of {args.app} ({known})")
    if args.action == "trigger":
        check_job(app, args.app, args.job, kwargs)
    return app.jobs[args.job].schedule


async def _runtime_change(args: argparse.Namespace) -> int:
    """``m schedules set ID JOB ...`` and ``m schedules delete ID``."""
    if args.action == "set":
        kwargs = kwargs_of(args.kwargs)
        schedule = runtime_schedules.runtime_schedule(
            args.id,
            args.job,
            cron_expression=args.cron,
            tz=args.tz,
            every_seconds=args.every,
            kwargs=kwargs,
        )
        if args.app:
            check_job(load_app(args.app), args.app, args.job, kwargs)
    else:
        runtime_schedules.validate_id(args.id)
    broker = shared_broker(args.broker, f"m schedules {args.action}")
    if Capability.STORE not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: it cannot hold runtime schedules"
        )
    async with connected(broker):
        if args.action == "set" and not args.force:
            with _forcible():
                if args.app:
                    await steering.check_queue(broker)
                else:
                    await steering.check_job(broker, args.job)
        if args.action == "set":
            await runtime_schedules.set_schedule(broker, schedule)
            print(
                f"@{args.id}: {runtime_schedules.describe(schedule)}; every ticking replica "
                f"follows within {runtime_schedules.POLL + 1:g}s"
            )
        elif await runtime_schedules.delete_schedule(broker, args.id):
            print(f"@{args.id}: deleted; nothing runs from it once every replica read it")
        else:
            raise ConfigurationError(f"there is no runtime schedule {args.id!r}")
    return 0


async def _history(args: argparse.Namespace) -> int:
    """``m schedules history JOB``: its last runs, newest first."""
    steering.check_name(args.job)
    broker = shared_broker(args.broker, "m schedules history")
    if Capability.STORE not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: it keeps no schedule history"
        )
    async with connected(broker):
        runs = (await history.schedule_history(broker, args.job))[: args.limit]
        if not runs:  # a typo is named as one, not shown as a quiet schedule
            await steering.check_schedule(broker, args.job, None)
    if args.json:
        print(json.dumps({"schedule": args.job, "runs": [r.as_dict() for r in runs]}, indent=2))
        return 0
    if not runs:
        print(f"{args.job}: no run recorded (kept for {history.MAX_AGE / 86_400:g} days)")
        return 0
    print(f"{args.job}: the last {len(runs)} run(s), newest first")
    for run in runs:
        slot = "triggered" if run.slot is None else iso(run.slot)
        took = "-" if run.duration is None else f"{run.duration:.3f}s"
        why = "" if run.error is None else f"  {run.error}"
        print(
            f"  {slot:<25} {run.outcome:<13} attempt {run.attempt}  {took:>9}  "
            f"{run.replica}  job {run.job_id}{why}"
        )
    return 0


async def _shared_view(
    url: str, specs: list[JobSpec]
) -> tuple[dict[str, list[str]], list[runtime_schedules.RuntimeSchedule]]:
    """What the broker knows: per schedule (code ones and the runtime ones it holds),
    its state (pause, latest slot, last trigger) and the holders of its overlap lease
    (``job id@host:pid``) now; and the runtime schedules."""
    broker = shared_broker(url, "m schedules --broker")
    stateful = Capability.STORE in broker.capabilities
    leases = Capability.STORE in broker.capabilities
    if not (stateful or leases):
        raise ConfigurationError(
            f"{broker.display_url} keeps neither state nor leases: it knows nothing more"
        )
    out: dict[str, list[str]] = {}
    async with connected(broker):
        found = await runtime_schedules.list_schedules(broker) if stateful else []
        for name in [spec.name for spec in specs] + [s.name for s in found]:
            lines = out[name] = []
            if stateful:
                lines.extend(_state_lines(await steering.read(broker, name)))
            if leases:
                holders = sorted(await shared(broker).lease_holders(keys.overlap(name)))
                lines.append(f"running: {', '.join(holders) or 'no'}")
    return out, found


def _state_lines(state: steering.ScheduleState) -> list[str]:
    if not state.paused:
        lines = ["state: active"]
    else:
        until = "" if state.paused_until is None else f" until {iso(state.paused_until)}"
        since = "" if state.paused_at is None else f" since {iso(state.paused_at)}"
        why = "" if state.reason is None else f" ({state.reason})"
        by = "" if state.paused_by is None else f" by {state.paused_by}"
        lines = [f"state: paused{until}{since}{why}{by}"]
        if state.paused_until is not None and state.paused_until <= time.time():
            lines[0] += ", lifted by itself"
    last = "none recorded" if state.latest_slot is None else iso(state.latest_slot)
    lines.append(f"last slot: {last}")
    if state.triggered_at is not None:
        lines.append(f"last trigger: {iso(state.triggered_at)}")
    return lines
