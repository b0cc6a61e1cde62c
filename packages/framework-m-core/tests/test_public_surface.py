"""The public surface: every name the packages export keeps importing from the same place.

The lists are what ``framework_m_core`` and ``framework_m_core.testing`` export;
removing or moving a name breaks users and must fail here first.
"""

from __future__ import annotations

import importlib

import pytest

CORE = [
    "EnqueuedJob",
    "cancel_job",
    "InvalidMemoError",
    "wait_result",
    "job_status",
    "job_of_slot",
    "JobStatus",
    "JobState",
    "UnknownJobError",
    "ResultTimeoutError",
    "JobResultError",
    "JobFailedError",
    "JobCancelledError",
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
    "SchemaMissingError",
    "Every",
    "FrameworkMError",
    "Ticker",
    "InvalidJobError",
    "InvalidLeaseError",
    "InvalidStateError",
    "JobContext",
    "JobDefinitionError",
    "JobHandle",
    "JobMessage",
    "JobQueueProtocol",
    "JobSpec",
    "MessageDecodeError",
    "PROJECT",
    "PublishResult",
    "QueueStats",
    "Rate",
    "Snooze",
    "parse_rate",
    "Schedule",
    "ScheduleDescription",
    "ScheduleError",
    "ScheduleHandle",
    "SchemaChange",
    "SchemaConflictError",
    "SchemaPlan",
    "SchemaRaceError",
    "SchemaSyncProtocol",
    "StateEntry",
    "TickerProtocol",
    "UnknownBrokerError",
    "Worker",
    "WorkerFailedError",
    "__version__",
    "connect",
    "cron",
    "decode_message",
    "every",
    "load_app",
    "open_broker",
    "tick_deduplication_id",
    "StoreProtocol",
    "SyncClient",
    "SyncJob",
    "connect_sync",
]

TESTING = [
    "BrokerContract",
    "EnqueueContract",
    "BatchContract",
    "DelayedContract",
    "ConsumeContract",
    "ConnectionContract",
    "SchemaContract",
    "WorkerContract",
    "HostileInputContract",
    "StatsContract",
    "WaitingContract",
    "StoreContract",
    "LeaseContract",
    "StateContract",
    "MemoContract",
    "StatusContract",
    "CancelContract",
    "ProcessContract",
    "FencingContract",
    "AREAS",
    "namespace_fixture",
    "PROMPT",
    "connected",
    "many",
    "receive_all",
    "running_worker",
    "worker_in_a_thread",
    "synced",
    "wait_until",
    "Drained",
    "Tick",
    "drain",
    "run_job",
    "ticks_between",
    "requires",
    "any_of",
    "Requirement",
    "SHORT_DEDUP_WINDOW",
    "SHORT_VISIBILITY",
    "DEDUP_WINDOW_IN_URL",
    "SINGLE_HOST",
    "Namespace",
    "namespace",
    "with_options",
]

# What an adapter imports: one module, the ports and the SDK around them.
PORTS = [
    "BaseBroker",
    "BatchJob",
    "BrokerError",
    "BrokerProtocol",
    "BrokerSettings",
    "BrokerStats",
    "Capability",
    "ConfigurationError",
    "ConsumerProtocol",
    "DeadLetter",
    "Delivery",
    "DeliveryLostError",
    "SchemaMissingError",
    "InvalidJobError",
    "InvalidRecordError",
    "JobMessage",
    "JobQueueProtocol",
    "PassBatch",
    "PublishResult",
    "QueueStats",
    "SchemaChange",
    "SchemaConflictError",
    "SchemaPlan",
    "SchemaRaceError",
    "SchemaSyncProtocol",
    "TickerProtocol",
    "decode_message",
    "options_of",
    "query_params",
    "redact_url",
    "scheme_of",
    "StoreProtocol",
    "BaseStore",
    "Record",
    "Write",
    "Claim",
    "ANY",
]


@pytest.mark.parametrize(
    ("module", "name"),
    [("framework_m_core", n) for n in CORE]
    + [("framework_m_core.testing", n) for n in TESTING]
    + [("framework_m_core.ports", n) for n in PORTS],
)
def test_a_public_name_imports_from_its_module(module: str, name: str) -> None:
    exported = importlib.import_module(module)
    assert getattr(exported, name) is not None
    assert name in exported.__all__


def test_every_contract_area_is_exported_and_in_the_union() -> None:
    import framework_m_core.testing as testing

    areas = {cls.__name__ for cls in testing.AREAS}
    assert areas == {n for n in TESTING if n.endswith("Contract") and n != "BrokerContract"}
    for name in areas:
        module = getattr(testing, name).__module__.rsplit(".", 1)[1]
        # Each area lives in the module named after it (HostileInputContract: hostile_input).
        snake = "".join("_" + c.lower() if c.isupper() else c for c in name[: -len("Contract")])
        assert module == snake.lstrip("_"), f"{name} is in {module}.py"


def test_the_core_package_keeps_at_most_twelve_modules_at_its_top() -> None:
    from importlib.resources import files

    top = [p.name for p in files("framework_m_core").iterdir() if p.name.endswith(".py")]
    assert len(top) <= 12, sorted(top)


def test_former_names_of_the_unreleased_api_are_gone() -> None:
    """Renamed for the glossary before 0.1.0 was released: one name per concept."""
    import framework_m_core
    from framework_m_core import JobContext
    from framework_m_core.testing import Drained

    assert not hasattr(framework_m_core, "Job")
    assert not hasattr(JobContext, "queue")
    assert not hasattr(Drained, "late_dropped")
