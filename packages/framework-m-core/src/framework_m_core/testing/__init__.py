"""The adapter contract suite, shipped for third-party adapters.

The whole hook-up is a test class and one fixture returning a URL that any
process on the machine can open, to a namespace of its own for each test::

    class TestMyBroker(BrokerContract):
        @pytest.fixture
        def broker_url(self, tmp_path) -> str:
            return f"my://127.0.0.1/{uuid4().hex}?dedup_window=1&visibility_timeout=1"

The suite opens brokers through the entry-point registry, in the test process
and in the worker processes it starts. It is split by area into mixins, each in
the module of :mod:`.contract` named after it, so that one area can be run or
marked xfail on its own:

- :class:`EnqueueContract`: ids, validation, deduplication across connections;
- :class:`BatchContract`: ``enqueue_many``;
- :class:`DelayedContract`: ``enqueue_at`` and ``enqueue_in``;
- :class:`ConsumeContract`: reservations, settling, redelivery, dead letters;
- :class:`ConnectionContract`: connect, close, outages, credentials;
- :class:`SchemaContract`: schema sync, plan and refusals;
- :class:`WorkerContract`: the worker runtime and the ticker on this broker;
- :class:`HostileInputContract`: bodies that are not jobs;
- :class:`StatsContract`: ``queue_stats``;
- :class:`WaitingContract`: ``waiting``, what waits for a consumer;
- :class:`StoreContract`: the store's records: compare-and-set, expiry, claims, watches;
- :class:`LeaseContract`: leases, in one process and across processes;
- :class:`StateContract`: shared state, written by compare-and-set;
- :class:`MemoContract`: memos, expiring values created at most once;
- :class:`StatusContract`: a job id leads to its status and its result;
- :class:`CancelContract`: a cancelled job never runs, or stops where it runs;
- :class:`ProcessContract`: the promises that show only across processes;
- :class:`FencingContract`: a replica frozen past its reservations steps aside.

:class:`BrokerContract` is their union. Tests state what they need with
:func:`requires` and are skipped with the reason when the adapter lacks it.
Requires pytest and anyio (``pip install './packages/framework-m-core[testing]'``).

For testing an application's own jobs (no pytest needed): :func:`run_job`,
:func:`drain` and :func:`ticks_between` (see :mod:`.jobs`).
"""

from __future__ import annotations

from typing import Any

from .namespaces import Namespace, namespace, with_options

_LAZY = {
    "BrokerContract": ".contract.broker",
    "EnqueueContract": ".contract.enqueue",
    "BatchContract": ".contract.batch",
    "DelayedContract": ".contract.delayed",
    "ConsumeContract": ".contract.consume",
    "ConnectionContract": ".contract.connection",
    "SchemaContract": ".contract.schema",
    "WorkerContract": ".contract.worker",
    "HostileInputContract": ".contract.hostile_input",
    "StatsContract": ".contract.stats",
    "WaitingContract": ".contract.waiting",
    "StoreContract": ".contract.store",
    "LeaseContract": ".contract.lease",
    "StateContract": ".contract.state",
    "MemoContract": ".contract.memo",
    "StatusContract": ".contract.status",
    "CancelContract": ".contract.cancel",
    "ProcessContract": ".contract.process",
    "FencingContract": ".contract.fencing",
    "AREAS": ".contract.broker",
    "namespace_fixture": ".contract.base",
    "PROMPT": ".helpers",
    "connected": ".helpers",
    "many": ".helpers",
    "receive_all": ".helpers",
    "received_slots": ".helpers",
    "running_worker": ".helpers",
    "worker_in_a_thread": ".helpers",
    "synced": ".helpers",
    "wait_until": ".helpers",
    "Drained": ".jobs",
    "Tick": ".jobs",
    "drain": ".jobs",
    "run_job": ".jobs",
    "ticks_between": ".jobs",
    "requires": ".contract.requirements",
    "any_of": ".contract.requirements",
    "Requirement": ".contract.requirements",
    "SHORT_DEDUP_WINDOW": ".contract.requirements",
    "SHORT_VISIBILITY": ".contract.requirements",
    "DEDUP_WINDOW_IN_URL": ".contract.requirements",
    "SINGLE_HOST": ".contract.requirements",
}

__all__ = ["Namespace", "namespace", "with_options", *_LAZY]


def __getattr__(name: str) -> Any:
    """The suite's names, imported on first use (they need pytest; namespaces do not)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
