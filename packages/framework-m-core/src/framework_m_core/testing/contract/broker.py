"""``BrokerContract``: every area of the contract suite in one class."""

from __future__ import annotations

from .batch import BatchContract
from .cancel import CancelContract
from .connection import ConnectionContract
from .consume import ConsumeContract
from .delayed import DelayedContract
from .enqueue import EnqueueContract
from .fencing import FencingContract
from .hostile_input import HostileInputContract
from .lease import LeaseContract
from .memo import MemoContract
from .process import ProcessContract
from .schema import SchemaContract
from .state import StateContract
from .stats import StatsContract
from .status import StatusContract
from .store import StoreContract
from .waiting import WaitingContract
from .worker import WorkerContract


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
    WaitingContract,
    StoreContract,
    LeaseContract,
    StateContract,
    MemoContract,
    StatusContract,
    CancelContract,
    ProcessContract,
    FencingContract,
):
    """The whole contract suite; see :mod:`framework_m_core.testing`."""


AREAS = BrokerContract.__bases__
