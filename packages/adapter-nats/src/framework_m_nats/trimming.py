"""Keeping the job stream bounded: acked jobs older than the dedup window are removed.

The stream keeps limits retention (schema.py says why: JetStream rebuilds its
duplicate map after a restart only from messages still stored), so without this an
acked job stayed until ``max_age``: at 300 jobs a second, days of them. Every consuming
worker samples the stream's last sequence now and then; once a sample is older than
the dedup window (and a margin), every message up to it was stored outside the window,
and the ones below the durable consumer's ack floor are done: those are purged, subject
by subject (jobs, delayed). The floor is read only while the consumer has nothing
outstanding: nats-server 2.9 can move it past a job whose reservation expired and that
waits to be delivered again (a worker frozen past its ack_wait), and a purge then
loses that job. A queue busy without pause is trimmed at its next quiet moment. What
a restart needs for deduplication, the window's messages, and every job not acked yet
stay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nats.js import JetStreamContext

from .delays import stop_task
from .errors import describe
from .settings import NatsSettings

log = logging.getLogger("framework_m.nats")

MARGIN = 2.0  # seconds beyond the dedup window before a sample counts as outside it


def trim_every(window: float) -> float:
    """Seconds between passes: a quarter of the window, from 1 s to 60 s."""
    return min(60.0, max(1.0, window / 4))


class StreamTrimmer:
    """Purges acked jobs stored outside the dedup window while the worker consumes."""

    def __init__(
        self,
        settings: NatsSettings,
        js: Callable[[], JetStreamContext],
        window: Callable[[], float],
    ) -> None:
        self.s, self._js, self._window = settings, js, window
        self._task: asyncio.Task[None] | None = None
        self._samples: list[tuple[float, int]] = []  # (monotonic time, the last sequence)
        self._floors: dict[str, int] = {}  # subject: the sequence purged below
        self.passes = 0

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="framework-m stream trim")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        failed = False
        while True:
            try:
                await self.trim()
                failed = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.log(
                    logging.DEBUG if failed else logging.WARNING,
                    "nats: could not remove acked jobs from stream %s (%s); trying again",
                    self.s.stream,
                    describe(exc),
                )
                failed = True
            await asyncio.sleep(trim_every(self._window()))

    async def trim(self) -> None:
        """One pass: sample the stream, and purge what an old enough sample allows."""
        js, s = self._js(), self.s
        now = time.monotonic()
        info = await js.stream_info(s.stream)
        self._samples.append((now, info.state.last_seq))
        self.passes += 1
        outside = now - self._window() - MARGIN
        old = [seq for at, seq in self._samples if at <= outside]
        self._samples = [(at, seq) for at, seq in self._samples if at > outside]
        if not old:
            return
        self._samples.insert(0, (outside, max(old)))  # still the bound next time
        below = max(old) + 1
        before = info.state.messages
        purged = False
        for consumer, subject in (
            (s.consumer, s.jobs_subject),
            (s.delayed_consumer, s.delayed_subject),
        ):
            acked = await js.consumer_info(s.stream, consumer)
            if acked.num_ack_pending or acked.num_redelivered:
                continue  # its ack floor may pass a job still to be delivered again
            floor = acked.ack_floor.stream_seq + 1 if acked.ack_floor else 0
            upto = min(floor, below)
            # Only above the stream's first sequence: nats-server 2.9 reads a filtered
            # purge below 2 as "the whole subject".
            if upto > max(info.state.first_seq, self._floors.get(subject, 0)):
                await js.purge_stream(s.stream, seq=upto, subject=subject)
                self._floors[subject] = upto
                purged = True
        if purged:
            after = (await js.stream_info(s.stream)).state.messages
            if after < before:
                log.info(
                    "nats: removed %d acked job(s) older than the dedup window from stream "
                    "%s; %d stored",
                    before - after,
                    s.stream,
                    after,
                )
