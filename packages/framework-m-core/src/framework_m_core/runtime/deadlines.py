"""Deadlines: the time limit of each run (its job's ``timeout``), one timer for all.

A run past its deadline has its task cancelled, as :func:`asyncio.timeout` would, and
the run then reads the cancel as its own (:meth:`Deadlines.stop`). The runs of one
job share its timeout, so within one timeout appending keeps them in due order; the
one timer is set for the earliest deadline of all, and a run that ends in time costs
two dict operations (no timer of its own, no heap entry).
"""

from __future__ import annotations

import asyncio
import math


class Deadline:
    """One run's time limit: ``at`` on the event loop's clock."""

    __slots__ = ("at", "cancelling", "expired", "task", "timeout")

    def __init__(self, task: asyncio.Task[object], timeout: float, at: float) -> None:
        self.task, self.timeout, self.at = task, timeout, at
        self.cancelling = task.cancelling()  # cancels asked of the task before this one
        self.expired = False


class Deadlines:
    """The deadlines of one worker's runs."""

    def __init__(self) -> None:
        self._by_timeout: dict[float, dict[int, Deadline]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def start(self, timeout: float) -> Deadline:
        """Cancel the current task ``timeout`` seconds from now unless :meth:`stop`
        comes first."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        limit = Deadline(task, timeout, loop.time() + timeout)
        self._by_timeout.setdefault(timeout, {})[id(limit)] = limit
        if limit.at < self._timer_at:
            self._arm(loop, limit.at)
        return limit

    def stop(self, limit: Deadline) -> bool:
        """End ``limit``; whether it expired and its cancel is the only one the task
        was asked for since :meth:`start` (that cancel is then taken back). Called
        again, it does nothing and says False."""
        runs = self._by_timeout.get(limit.timeout)
        if runs is None or runs.pop(id(limit), None) is None:
            return False
        if not runs:
            del self._by_timeout[limit.timeout]
        return limit.expired and limit.task.uncancel() <= limit.cancelling

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(at, self._expire)
        self._timer_at = at

    def _expire(self) -> None:
        """Cancel the runs past their deadline; set the timer for the next one."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        upcoming = math.inf
        for runs in self._by_timeout.values():
            for limit in runs.values():
                if limit.at > now:
                    upcoming = min(upcoming, limit.at)
                    break
                if not limit.expired:
                    limit.expired = True
                    limit.task.cancel()
        if upcoming < math.inf:
            self._arm(loop, upcoming)
