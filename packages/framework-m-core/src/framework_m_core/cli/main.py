"""The ``m`` command: ``m worker``, ``schedules``, ``enqueue``, ``sync-schema``, ``status``,
``dead-letters``, ``jobs``, ``console``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from .. import about
from ..adapters.registry import connected, open_broker
from ..app import App, load_app
from ..errors import BrokerError, ConfigurationError, FrameworkMError, SchemaConflictError
from ..jobs import JobSpec
from ..observability import logs, metrics
from ..observability.metrics import Metrics
from ..observability.probes import ProbeServer, parse_address
from ..ports.capabilities import Capability
from ..ports.messages import loads_strict, tick_deduplication_id
from ..ports.protocols import BrokerProtocol
from ..runtime.leases import overlap_key
from ..runtime.stalls import STALL_WARNING
from ..runtime.worker import (
    DEFAULT_CONCURRENCY,
    DEFAULT_SHUTDOWN_TIMEOUT,
    JOB_THREAD_PREFIX,
    Worker,
)
from ..scheduling import control, runtime
from ..scheduling.schedules import Cron, Schedule
from ..scheduling.ticker import DEFAULT_CLOCK_SKEW, InProcessTickerAdapter
from ..tracking import queries
from . import console as console_command
from . import inspection, jobs

log = logging.getLogger("framework_m.cli")

DEFAULT_BROKER = "memory://"
# Exit codes: 1 a schema conflict, 2 a usage or configuration error, 3 the broker.
EXIT_BROKER = 3


def _env_seconds(name: str) -> float | None:
    """Environment variable ``name`` as seconds; None when it is not set."""
    text = os.environ.get(name)
    if not text:
        return None
    try:
        return _seconds(text)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"m: error: {name}: {exc}") from None


def _env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "" or "0"."""
    return os.environ.get(name, "") not in ("", "0")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {text}")
    return value


