"""The ports and the adapter SDK: everything a broker adapter imports, from one place.

The ports (:mod:`.protocols`) declare every method an adapter implements, each
docstring its contract. Around them: the records they exchange (:mod:`.records`),
the optional promises an adapter declares (:mod:`.capabilities`), the schema
plan (:mod:`.schema`), the job message and its wire format (:mod:`.messages`),
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
    InvalidLeaseError,
    InvalidMemoError,
    InvalidStateError,
    MessageDecodeError,
    SchemaConflictError,
    SchemaMissingError,
)
from .base import BaseBroker, BrokerSettings
from .batching import Calls, PassBatch, answer, failing_all
from .capabilities import Capability, as_capabilities, without_store
from .greeting import first_bytes
from .leases import validate_lease_text, validate_limit, validate_ttl
from .memos import (
    MAX_MEMO_TTL,
    MAX_MEMO_VALUE,
    validate_memo_key,
    validate_memo_ttl,
    validate_memo_value,
)
from .messages import JobMessage, decode_message, tick_deduplication_id
from .protocols import (
    BrokerProtocol,
    ConsumerProtocol,
    JobQueueProtocol,
    LeaseProtocol,
    MemoProtocol,
    SchemaSyncProtocol,
    StateProtocol,
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
    StateEntry,
)
from .schema import SchemaChange, SchemaPlan, SchemaRaceError
from .state import (
    MAX_STATE_VALUE,
    MAX_STATE_WAIT,
    validate_state_key,
    validate_state_value,
    validate_version,
    validate_wait,
    version_of,
)
from .urls import MASK, host_ports, options_of, query_params, redact_url, scheme_of

__all__ = [
    "MASK",
    "MAX_MEMO_TTL",
    "MAX_MEMO_VALUE",
    "MAX_STATE_VALUE",
    "MAX_STATE_WAIT",
    "BaseBroker",
    "BatchJob",
    "BrokerError",
    "BrokerProtocol",
    "BrokerSettings",
    "BrokerStats",
    "Calls",
    "Capability",
    "ConfigurationError",
    "ConsumerProtocol",
    "DeadLetter",
    "Delivery",
    "DeliveryLostError",
    "EnqueueMemo",
    "FrameworkMError",
    "InvalidJobError",
    "InvalidLeaseError",
    "InvalidMemoError",
    "InvalidStateError",
    "JobMessage",
    "JobQueueProtocol",
    "LeaseProtocol",
    "MemoProtocol",
    "MessageDecodeError",
    "PassBatch",
    "PublishResult",
    "QueueStats",
    "SchemaChange",
    "SchemaConflictError",
    "SchemaMissingError",
    "SchemaPlan",
    "SchemaRaceError",
    "SchemaSyncProtocol",
    "StateEntry",
    "StateProtocol",
    "TickerProtocol",
    "answer",
    "as_capabilities",
    "decode_message",
    "failing_all",
    "first_bytes",
    "host_ports",
    "options_of",
    "query_params",
    "redact_url",
    "scheme_of",
    "tick_deduplication_id",
    "validate_lease_text",
    "validate_limit",
    "validate_memo_key",
    "validate_memo_ttl",
    "validate_memo_value",
    "validate_state_key",
    "validate_state_value",
    "validate_ttl",
    "validate_version",
    "validate_wait",
    "version_of",
    "without_store",
]
