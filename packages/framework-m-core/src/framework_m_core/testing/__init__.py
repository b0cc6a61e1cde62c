"""The adapter contract suite, shipped for third-party adapters.

The whole hook-up is a test class and one fixture returning a URL that any
process on the machine can open, to a namespace of its own for each test::

    class TestMyBroker(BrokerContract):
        @pytest.fixture
        def broker_url(self, tmp_path) -> str:
            return f"my://127.0.0.1/{uuid4().hex}?dedup_window=1&visibility_timeout=1"

The suite opens brokers through the entry-point registry, in the test process
and in the worker processes it starts. It is split by area into mixins
(:class:`EnqueueContract`, :class:`ConsumeContract`, :class:`ConnectionContract`,
:class:`SchemaContract`, :class:`WorkerContract`, :class:`ProcessContract`) so
that one area can be run or marked xfail on its own; :class:`BrokerContract` is
their union. Tests state
what they need with :func:`requires` and are skipped with the reason when the
adapter lacks it. Requires pytest and anyio (``framework-m-core[testing]``).

For testing an application's own jobs (no pytest needed): :func:`run_job`,
:func:`drain` and :func:`ticks_between` (see :mod:`.jobs`).
"""

from __future__ import annotations

from typing import Any

from .namespaces import Namespace, namespace, with_options

_LAZY = {
    "BrokerContract": ".contract",
    "EnqueueContract": ".enqueue",
    "ConsumeContract": ".consume",
    "ConnectionContract": ".connection",
    "SchemaContract": ".schema_sync",
    "WorkerContract": ".runtime",
    "ProcessContract": ".processes",
    "namespace_fixture": ".base",
    "PROMPT": ".helpers",
    "connected": ".helpers",
    "many": ".helpers",
    "receive_all": ".helpers",
    "running_worker": ".helpers",
    "synced": ".helpers",
    "wait_until": ".helpers",
    "Drained": ".jobs",
    "Tick": ".jobs",
    "drain": ".jobs",
    "run_job": ".jobs",
    "ticks_between": ".jobs",
    "requires": ".requirements",
    "any_of": ".requirements",
    "Requirement": ".requirements",
    "SHORT_DEDUP_WINDOW": ".requirements",
    "SHORT_VISIBILITY": ".requirements",
    "DEDUP_WINDOW_IN_URL": ".requirements",
    "SINGLE_HOST": ".requirements",
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