class _Versions(argparse.Action):
    """``m --version``: core's version and each installed adapter's, then exit."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        for name, number in about.installed_versions():
            print(f"{name} {number}")
        if (problem := about.mismatch()) is not None:
            parser.exit(2, f"m: error: {problem}\n")
        parser.exit()


def _instant(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset (+00:00 or Z): {text!r}")
    return when


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="m", description="framework-m: leaderless scheduled and background jobs."
    )
    parser.add_argument(
        "--version", action=_Versions, nargs=0, help="print the versions of core and adapters"
    )
    _logging_args(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def app_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--app",
            default=os.environ.get("M_APP"),
            help="the App as module[:attr] (env M_APP; attr defaults to 'app')",
        )

    def broker_arg(p: argparse.ArgumentParser, shared: bool = False) -> None:
        if shared:  # memory:// would be gone with this command: no default
            p.add_argument(
                "--broker",
                default=os.environ.get("M_BROKER_URL"),
                help="URL of the shared broker (env M_BROKER_URL; memory:// lives in one "
                "process and cannot be used here)",
            )
            return
        p.add_argument(
            "--broker",
            default=os.environ.get("M_BROKER_URL", DEFAULT_BROKER),
            help=f"broker URL (env M_BROKER_URL; default {DEFAULT_BROKER})",
        )

    w = sub.add_parser("worker", help="run jobs, and tick schedules unless --no-scheduler")
    app_arg(w)
    broker_arg(w)
    w.add_argument("--no-scheduler", action="store_true", help="run jobs only; publish no ticks")
    w.add_argument(
        "--concurrency",
        type=_positive_int,
        default=DEFAULT_CONCURRENCY,
        help=f"jobs at once ({DEFAULT_CONCURRENCY})",
    )
    w.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="threads for plain 'def' handlers (default: --concurrency)",
    )
    w.add_argument(
        "--grace",
        type=_seconds,
        default=None,
        help="latest a slot may be enqueued, in seconds (default: from the dedup window, <= 30)",
    )
    w.add_argument(
        "--clock-skew",
        type=_seconds,
        default=DEFAULT_CLOCK_SKEW,
        help=f"clock difference tolerated between replicas, seconds ({DEFAULT_CLOCK_SKEW:g})",
    )
    w.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=DEFAULT_SHUTDOWN_TIMEOUT,
        help="seconds running jobs may finish after SIGTERM/SIGINT "
        f"({DEFAULT_SHUTDOWN_TIMEOUT:g}; keep it below the orchestrator's grace period)",
    )
    w.add_argument(
        "--stall-warning",
        type=_seconds,
        default=_env_seconds("M_STALL_WARNING"),
        metavar="SECONDS",
        help="warn, naming the jobs running and the code, when a handler blocks the event "
        f"loop this long (env M_STALL_WARNING; default {STALL_WARNING:g}; 0: off)",
    )
    w.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=_env_seconds("M_CONNECT_TIMEOUT"),
        metavar="SECONDS",
        help="give up (exit 3) when the broker has not answered at start for this long "
        "(env M_CONNECT_TIMEOUT; default: keep trying, /readyz says 503 meanwhile)",
    )
    w.add_argument(
        "--http",
        default=os.environ.get("M_HTTP"),
        metavar="HOST:PORT",
        help="serve GET /healthz and /readyz there (env M_HTTP; default off)",
    )
    w.add_argument(
        "--no-sync-schema",
        "--no-migrate",  # its former name
        dest="no_sync_schema",
        action="store_true",
        default=_env_flag("M_NO_SYNC_SCHEMA") or _env_flag("M_NO_MIGRATE"),
        help="check the schema read-only and refuse to start when it differs "
        "(run `m sync-schema` before deploying; env M_NO_SYNC_SCHEMA=1)",
    )

    s = sub.add_parser(
        "schedules", help="list schedules, their overlap policies, next slots and dedup ids"
    )
    app_arg(s)
    s.add_argument("--count", type=_positive_int, default=3, help="slots to show per job (3)")
    s.add_argument(
        "--broker",
        default=os.environ.get("M_BROKER_URL"),
        help="also show each schedule's pause and latest slot, and which run now and where "
        "(a shared broker; env M_BROKER_URL)",
    )
    steer = s.add_subparsers(dest="action", metavar="{pause,resume,trigger,backfill,set,delete}")
    sp = steer.add_parser("pause", help="enqueue no slot of JOB, on every replica, until resumed")
    sp.add_argument("job", help="the scheduled job, or @ID of a runtime schedule")
    sp.add_argument(
        "--until", type=_aware_time, default=None, help="resume by itself at this ISO time"
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
        "--from", dest="start", type=_aware_time, required=True, metavar="TIME",
        help="the first slot's earliest ISO time, with its offset",
    )  # fmt: skip
    sb.add_argument(
        "--to", dest="end", type=_aware_time, required=True, metavar="TIME",
        help="the last slot's latest ISO time, with its offset (not in the future)",
    )  # fmt: skip
    ss = steer.add_parser(
        "set", help="create or replace runtime schedule ID: JOB runs at each of its slots"
    )
    ss.add_argument("id", help="the schedule's id (letters, digits, '_', '.', '-')")
    ss.add_argument("job", help="the job it runs")
    when = ss.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", default=None, metavar="EXPR", help="a cron expression")
    when.add_argument("--every", type=_seconds, default=None, metavar="SECONDS", help="an interval")
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

    e = sub.add_parser("enqueue", help="enqueue one job")
    broker_arg(e, shared=True)
    e.add_argument("--app", default=os.environ.get("M_APP"), help="check the job name against it")
    e.add_argument("job", help="job name")
    e.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    e.add_argument("--dedup-id", default=None, help="deduplication id")
    when = e.add_mutually_exclusive_group()
    when.add_argument(
        "--in", dest="delay", type=_seconds, default=None, metavar="SECONDS",
        help="hold the job this many seconds before it runs",
    )  # fmt: skip
    when.add_argument(
        "--at", dest="at", type=_instant, default=None, metavar="TIME",
        help="hold the job until this ISO 8601 time with its offset (2026-12-24T18:00:00+01:00)",
    )  # fmt: skip

    g = sub.add_parser(
        "sync-schema",
        aliases=["migrate"],  # its former name, still accepted
        help="sync the broker's schema with what the code needs",
    )
    broker_arg(g)
    g.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    st = sub.add_parser(
        "status", help="per queue: counts, dead letters, windows, schema in sync or not"
    )
    st.add_argument(
        "--broker",
        action="append",
        help="broker URL; repeat it for several queues "
        f"(env M_BROKER_URL; default {DEFAULT_BROKER})",
    )
    st.add_argument("--json", action="store_true", help="print JSON")
    st.add_argument(
        "--app",
        default=os.environ.get("M_APP"),
        help="also show, per job with an overlap policy or a limit, the runs going on "
        "now and where (env M_APP)",
    )
    j = sub.add_parser("jobs", help="a job's status and result, by its id")
    j_sub = j.add_subparsers(dest="action", required=True, metavar="ACTION")
    j_actions = [
        j_sub.add_parser("status", help="the job's state, attempts, times, error and result"),
        j_sub.add_parser("result", help="print the job's return value as JSON"),
        j_sub.add_parser("cancel", help="the job never runs, or stops where it runs"),
    ]
    for action in j_actions:
        broker_arg(action, shared=True)
        action.add_argument("id", help="the job id enqueue printed (or, with --slot, a schedule)")
        action.add_argument(
            "--slot", type=_slot, default=None, metavar="UNIX_SECONDS",
            help="the job ticked for this slot of the schedule ID (a job's name or @id)",
        )  # fmt: skip
    j_actions[0].add_argument("--json", action="store_true", help="print JSON")
    j_actions[1].add_argument(
        "--wait", type=_wait, default=0.0, metavar="SECONDS",
        help="wait this long for the job to finish (default 0: ask once)",
    )  # fmt: skip
    d = sub.add_parser("dead-letters", help="inspect dead letters")
    d_sub = d.add_subparsers(dest="action", required=True, metavar="ACTION")
    d_actions = [
        d_sub.add_parser("list", help="the latest dead letters, oldest first"),
        d_sub.add_parser(
            "requeue", help="put the latest dead letters' jobs back, with a fresh attempt count"
        ),
        d_sub.add_parser("purge", help="delete the latest dead letters"),
    ]
    for action in d_actions:
        broker_arg(action)
        action.add_argument("--job", default=None, help="only this job's")
        action.add_argument(
            "--limit", type=_positive_int, default=20, help="at most this many, latest (20)"
        )
        if action is not d_actions[0]:
            action.add_argument("--yes", action="store_true", help="do not ask")
    con = console_command.add_parser(sub)
    for command in (w, s, e, g, st, con, *d_actions, *j_actions):
        _logging_args(command, top=False)
    return parser


def _logging_args(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Logging options, before or after the subcommand (there they override)."""

    def default(value: str | None) -> str | None:
        return value if top else argparse.SUPPRESS

    p.add_argument(
        "--log-level",
        default=default(os.environ.get("M_LOG_LEVEL", "INFO")),
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL, any case (env M_LOG_LEVEL; default INFO)",
    )
    p.add_argument(
        "--log-format",
        default=default(os.environ.get("M_LOG_FORMAT", "text")),
        help="text, or json: one object per line (env M_LOG_FORMAT; default text)",
    )
    p.add_argument(
        "--log-config",
        default=default(os.environ.get("M_LOG_CONFIG")),
        help="a JSON logging.config.dictConfig file; then nothing else is set up "
        "(env M_LOG_CONFIG)",
    )


