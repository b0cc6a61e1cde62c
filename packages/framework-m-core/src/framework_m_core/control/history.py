"""The last runs of each schedule: which slot, on which replica, how long, how it ended.

One record a schedule, the state record ``history:{schedule}`` (:mod:`.keys`), of
settled deliveries (:mod:`.settled`): at most :data:`MOST` runs and none finished more
than :data:`MAX_AGE` seconds ago. The worker that settles a delivery of a ticked or
triggered job (its code schedule's or a runtime schedule's) adds it within a second,
off the run's path (:mod:`~framework_m_core.runtime.activity`): a history that cannot
be written is logged and never holds a job up.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ports.protocols import BrokerProtocol
from . import keys, settled
from .settled import SettledRun

MOST = 50  # runs kept a schedule
MAX_AGE = 7 * 86_400.0  # seconds a run is kept after it finished


async def record_runs(broker: BrokerProtocol, schedule: str, runs: Sequence[SettledRun]) -> bool:
    """Add ``runs`` to ``schedule``'s history; False when other writers won every round."""
    return await settled.merge(broker, keys.history(schedule), runs, most=MOST, max_age=MAX_AGE)


async def schedule_history(broker: BrokerProtocol, schedule: str) -> list[SettledRun]:
    """``schedule``'s last runs, newest first (none when it has no history)."""
    return await settled.read(broker, keys.history(schedule), max_age=MAX_AGE)
