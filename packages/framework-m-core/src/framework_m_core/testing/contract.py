"""``BrokerContract``: every area of the contract suite in one class."""

from __future__ import annotations

from .batch import BatchContract
from .connection import ConnectionContract
from .consume import ConsumeContract
from .delayed import DelayedContract
from .enqueue import EnqueueContract
from .hostile import HostileInputContract
from .processes import ProcessContract
from .runtime import WorkerContract
from .schema_sync import SchemaContract
from .stats import StatsContract


class BrokerContract(
    EnqueueContract,
    BatchContract,
    DelayedContract,
    ConsumeContract,
    ConnectionContract,
    SchemaContract,
    WorkerContract,
    HostileInputContract,
    StatsContract,
    ProcessContract,
):
    """The whole contract suite; see :mod:`framework_m_core.testing`."""


AREAS = BrokerContract.__bases__
