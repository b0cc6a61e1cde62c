"""The adapter contract suite, shipped for third-party adapters.

Subclass :class:`BrokerContract` in a class whose name starts with ``Test`` and
provide one fixture, ``broker_factory``: a callable returning a new, unconnected
broker bound to a namespace (stream, queue, key prefix) that is unique to the
test, every call reaching the same namespace. Keep the dedup window and the
visibility timeout short (1-2 s) so expiry tests run; tests that need a
capability the adapter does not declare are skipped with the reason.
"""

from .contract import BrokerContract, running_worker, synced, wait_until

__all__ = ["BrokerContract", "running_worker", "synced", "wait_until"]
