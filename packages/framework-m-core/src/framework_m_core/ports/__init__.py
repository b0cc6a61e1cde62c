"""The ports and the adapter SDK: everything a broker adapter imports, from one place.

The ports (:mod:`.protocols`) declare every method an adapter implements, each
docstring its contract. Around them: the records they exchange (:mod:`.records`),
the optional promises an adapter declares (:mod:`.capabilities`), the schema
plan (:mod:`.schema`), the store port and its base (:mod:`.store`,
:mod:`.store_base`), the job message and its wire format (:mod:`.messages`),
:class:`BaseBroker` with the half every adapter shares (:mod:`.base`), calls
batched per event-loop pass (:mod:`.batching`), URL helpers (:mod:`.urls`) and what a
server port says first (:mod:`~framework_m_core.ports.greeting`).
An adapter writes ``from framework_m_core.ports import BaseBroker, Delivery, ...``.
"""

from ..errors import (
    BrokerError,
    ConfigurationError,
    DeliveryLostError,
    FrameworkMError,
    InvalidJobError,
    InvalidRecordError,
    MessageDecodeError,
    SchemaConflictError,
    SchemaMissingError,
)
from .base import DEFAULT_MAX_JOB_SIZE, BaseBroker, BrokerSettings, max_job_size
from .batching import Calls, PassBatch, answer, failing_all
from .capabilities import Capability, as_capabilities
from .greeting import Heard, heard_at, not_the_server
from .messages import (
    JobMessage,
    decode_message,
    derived_job_id,
    new_message,
    tick_deduplication_id,
)
from .protocols import (
    BrokerProtocol,
    ConsumerProtocol,
    JobQueueProtocol,
    JobWriterProtocol,
    RelayProtocol,
    SchemaSyncProtocol,
    SyncJobWriterProtocol,
    TickerProtocol,
)
from .records import (
    BatchJob,
    BrokerStats,
    DeadLetter,
    Delivery,
    EnqueueMemo,
    PublishResult,
    QueueStats,
    Waiting,
)
from .schema import SchemaChange, SchemaPlan, SchemaRaceError
from .store import ANY, Claim, Record, StoreProtocol, Write
from .store_base import BaseStore
from .urls import MASK, host_ports, options_of, query_params, redact_url, scheme_of

__all__ = [
    "ANY",
    "DEFAULT_MAX_JOB_SIZE",
    "MASK",
    "BaseBroker",
    "BaseStore",
    "BatchJob",
    "BrokerError",
    "BrokerProtocol",
    "BrokerSettings",
    "BrokerStats",
    "Calls",
    "Capability",
    "Claim",
    "ConfigurationError",
    "ConsumerProtocol",
    "DeadLetter",
    "Delivery",
    "DeliveryLostError",
    "EnqueueMemo",
    "FrameworkMError",
    "Heard",
    "InvalidJobError",
    "InvalidRecordError",
    "JobMessage",
    "JobQueueProtocol",
    "JobWriterProtocol",
    "MessageDecodeError",
    "PassBatch",
    "PublishResult",
    "QueueStats",
    "Record",
    "RelayProtocol",
    "SchemaChange",
    "SchemaConflictError",
    "SchemaMissingError",
    "SchemaPlan",
    "SchemaRaceError",
    "SchemaSyncProtocol",
    "StoreProtocol",
    "SyncJobWriterProtocol",
    "TickerProtocol",
    "Waiting",
    "Write",
    "answer",
    "as_capabilities",
    "decode_message",
    "derived_job_id",
    "failing_all",
    "heard_at",
    "host_ports",
    "max_job_size",
    "new_message",
    "not_the_server",
    "options_of",
    "query_params",
    "redact_url",
    "scheme_of",
    "tick_deduplication_id",
]
