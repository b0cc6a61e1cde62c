"""Delayed jobs on NATS: stored at once on the delayed subject, moved when due.

JetStream 2.9 cannot hold a message back, so a delayed job is published to
``<prefix>.delayed`` (same stream: the dedup window covers both subjects) with
its due time in a header. Every consuming worker runs a mover on the durable
``<consumer>_delayed``: a job not yet due is negatively acked with the time
left as delay, so the server delivers it again when it is due; a due one is
published to the jobs subject (``Nats-Msg-Id`` ``delayed:<stream seq>``, so a
move repeated after a lost ack stores nothing) and acked. Nothing is held in
memory: a restart of the server or of every worker loses no delayed job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from .errors import describe
from .settings import NatsSettings
from .wire import MSG_ID, due_ms

log = logging.getLogger("framework_m.nats")

_BATCH = 100
_EARLY = 0.02  # seconds: a job due this soon is waited for here, not nak-ed
_BACKOFF = 1.0
_STOP_WAIT = 5.0

Publish = Callable[[str, bytes, dict[str, str]], Awaitable[Any]]


class DelayMover:
    """Moves due delayed jobs to the jobs subject while the worker consumes."""

    def __init__(
        self, settings: NatsSettings, js: Callable[[], JetStreamContext], publish: Publish
    ) -> None:
        self.s, self._js, self._publish = settings, js, publish
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._stopped = False
            self._task = asyncio.create_task(self._run(), name="framework-m delayed jobs")

    async def stop(self) -> None:
        """Stop moving (bounded: see :func:`stop_task`)."""
        task, self._task, self._stopped = self._task, None, True
        await stop_task(task)

    async def _run(self) -> None:
        psub: JetStreamContext.PullSubscription | None = None
        while not self._stopped:
            try:
                if psub is None:
                    psub = await self._js().pull_subscribe_bind(
                        self.s.delayed_consumer, self.s.stream
                    )
                try:
                    msgs = await psub.fetch(_BATCH, timeout=1.0)
                except TimeoutError:
                    continue
                for msg in msgs:
                    await self._handle(msg)
            except asyncio.CancelledError:
                raise
            except NotFoundError:
                log.warning(
                    "nats: consumer %s does not exist: delayed jobs wait until `m sync-schema`",
                    self.s.delayed_consumer,
                )
                psub = None
                await asyncio.sleep(30)
            except Exception as exc:  # the server is away, say: try again shortly
                log.debug("nats: moving delayed jobs failed (%s); trying again", describe(exc))
                psub = None
                await asyncio.sleep(_BACKOFF)

    async def _handle(self, msg: Any) -> None:
        due = due_ms(msg.headers)
        left = _left(due)
        if left > _EARLY:
            await msg.nak(delay=left)
            return
        if left > 0:  # a nak's delay can end a little early: never move before due
            await asyncio.sleep(left)
        seq = msg.metadata.sequence.stream if msg.metadata.sequence else 0
        await self._publish(self.s.jobs_subject, msg.data, {MSG_ID: f"delayed:{seq}"})
        await msg.ack()


def _left(due: int | None) -> float:
    """Seconds until ``due`` (unix ms); 0 or less once due or without a due time."""
    return 0.0 if due is None else due / 1000 - time.time()


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it, at most a few seconds: nats-py may swallow a
    cancellation (a fetch on a connection that closed raises ConnectionClosedError)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
            async with asyncio.timeout(_STOP_WAIT):
                await task
