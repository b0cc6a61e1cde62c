"""PostgreSQL's notifications: the table's trigger notifies each commit of rows, and the
relay, listening on a connection of its own, wakes at once instead of at its next look."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import sqlalchemy as sa

from .table import NOTIFY_CHANNEL

log = logging.getLogger("framework_m.outbox")

#: Seconds before listening again after the connection was lost, at most.
RECONNECT_MAX = 10.0


class Listener:
    """Sets ``wake`` at each notification on :data:`~.table.NOTIFY_CHANNEL`; listens
    again after a lost connection (the relay looks every few seconds meanwhile)."""

    def __init__(self, url: sa.URL, wake: asyncio.Event) -> None:
        self.url = url
        self.wake = wake
        self.listening = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        try:
            import psycopg
        except ImportError:
            log.info("outbox relay: psycopg is not installed: looking, not listening")
            return
        conninfo = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.listening = True
                    if failures:
                        log.info("outbox relay: listening again")
                    failures = 0
                    self.wake.set()  # commits while not listening: look now
                    async for _ in conn.notifies():
                        self.wake.set()
            except (psycopg.Error, OSError) as exc:
                failures += 1
                if failures == 1:
                    log.warning(
                        "outbox relay: not listening to %s (%s): looking now and then",
                        NOTIFY_CHANNEL,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    )
            finally:
                self.listening = False
            await asyncio.sleep(min(RECONNECT_MAX, 0.5 * 2**failures))
