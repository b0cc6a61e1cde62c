"""framework-m core: leaderless scheduled and background jobs.

Every ``m worker`` replica runs an :class:`Ticker`; all of them
enqueue each due slot with the same ``deduplication_id`` and the broker keeps
the first. Brokers plug in through :class:`JobQueueProtocol` and friends.
"""

from .about import PROJECT, __version__
from .adapters.registry import connect, open_broker
from .app import App, load_app
from .blocking.client import SyncClient, SyncJob, connect_sync
from .control.jobs import cancel_job, job_of_slot, job_status, wait_result
from .control.schedules import ScheduleDescription, ScheduleHandle
from .control.shared import StateEntry
from .errors import (
    AppLoadError,
    BrokerError,
    ConfigurationError,
    DeliveryLostError,
    FrameworkMError,
    InvalidJobError,
    InvalidLeaseError,
    InvalidMemoError,
    InvalidStateError,
    JobCancelledError,
    JobDefinitionError,
    JobFailedError,
    JobResultError,
    MessageDecodeError,
    ResultTimeoutError,
    ScheduleError,
    SchemaConflictError,
    SchemaMissingError,
    UnknownBrokerError,
    UnknownJobError,
    WorkerFailedError,
)
from .handles import EnqueuedJob, JobHandle
from .jobs import JobContext, JobSpec, Snooze
from .ports.base import BaseBroker
from .ports.capabilities import Capability
from .ports.messages import JobMessage, decode_message, tick_deduplication_id
from .ports.protocols import (
    BrokerProtocol,
    ConsumerProtocol,
    JobQueueProtocol,
    SchemaSyncProtocol,
    TickerProtocol,
)
from .ports.records import (
    BatchJob,
    BrokerStats,
    DeadLetter,
    Delivery,
    PublishResult,
    QueueStats,
)
from .ports.schema import SchemaChange, SchemaPlan, SchemaRaceError
from .ports.statuses import JobState, JobStatus
from .ports.store import StoreProtocol
from .rates import Rate, parse_rate
from .runtime.worker import Worker
from .scheduling.schedules import Cron, Every, Schedule, cron, every
from .scheduling.ticker import Ticker

__all__ = [
    "PROJECT",
    "App",
    "AppLoadError",
    "BaseBroker",
    "BatchJob",
    "BrokerError",
    "BrokerProtocol",
    "BrokerStats",
    "Capability",
    "ConfigurationError",
    "ConsumerProtocol",
    "Cron",
    "DeadLetter",
    "Delivery",
    "DeliveryLostError",
    "EnqueuedJob",
    "Every",
    "FrameworkMError",
    "InvalidJobError",
    "InvalidLeaseError",
    "InvalidMemoError",
    "InvalidStateError",
    "JobCancelledError",
    "JobContext",
    "JobDefinitionError",
    "JobFailedError",
    "JobHandle",
    "JobMessage",
    "JobQueueProtocol",
    "JobResultError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "MessageDecodeError",
    "PublishResult",
    "QueueStats",
    "Rate",
    "ResultTimeoutError",
    "Schedule",
    "ScheduleDescription",
    "ScheduleError",
    "ScheduleHandle",
    "SchemaChange",
    "SchemaConflictError",
    "SchemaMissingError",
    "SchemaPlan",
    "SchemaRaceError",
    "SchemaSyncProtocol",
    "Snooze",
    "StateEntry",
    "StoreProtocol",
    "SyncClient",
    "SyncJob",
    "Ticker",
    "TickerProtocol",
    "UnknownBrokerError",
    "UnknownJobError",
    "Worker",
    "WorkerFailedError",
    "__version__",
    "cancel_job",
    "connect",
    "connect_sync",
    "cron",
    "decode_message",
    "every",
    "job_of_slot",
    "job_status",
    "load_app",
    "open_broker",
    "parse_rate",
    "tick_deduplication_id",
    "wait_result",
]
