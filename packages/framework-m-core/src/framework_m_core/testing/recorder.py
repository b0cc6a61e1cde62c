"""The app the multi-process tests run in ``m worker`` processes.

``record`` runs every second (``overlap="allow"``) and appends ``slot pid attempt start``
(unix time) to $FM_SLOT_LOG;
``slow`` appends ``start``/``end`` lines around a sleep to $FM_SLOW_LOG.
With $FM_OVERLAP_LOG set, ``overlapping`` runs every second for 2.5 s (``overlap="skip"``)
and appends ``start|end|stop time slot pid attempt`` lines (``stop``: cancelled); with
$FM_LIMIT_LOG set, ``limited`` (``concurrency=2``) appends ``start|end time n pid
attempt`` around 0.4 s.
With $FM_STEER_LOG set, ``steered`` (every second) and ``hourly`` append
``name slot pid attempt dedup_id``; with $FM_CATCHUP_LOG set, ``caught`` runs every
10 s with ``catchup_window=600`` and appends ``slot pid attempt``; with
$FM_RUNTIME_LOG set, ``tenant_report(tenant)``, for runtime schedules, appends
``slot pid attempt tenant dedup_id``; with $FM_STATUS_LOG set, ``add(a, b)`` returns
the sum, ``always_fails`` (one attempt) raises, ``marked`` and ``sleeps_30``
append ``name job_id pid attempt [start|stopped]``, and ``fails_until(marker)`` (one
attempt) raises while the file ``marker`` is missing, else appends ``fails_until job_id
pid attempt ok``. With $FM_FENCE_LOG set, ``fenced(n)`` (``concurrency=3``) appends
``start``, four ``step`` lines 0.25 s apart and ``end`` as ``kind time n pid attempt``,
or ``stop`` when it is cancelled. With $FM_RATE_LOG set, ``rated(n, tenant)``
(``rate_limit="10/s"`` per tenant) appends ``start time tenant n pid attempt``. With
$FM_UNIQUE_LOG set, ``unique_sleeper(tenant)`` (``unique=("tenant",)``) appends ``start
job_id pid attempt`` and sleeps a minute. With $FM_DEBOUNCE_LOG set, ``debounced(n)``
(``debounce=1``) appends ``start time n pid attempt``.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from ..app import App
from ..jobs import JobContext

app = App()


def _append(variable: str, line: str) -> None:
    fd = os.open(os.environ[variable], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: atomic between processes
    finally:
        os.close(fd)


# Its tests count enqueues and deliveries: a slot whose run starts late (a cluster still
# electing) must not be skipped for overlapping the next. ``overlapping`` tests overlap.
@app.job(every=1, overlap="allow")
async def record(ctx: JobContext) -> None:
    assert ctx.scheduled_at is not None
    slot, pid = int(ctx.scheduled_at.timestamp()), os.getpid()
    _append("FM_SLOT_LOG", f"{slot} {pid} {ctx.attempt} {time.time():.3f}\n")


@app.job(max_attempts=3)
async def slow(ctx: JobContext, seconds: float) -> None:
    _append("FM_SLOW_LOG", f"start {ctx.job_id} {os.getpid()} {ctx.attempt}\n")
    await asyncio.sleep(seconds)
    _append("FM_SLOW_LOG", f"end {ctx.job_id} {os.getpid()} {ctx.attempt}\n")


if os.environ.get("FM_OVERLAP_LOG"):

    @app.job(every=1, overlap="skip", max_attempts=5)
    async def overlapping(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        slot, pid = int(ctx.scheduled_at.timestamp()), os.getpid()
        _append("FM_OVERLAP_LOG", f"start {time.time():.6f} {slot} {pid} {ctx.attempt}\n")
        try:
            await asyncio.sleep(2.5)
        except asyncio.CancelledError:
            _append("FM_OVERLAP_LOG", f"stop {time.time():.6f} {slot} {pid} {ctx.attempt}\n")
            raise
        _append("FM_OVERLAP_LOG", f"end {time.time():.6f} {slot} {pid} {ctx.attempt}\n")


if os.environ.get("FM_LIMIT_LOG"):

    @app.job(concurrency=2, max_attempts=1)
    async def limited(ctx: JobContext, n: int) -> None:
        pid = os.getpid()
        _append("FM_LIMIT_LOG", f"start {time.time():.6f} {n} {pid} {ctx.attempt}\n")
        await asyncio.sleep(0.4)
        _append("FM_LIMIT_LOG", f"end {time.time():.6f} {n} {pid} {ctx.attempt}\n")


if os.environ.get("FM_STEER_LOG"):

    @app.job(every=1, overlap="allow")
    async def steered(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        slot = int(ctx.scheduled_at.timestamp())
        _append(
            "FM_STEER_LOG", f"steered {slot} {os.getpid()} {ctx.attempt} {ctx.deduplication_id}\n"
        )

    @app.job(every=3600)
    async def hourly(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        slot = int(ctx.scheduled_at.timestamp())
        _append(
            "FM_STEER_LOG", f"hourly {slot} {os.getpid()} {ctx.attempt} {ctx.deduplication_id}\n"
        )


if os.environ.get("FM_CATCHUP_LOG"):

    @app.job(every=10, catchup_window=600, overlap="allow")
    async def caught(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        slot = int(ctx.scheduled_at.timestamp())
        _append("FM_CATCHUP_LOG", f"{slot} {os.getpid()} {ctx.attempt}\n")


if os.environ.get("FM_RUNTIME_LOG"):

    @app.job(overlap="allow")
    async def tenant_report(ctx: JobContext, tenant: int) -> None:
        """Run by runtime schedules only: it has no schedule of its own."""
        assert ctx.scheduled_at is not None
        slot = int(ctx.scheduled_at.timestamp())
        line = f"{slot} {os.getpid()} {ctx.attempt} {tenant} {ctx.deduplication_id}\n"
        _append("FM_RUNTIME_LOG", line)


if os.environ.get("FM_STATUS_LOG"):

    @app.job
    async def add(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    @app.job(max_attempts=1)
    async def always_fails(ctx: JobContext) -> None:
        raise RuntimeError("failing on purpose")

    @app.job
    async def marked(ctx: JobContext) -> None:
        _append("FM_STATUS_LOG", f"marked {ctx.job_id} {os.getpid()} {ctx.attempt}\n")

    @app.job(max_attempts=1)
    async def fails_until(ctx: JobContext, marker: str) -> None:
        if not Path(marker).exists():  # noqa: ASYNC240 - one stat, in a test app
            raise RuntimeError(f"{marker} is missing")
        _append("FM_STATUS_LOG", f"fails_until {ctx.job_id} {os.getpid()} {ctx.attempt} ok\n")

    @app.job(max_attempts=3)
    async def sleeps_30(ctx: JobContext) -> None:
        line = f"sleeps_30 {ctx.job_id} {os.getpid()} {ctx.attempt}"
        _append("FM_STATUS_LOG", f"{line} start\n")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            _append("FM_STATUS_LOG", f"{line} stopped\n")
            raise


if os.environ.get("FM_FENCE_LOG"):

    @app.job(concurrency=3, max_attempts=5)
    async def fenced(ctx: JobContext, n: int) -> None:
        def note(kind: str) -> None:
            _append("FM_FENCE_LOG", f"{kind} {time.time():.6f} {n} {os.getpid()} {ctx.attempt}\n")

        note("start")
        try:
            for _ in range(4):
                await asyncio.sleep(0.25)
                note("step")
        except asyncio.CancelledError:
            note("stop")
            raise
        note("end")


if os.environ.get("FM_RATE_LOG"):

    @app.job(rate_limit="10/s", rate_key="tenant")
    async def rated(ctx: JobContext, n: int, tenant: str) -> None:
        line = f"start {time.time():.6f} {tenant} {n} {os.getpid()} {ctx.attempt}\n"
        _append("FM_RATE_LOG", line)


if os.environ.get("FM_UNIQUE_LOG"):

    @app.job(unique=("tenant",))
    async def unique_sleeper(ctx: JobContext, tenant: str) -> None:
        _append("FM_UNIQUE_LOG", f"start {ctx.job_id} {os.getpid()} {ctx.attempt}\n")
        await asyncio.sleep(60)


if os.environ.get("FM_DEBOUNCE_LOG"):

    @app.job(debounce=1)
    async def debounced(ctx: JobContext, n: int) -> None:
        _append("FM_DEBOUNCE_LOG", f"start {time.time():.6f} {n} {os.getpid()} {ctx.attempt}\n")