def _configure_logging(args: argparse.Namespace) -> None:
    """After the app is imported: its own logging setup, if it has one, stays."""
    logs.configure(logs.level_name(args.log_level), args.log_format, args.log_config)


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``m COMMAND``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise LookupError(command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, with its usage
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    if (problem := about.mismatch()) is not None:
        print(f"m: error: {problem}", file=sys.stderr)
        return 2
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that closed the pipe shows here, not at exit
        return code
    except BrokenPipeError:  # `m status | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SchemaConflictError as exc:
        print(f"m: schema conflict: {exc}", file=sys.stderr)
        return 1
    except BrokerError as exc:  # the broker is out of reach or refused: not a usage error
        print(f"m: error: {exc}", file=sys.stderr)
        return EXIT_BROKER
    except FrameworkMError as exc:
        print(f"m: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _jobs(args: argparse.Namespace) -> int:
    _configure_logging(args)
    broker = _shared_broker(args.broker, f"m jobs {args.action}")
    run = {"status": jobs.status, "result": jobs.result, "cancel": jobs.cancel}[args.action]
    return asyncio.run(run(args, broker))


def _slot(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a slot is whole unix seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a slot is whole unix seconds, got {text!r}")
    return value


def _wait(text: str) -> float:
    value = _seconds(text)
    if value > queries.MAX_WAIT:
        raise argparse.ArgumentTypeError(f"wait at most {queries.MAX_WAIT:g} seconds")
    return value


def _dead_letters(args: argparse.Namespace) -> int:
    _configure_logging(args)
    return asyncio.run(inspection.dead_letters(args))


def _status(args: argparse.Namespace) -> int:
    _configure_logging(args)
    args.broker = args.broker or [os.environ.get("M_BROKER_URL", DEFAULT_BROKER)]
    return asyncio.run(inspection.status(args))


def _sync_schema_command(args: argparse.Namespace) -> int:
    if args.command == "migrate":
        print("m: note: `m migrate` is now `m sync-schema`", file=sys.stderr)
    return asyncio.run(_sync_schema(args))


def _worker(args: argparse.Namespace) -> int:
    app = load_app(args.app or "")
    _configure_logging(args)
    broker = open_broker(args.broker)
    try:
        asyncio.run(_run_worker(app, broker, args))
    finally:
        _leave_blocked_threads()
    return 0


def _leave_blocked_threads() -> None:
    """Plain ``def`` handlers still running when the worker stopped (their jobs were
    released) keep the process until they return: say so, and let the next SIGINT or
    SIGTERM end it at once."""
    deadline = time.monotonic() + 0.2  # idle pool threads end at once after shutdown
    busy = 0
    for thread in threading.enumerate():
        if thread.name.startswith(JOB_THREAD_PREFIX):
            thread.join(max(0.0, deadline - time.monotonic()))
            busy += thread.is_alive()
    if not busy:
        return

    def leave(signum: int, _: object) -> None:
        log.warning("received %s: leaving now", signal.Signals(signum).name)
        logging.shutdown()
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, leave)
    signal.signal(signal.SIGTERM, leave)
    log.warning(
        "waiting for plain 'def' handlers still running in %d thread(s) to return (their "
        "jobs were released); Ctrl-C or SIGTERM again leaves at once",
        busy,
    )


async def _run_worker(app: App, broker: BrokerProtocol, args: argparse.Namespace) -> None:
    ticker = None
    if not args.no_scheduler:
        ticker = InProcessTickerAdapter(
            app.jobs.values(), broker, grace=args.grace, clock_skew=args.clock_skew
        )
    observer = Metrics(args.concurrency, broker) if args.http and metrics.available() else None
    if ticker is not None:
        ticker.observer = observer or ticker.observer
    worker = Worker(
        app,
        broker,
        ticker=ticker,
        concurrency=args.concurrency,
        threads=args.threads,
        shutdown_timeout=args.shutdown_timeout,
        sync_schema=not args.no_sync_schema,
        observer=observer,
        stall_warning=STALL_WARNING if args.stall_warning is None else args.stall_warning,
    )
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(_signals_stop(worker))  # first: a SIGTERM in start-up stops cleanly
        if args.http:
            exposition = observer.scrape if observer is not None else None
            probes = ProbeServer(
                *parse_address(args.http), worker.liveness, worker.readiness, exposition
            )
            await probes.start()
            stack.push_async_callback(probes.close)
        stack.push_async_callback(broker.close)
        if not await worker.connect(args.connect_timeout):
            return  # stopped while waiting for the broker
        log.info(
            "worker starting: role=%s broker=%s app=%s jobs=%d schedules=%d concurrency=%d pid=%d",
            "worker" if ticker is None else "ticker+worker",
            broker.display_url,
            args.app,
            len(app.jobs),
            sum(1 for _ in app.scheduled()),
            args.concurrency,
            os.getpid(),
        )
        await worker.run()


@contextlib.contextmanager
def _signals_stop(worker: Worker) -> Iterator[None]:
    """SIGTERM/SIGINT stop gracefully; a second one releases running jobs at once.

    Through the event loop where it takes signal handlers; else (Windows, or a loop not
    in the main thread) through :func:`signal.signal`, restored on exit.
    """
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        log.info("received %s", signal.Signals(signum).name)
        if signals == 1:
            worker.stop()
        else:
            worker.abort()

    restore: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError):
            restore[signum] = signal.signal(
                signum, lambda n, _: loop.call_soon_threadsafe(on_signal, n)
            )
    dumps = hasattr(signal, "SIGUSR1")
    if dumps:
        try:
            loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
        except (NotImplementedError, RuntimeError):
            dumps = False
    try:
        yield
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signum in restore:
                signal.signal(signum, restore[signum])
            else:
                loop.remove_signal_handler(signum)
        if dumps:
            loop.remove_signal_handler(signal.SIGUSR1)


def _dump_tasks() -> None:
    """SIGUSR1: log where every task of the worker waits (what a stuck stop waits on)."""
    tasks = asyncio.all_tasks()
    lines = [f"SIGUSR1: {len(tasks)} task(s)"]
    for task in sorted(tasks, key=lambda t: t.get_name()):
        chain: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(chain) < 20:  # the await chain, outermost first
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                chain.append(type(awaited).__name__)
                break
            chain.append(
                f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"
            )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        lines.append(f"  {task.get_name()}: {' -> '.join(chain) or 'not started'}")
    log.warning("\n".join(lines))


def _schedules(args: argparse.Namespace) -> int:
    if getattr(args, "action", None):
        return asyncio.run(_steer(args))
    app = load_app(args.app or "")
    _configure_logging(args)
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
        print(f"{schedule.name}: {runtime.describe(schedule)} (set at runtime)")
        job = app.jobs.get(schedule.job)
        print(f"  overlap: {job.overlap if job else 'unknown: the app has no such job'}")
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


def _aware_time(text: str) -> float:
    """``--until``, ``--from``, ``--to``: an ISO 8601 time with its offset (or Z)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-24T18:00+01:00)"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset or Z: {text!r}")
    return when.timestamp()


async def _steer(args: argparse.Namespace) -> int:
    """``m schedules pause|resume|trigger JOB``."""
    _configure_logging(args)
    if args.action in ("set", "delete"):
        return await _runtime_change(args)
    kwargs = _kwargs_of(args.kwargs) if args.action == "trigger" else {}
    schedule = _code_schedule(args, kwargs)
    broker = _shared_broker(args.broker, f"m schedules {args.action}")
    if Capability.STATE not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: schedules cannot be steered there"
        )
    async with connected(broker):
        if args.action == "pause":
            state = await control.pause(broker, args.job, until=args.until, reason=args.reason)
            until = "" if state.paused_until is None else f" until {_iso(state.paused_until)}"
            print(f"{args.job}: paused{until}; no replica enqueues its slots from its next tick")
        elif args.action == "resume":
            await control.resume(broker, args.job)
            print(f"{args.job}: resumed; its slots are enqueued from the next tick")
        elif args.action == "trigger":
            job_id = await control.trigger(broker, args.job, kwargs)
            print(f"{args.job}: triggered as job {job_id}")
        else:
            done = await control.backfill(broker, args.job, schedule, args.start, args.end)
            for slot, job_id, stored in done.slots:
                said = f"job {job_id}" if stored else f"already enqueued as job {job_id}"
                print(f"  {_iso(slot)}  {tick_deduplication_id(args.job, slot)}  {said}")
            print(
                f"{args.job}: backfilled {len(done.slots)} slot(s), "
                f"{done.stored} new, {len(done.slots) - done.stored} already enqueued"
            )
    return 0


def _code_schedule(args: argparse.Namespace, kwargs: dict[str, Any]) -> Schedule | None:
    """The code schedule JOB names, checked against ``--app`` when given (None for a
    runtime schedule, ``@ID``, which the broker holds)."""
    control.check_name(args.job)
    if args.job.startswith("@"):
        return None
    if not args.app:
        if args.action == "backfill":
            raise ConfigurationError(
                "m schedules backfill needs --app: the schedule is in its code"
            )
        return None
    app = load_app(args.app)
    if args.job not in {spec.name for spec in app.scheduled()}:
        known = ", ".join(sorted(spec.name for spec in app.scheduled())) or "none"
        raise ConfigurationError(f"{args.job!r} is no scheduled job of {args.app} ({known})")
    if args.action == "trigger":
        _check_job(app, args.app, args.job, kwargs)
    return app.jobs[args.job].schedule


async def _runtime_change(args: argparse.Namespace) -> int:
    """``m schedules set ID JOB ...`` and ``m schedules delete ID``."""
    if args.action == "set":
        kwargs = _kwargs_of(args.kwargs)
        schedule = runtime.runtime_schedule(
            args.id,
            args.job,
            cron_expression=args.cron,
            tz=args.tz,
            every_seconds=args.every,
            kwargs=kwargs,
        )
        if args.app:
            _check_job(load_app(args.app), args.app, args.job, kwargs)
    else:
        runtime.validate_id(args.id)
    broker = _shared_broker(args.broker, f"m schedules {args.action}")
    if Capability.STATE not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: it cannot hold runtime schedules"
        )
    async with connected(broker):
        if args.action == "set":
            await runtime.set_schedule(broker, schedule)
            print(
                f"@{args.id}: {runtime.describe(schedule)}; every ticking replica "
                f"follows within {runtime.POLL + 1:g}s"
            )
        elif await runtime.delete_schedule(broker, args.id):
            print(f"@{args.id}: deleted; nothing runs from it once every replica read it")
        else:
            raise ConfigurationError(f"there is no runtime schedule {args.id!r}")
    return 0


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


async def _shared_view(
    url: str, specs: list[JobSpec]
) -> tuple[dict[str, list[str]], list[runtime.RuntimeSchedule]]:
    """What the broker knows: per schedule (code ones and the runtime ones it holds),
    its state (pause, latest slot, last trigger) and the holders of its overlap lease
    (``job id@host:pid``) now; and the runtime schedules."""
    broker = _shared_broker(url, "m schedules --broker")
    stateful = Capability.STATE in broker.capabilities
    leases = Capability.LEASES in broker.capabilities
    if not (stateful or leases):
        raise ConfigurationError(
            f"{broker.display_url} keeps neither state nor leases: it knows nothing more"
        )
    out: dict[str, list[str]] = {}
    async with connected(broker):
        found = await runtime.list_schedules(broker) if stateful else []
        for name in [spec.name for spec in specs] + [s.name for s in found]:
            lines = out[name] = []
            if stateful:
                lines.extend(_state_lines(await control.read(broker, name)))
            if leases:
                holders = sorted(await broker.lease_holders(overlap_key(name)))
                lines.append(f"running: {', '.join(holders) or 'no'}")
    return out, found


def _state_lines(state: control.ScheduleState) -> list[str]:
    if not state.paused:
        lines = ["state: active"]
    else:
        until = "" if state.paused_until is None else f" until {_iso(state.paused_until)}"
        since = "" if state.paused_at is None else f" since {_iso(state.paused_at)}"
        why = "" if state.reason is None else f" ({state.reason})"
        lines = [f"state: paused{until}{since}{why}"]
        if state.paused_until is not None and state.paused_until <= time.time():
            lines[0] += ", lifted by itself"
    last = "none recorded" if state.latest_slot is None else _iso(state.latest_slot)
    lines.append(f"last slot: {last}")
    if state.triggered_at is not None:
        lines.append(f"last trigger: {_iso(state.triggered_at)}")
    return lines


def _check_job(app: App, where: str, job: str, kwargs: dict[str, Any]) -> None:
    """Refuse a job ``app`` does not have, or kwargs its handler cannot take."""
    spec = app.jobs.get(job)
    if spec is None:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise ConfigurationError(f"unknown job {job!r} (jobs in {where}: {known})")
    if (problem := spec.kwargs_problem(kwargs)) is not None:
        raise ConfigurationError(f"--kwargs do not fit job {job!r}: {problem}")


def _kwargs_of(text: str) -> dict[str, Any]:
    """``--kwargs``: a JSON object."""
    try:
        kwargs = loads_strict(text)
    except ValueError as exc:
        raise ConfigurationError(f"--kwargs is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigurationError("--kwargs is nested too deeply") from None
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    return kwargs


def _shared_broker(url: str | None, command: str = "m enqueue") -> BrokerProtocol:
    """The broker of ``url``, which other processes must reach (not memory://)."""
    if not url:
        raise ConfigurationError(
            f"{command} needs a shared broker: pass --broker or set M_BROKER_URL"
        )
    broker = open_broker(url)
    if Capability.CROSS_PROCESS not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} lives inside one process: "
            + (
                "a job enqueued here would be lost when this command exits"
                if command == "m enqueue"
                else f"{command} would see nothing of the workers"
            )
            + "; use a shared broker URL"
        )
    return broker


