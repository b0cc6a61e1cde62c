"""An example app: a heartbeat every 2 seconds, a nightly report, and an on-demand job.

Run it with ``m worker --app examples.heartbeat``.
"""

from framework_m_core import App, JobContext

app = App()


@app.job(every=2)
async def heartbeat(ctx: JobContext) -> None:
    ctx.log.info("heartbeat for slot %s (attempt %d)", ctx.scheduled_at, ctx.attempt)


@app.job(schedule="30 2 * * *", tz="Europe/Berlin")
async def nightly_report(ctx: JobContext) -> None:
    ctx.log.info("nightly report for %s", ctx.scheduled_at)


@app.job(max_attempts=5, timeout=60)
async def send_email(ctx: JobContext, to: str, subject: str) -> None:
    ctx.log.info("sending %r to %s", subject, to)
