"""An example app: a 1-second schedule, a 5-second cron, a nightly report, an on-demand job.

Run it with ``m worker --app examples.heartbeat``; start it in several
terminals against a shared broker and each slot still runs once. A scheduled job
enqueued by hand (``m enqueue every_second --broker URL``) runs too: its
``ctx.scheduled_at`` is None, since no slot is behind it.
"""

from framework_m_core import App, JobContext

app = App()


@app.job(every=1)
async def every_second(ctx: JobContext) -> None:
    if ctx.scheduled_at is None:  # enqueued by hand, not by the ticker
        ctx.log.info("every_second enqueued by hand at %s", ctx.enqueued_at)
        return
    ctx.log.info(
        "every_second slot=%d scheduled_at=%s", ctx.scheduled_at.timestamp(), ctx.scheduled_at
    )


@app.job(schedule="*/5 * * * * *")
async def heartbeat(ctx: JobContext) -> None:
    ctx.log.info("heartbeat for %s", ctx.scheduled_at)


@app.job(schedule="30 2 * * *", tz="Europe/Berlin")
async def nightly_report(ctx: JobContext) -> None:
    ctx.log.info("nightly report for %s", ctx.scheduled_at)


@app.job(max_attempts=5, timeout=60)
async def send_email(ctx: JobContext, to: str, subject: str) -> None:
    ctx.log.info("sending %r to %s", subject, to)