async def _enqueue(args: argparse.Namespace) -> int:
    app = load_app(args.app) if args.app else None
    _configure_logging(args)
    kwargs = _kwargs_of(args.kwargs)
    if app is not None:
        _check_job(app, args.app, args.job, kwargs)
    broker = _shared_broker(args.broker)
    async with connected(broker):
        if args.delay is not None:
            job_id = await broker.enqueue_in(args.delay, args.job, args.dedup_id, **kwargs)
        elif args.at is not None:
            job_id = await broker.enqueue_at(args.at, args.job, args.dedup_id, **kwargs)
        else:
            job_id = await broker.enqueue(args.job, args.dedup_id, **kwargs)
    print(job_id)
    if app is None:
        print(
            f"m: note: {args.job!r} and its kwargs were not checked (pass --app to check "
            "them against the app before sending)",
            file=sys.stderr,
        )
    return 0


async def _sync_schema(args: argparse.Namespace) -> int:
    _configure_logging(args)
    broker = open_broker(args.broker)
    async with connected(broker):
        plan = await broker.plan_schema()
        print(plan.describe())
        if args.dry_run or plan.in_sync:
            return 1 if plan.refused else 0
        if Capability.CROSS_PROCESS not in broker.capabilities:
            raise ConfigurationError(
                f"{broker.display_url} lives inside one process: what this command syncs is "
                "gone when it exits (a worker syncs its own queue at start)"
            )
        await broker.sync_schema()
        print("applied")
    return 0


def _console(args: argparse.Namespace) -> int:
    _configure_logging(args)
    return console_command.run(args)


if __name__ == "__main__":
    raise SystemExit(main())


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": _worker,
    "schedules": _schedules,
    "enqueue": lambda args: asyncio.run(_enqueue(args)),
    "dead-letters": _dead_letters,
    "jobs": _jobs,
    "status": _status,
    "sync-schema": _sync_schema_command,
    "migrate": _sync_schema_command,
    "console": _console,
}
