"""Cancel marks, seen by the worker: before a run starts, and while it runs.

A run registers before it checks its job's mark, so a cancel is never lost between
the two: either the check sees the mark, or the cancel moves the cancels record on
later, and :class:`CancelWatch` (waiting on that record while runs are registered)
reads the marks of the runs it has and stops the cancelled ones.

Cancels are rare, so a run reads its mark only when one may be there: when a cancel
was made since its job was enqueued (less :data:`MARGIN` seconds: a cancel names a job
enqueued before it). The latest cancel's time is a memo written before the cancels
record moves. While the watch waits on that record (while runs go on, and one wait
longer, so that runs a moment apart find it under way), it keeps the time current
(read again at every move), and a run starting meanwhile reads nothing: a job nobody
cancelled starts without a round trip. A cancel made in the moment before the watch
learns of it (within the store's watch delay) finds its run started, and stops it as
a running one. Before the watch is under way (runs registering after a pause), the
runs of one pass share one read of the memo, begun after they registered.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from ..control import keys
from ..control.shared import shared
from ..observability.observer import Observer
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import CANCELS, LATEST_CANCEL, decode_latest_cancel
from .events import first_of, reraise_if_cancelled

log = logging.getLogger("framework_m.worker")

#: Seconds at most between two reads of the cancels record while runs are registered.
POLL = 1.0
#: Seconds by which the canceller's and the enqueuer's clocks may disagree, far past
#: the ticker's tolerated skew: a job enqueued within this of the latest cancel, or
#: before it, has its mark read.
MARGIN = 300.0


class Cancellation:
    """One run's cancel flag: set from the watch (the event loop), read by the handler
    in any thread; a bool's read and write are atomic, so no lock is needed."""

    __slots__ = ("_on_cancel", "requested")

    def __init__(self) -> None:
        self.requested = False
        self._on_cancel: Callable[[], object] | None = None

    def on_cancel(self, stop: Callable[[], object] | None) -> None:
        """Call ``stop`` when the run is cancelled (at once if it is already); None
        calls nothing."""
        self._on_cancel = stop
        if stop is not None and self.requested:
            stop()

    def request(self) -> None:
        if not self.requested:
            self.requested = True
            if self._on_cancel is not None:
                self._on_cancel()


class CancelWatch:
    """The cancel marks of one worker's runs (brokers with memos and state)."""

    def __init__(self, broker: BrokerProtocol, observer: Observer) -> None:
        self.broker = broker
        self.observer = observer
        self.on = Capability.STORE in broker.capabilities
        self._runs: dict[str, Cancellation] = {}
        self._registered = asyncio.Event()
        self._closed = asyncio.Event()
        self._joining: asyncio.Future[float | None] | None = None  # a read not begun yet
        # The latest cancel's time as the watch keeps it; only while ``_current``: the
        # watch waits on the cancels record, and read the time after its last move.
        self._watched: float | None = None
        self._current = False
        self._version: int | None = None  # of the cancels record, as last watched
        self._started = 0  # runs registered so far

    def close(self) -> None:
        """End :meth:`run` at its next turn (within :data:`POLL` seconds): a broker
        client may swallow the cancellation of a call it was in."""
        self._closed.set()

    async def start(self, job_id: str, cancellation: Cancellation, enqueued_at: float) -> bool:
        """Register a run of ``job_id`` (enqueued at ``enqueued_at``, unix seconds);
        False (and not registered) when it is cancelled."""
        self._runs[job_id] = cancellation
        self._started += 1
        reading = None if self._current else self._latest()  # its read before the watch's
        self._registered.set()
        try:
            latest = self._watched if reading is None else await reading
            maybe = latest is not None and enqueued_at <= latest + MARGIN
            marked = (
                maybe and await shared(self.broker).get_memo(keys.cancel_mark(job_id)) is not None
            )
        except Exception as exc:  # a mark not read is a run not stopped: say so, go on
            reraise_if_cancelled()
            self.observer.broker_error("memo")
            log.warning("%s: its cancel mark could not be read (%s); running it", job_id, exc)
            marked = False
        if marked:
            self.end(job_id)
        return not marked

    def _latest(self) -> Awaitable[float | None]:
        """The latest cancel's time, read after the caller registered; one read serves
        every run that registers before it begins."""
        if self._joining is None:
            self._joining = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().create_task(self._read(self._joining))
        return asyncio.shield(self._joining)

    async def _read(self, answer: asyncio.Future[float | None]) -> None:
        self._joining = None  # runs registering from now on wait for the next read
        try:
            found = decode_latest_cancel(await shared(self.broker).get_memo(LATEST_CANCEL))
        except Exception as exc:  # every run waiting for it reads its own mark instead
            log.debug("cancels: the latest cancel not read (%s); each run reads its mark", exc)
            found = math.inf
        answer.set_result(found)

    def end(self, job_id: str) -> None:
        self._runs.pop(job_id, None)
        if not self._runs:
            self._registered.clear()

    async def run(self) -> None:
        """Watch the cancels record while runs are registered, until :meth:`close`."""
        while True:
            await first_of(self._registered, self._closed)
            if self._closed.is_set():
                return
            try:
                await self._watch()
            except Exception as exc:
                reraise_if_cancelled()
                self.observer.broker_error("state")
                log.debug("cancels: not read (%s); trying again", exc)
                await asyncio.sleep(POLL)
            finally:
                self._current = False

    async def _watch(self) -> None:
        """Keep the latest cancel's time current while runs are registered, and stop
        the registered runs whose job a cancel marked."""
        entry = await shared(self.broker).read_state(CANCELS)
        self._watched = await self._read_latest()
        self._current = True
        if entry is not None and entry.version != self._version:
            self._version = entry.version  # moved since the last watch, or never seen
            await self._check_runs()
        started = -1
        while (self._registered.is_set() or started != self._started) and not self._closed.is_set():
            started = self._started  # no run for a whole wait, none now: the watch rests
            entry = await shared(self.broker).wait_state(CANCELS, self._version, timeout=POLL)
            if entry is not None and entry.version != self._version:
                self._version = entry.version
                self._current = False  # runs read their marks until the time is read
                self._watched = await self._read_latest()
                self._current = True
                await self._check_runs()

    async def _read_latest(self) -> float | None:
        return decode_latest_cancel(await shared(self.broker).get_memo(LATEST_CANCEL))

    async def _check_runs(self) -> None:
        for job_id, cancellation in list(self._runs.items()):
            if await shared(self.broker).get_memo(keys.cancel_mark(job_id)) is not None:
                log.info("%s: cancelled by request; stopping it", job_id)
                cancellation.request()
