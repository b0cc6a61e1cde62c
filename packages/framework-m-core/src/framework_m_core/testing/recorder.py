"""The app the multi-process tests run in ``m worker`` processes.

``record`` runs every second and appends ``slot pid attempt`` to $FM_SLOT_LOG;
``slow`` appends ``start``/``end`` lines around a sleep to $FM_SLOW_LOG.
"""

from __future__ import annotations

import asyncio
import os

from ..app import App
from ..jobs import JobContext

app = App()


def _append(variable: str, line: str) -> None:
    fd = os.open(os.environ[variable], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: atomic between processes
    finally:
        os.close(fd)


@app.job(every=1)
async def record(ctx: JobContext) -> None:
    assert ctx.scheduled_at is not None
    _append("FM_SLOT_LOG", f"{int(ctx.scheduled_at.timestamp())} {os.getpid()} {ctx.attempt}\n")


@app.job(max_attempts=3)
async def slow(ctx: JobContext, seconds: float) -> None:
    _append("FM_SLOW_LOG", f"start {ctx.job_id} {os.getpid()} {ctx.attempt}\n")
    await asyncio.sleep(seconds)
    _append("FM_SLOW_LOG", f"end {ctx.job_id} {os.getpid()} {ctx.attempt}\n")
