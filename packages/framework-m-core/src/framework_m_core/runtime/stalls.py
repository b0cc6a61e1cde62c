"""The event loop's watchdog: a handler that blocks the loop (``time.sleep`` or a blocking
client in an ``async def``) stalls every job, the ticker and the broker's heartbeats of
its worker. A thread of its own notices the loop has not turned for longer than the
threshold and names the jobs running and where the loop is stuck, while it still is."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from ..observability.observer import Observer

log = logging.getLogger("framework_m.worker")

STALL_WARNING = 1.0  # seconds the loop may stay blocked before the warning
_OURS = (str(Path(asyncio.__file__).parent), str(Path(__file__).parent.parent))
FIX = (
    "a blocked event loop holds up every job, the ticker and the broker's heartbeats: "
    "make the handler a plain `def` (it then runs in a thread) or wrap the blocking call "
    "in `await asyncio.to_thread(...)`"
)


class StallWatchdog:
    """Measures how late the event loop wakes (:meth:`Observer.loop_lag`) and warns,
    from a thread, once per stall longer than ``threshold`` seconds
    (:meth:`Observer.loop_stalled`), naming ``running()`` (the jobs running) and the
    code the loop is in."""

    def __init__(
        self, threshold: float, observer: Observer, running: Callable[[], list[str]]
    ) -> None:
        if threshold <= 0:
            raise ValueError("threshold must be > 0")
        self.threshold = threshold
        self.observer = observer
        self._running = running
        self._tick = min(0.25, threshold / 4)
        self._beat = time.monotonic()
        self._reported: float | None = None  # the beat of the stall already reported
        self._stop = threading.Event()
        self.stalls = 0

    async def run(self) -> None:
        """Beat until cancelled, with the watching thread beside."""
        main = threading.get_ident()
        watcher = threading.Thread(
            target=self._watch, args=(main,), name="framework-m-watchdog", daemon=True
        )
        self._beat = time.monotonic()
        watcher.start()
        try:
            while True:
                before = self._beat = time.monotonic()
                await asyncio.sleep(self._tick)
                lag = max(0.0, time.monotonic() - before - self._tick)
                self.observer.loop_lag(lag)
                if self._reported == before:
                    log.warning("the event loop runs again, after %.1fs blocked", lag)
                    self._reported = None
        finally:
            self._stop.set()
            watcher.join(1.0)

    def _watch(self, main: int) -> None:
        while not self._stop.wait(self._tick / 2):
            beat = self._beat
            blocked = time.monotonic() - beat - self._tick
            if blocked < self.threshold or self._reported == beat:
                continue
            self._reported = beat
            self.stalls += 1
            self.observer.loop_stalled()
            running = self._running()
            log.warning(
                "the event loop has been blocked for %.1fs (jobs running: %s), in %s; %s",
                blocked,
                ", ".join(running) or "none",
                _where(sys._current_frames().get(main)),
                FIX,
            )


def _where(frame: object) -> str:
    """The innermost line of the blocked thread's stack outside asyncio and framework-m."""
    if frame is None:
        return "unknown code"
    stack = traceback.extract_stack(frame)  # type: ignore[arg-type]
    theirs = [f for f in stack if not f.filename.startswith(_OURS)]
    shown = (theirs or stack)[-1:]
    return ", ".join(
        f"{f.filename}:{f.lineno} in {f.name}" + (f" ({f.line})" if f.line else "") for f in shown
    )
