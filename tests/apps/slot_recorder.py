"""A 1-second schedule whose every run appends ``slot pid attempt`` to $FM_SLOT_LOG."""

import os

from framework_m_core import App, JobContext

app = App()


@app.job(every=1)
async def record(ctx: JobContext) -> None:
    assert ctx.scheduled_at is not None
    line = f"{int(ctx.scheduled_at.timestamp())} {os.getpid()} {ctx.attempt}\n"
    fd = os.open(os.environ["FM_SLOT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: atomic between processes
    finally:
        os.close(fd)
