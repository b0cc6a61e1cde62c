"""``m worker``: run jobs, and tick schedules unless ``--no-scheduler``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..adapters.registry import open_broker
from ..app import App, load_app
from ..observability import metrics
from ..observability.metrics import Metrics
from ..observability.probes import ProbeServer, parse_address
from ..ports.protocols import BrokerProtocol
from ..runtime.stalls import STALL_WARNING
from ..runtime.worker import (
    DEFAULT_CONCURRENCY,
    DEFAULT_SHUTDOWN_TIMEOUT,
    JOB_THREAD_PREFIX,
    Worker,
)
from ..scheduling.ticker import DEFAULT_CLOCK_SKEW, Ticker
from .options import (
    Subparsers,
    app_arg,
    broker_arg,
    configure_logging,
    env_flag,
    env_seconds,
    positive_int,
    seconds,
)
from .outbox import outbox_arg, relay

log = logging.getLogger("framework_m.cli")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    w = sub.add_parser("worker", help="run jobs, and tick schedules unless --no-scheduler")
    app_arg(w)
    broker_arg(w)
    w.add_argument("--no-scheduler", action="store_true", help="run jobs only; publish no ticks")
    w.add_argument(
        "--concurrency",
        type=positive_int,
        default=DEFAULT_CONCURRENCY,
        help=f"jobs at once ({DEFAULT_CONCURRENCY})",
    )
    w.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads for plain 'def' handlers (default: --concurrency)",
    )
    w.add_argument(
        "--grace",
        type=seconds,
        default=None,
        help="latest a slot may be enqueued, in seconds (default: from the dedup window, <= 30)",
    )
    w.add_argument(
        "--clock-skew",
        type=seconds,
        default=DEFAULT_CLOCK_SKEW,
        help=f"clock difference tolerated between replicas, seconds ({DEFAULT_CLOCK_SKEW:g})",
    )
    w.add_argument(
        "--shutdown-timeout",
        type=seconds,
        default=DEFAULT_SHUTDOWN_TIMEOUT,
        help="seconds running jobs may finish after SIGTERM/SIGINT "
        f"({DEFAULT_SHUTDOWN_TIMEOUT:g}; keep it below the orchestrator's grace period)",
    )
    w.add_argument(
        "--stall-warning",
        type=seconds,
        default=env_seconds("M_STALL_WARNING"),
        metavar="SECONDS",
        help="warn, naming the jobs running and the code, when a handler blocks the event "
        f"loop this long (env M_STALL_WARNING; default {STALL_WARNING:g}; 0: off)",
    )
    w.add_argument(
        "--connect-timeout",
        type=seconds,
        default=env_seconds("M_CONNECT_TIMEOUT"),
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
        dest="no_sync_schema",
        action="store_true",
        default=env_flag("M_NO_SYNC_SCHEMA"),
        help="check the schema read-only and refuse to start when it differs "
        "(run `m sync-schema` before deploying; env M_NO_SYNC_SCHEMA=1)",
    )
    outbox_arg(w, "relay the outbox table of this database to the broker")
    w.add_argument(
        "--no-outbox",
        action="store_true",
        default=env_flag("M_NO_OUTBOX"),
        help="relay no outbox though one is configured (env M_NO_OUTBOX=1)",
    )
    return w


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app or "")
    configure_logging(args)
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
        ticker = Ticker(app.jobs.values(), broker, grace=args.grace, clock_skew=args.clock_skew)
    observer = None
    if args.http and metrics.available():
        schedules = sum(1 for _ in app.scheduled())
        observer = Metrics(args.concurrency, broker, schedules=schedules, ticker=ticker is not None)
    if ticker is not None:
        ticker.observer = observer or ticker.observer
    relays = []
    if args.outbox_url and not args.no_outbox:
        relays.append(
            relay(
                args.outbox_url,
                broker,
                sync_schema=not args.no_sync_schema,
                clock_skew=args.clock_skew,
                observer=observer,
            )
        )
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
        relays=relays,
    )
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(signals_stop(worker))  # first: a SIGTERM in start-up stops cleanly
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
            "worker starting: role=%s broker=%s app=%s jobs=%d schedules=%d concurrency=%d "
            "pid=%d outbox=%s",
            "worker" if ticker is None else "ticker+worker",
            broker.display_url,
            args.app,
            len(app.jobs),
            sum(1 for _ in app.scheduled()),
            args.concurrency,
            os.getpid(),
            "relayed" if relays else "off",
        )
        await worker.run()


@contextlib.contextmanager
def signals_stop(worker: Worker) -> Iterator[None]:
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
