"""``memory://``: the embedded default broker, and the adapter a new one copies.

URL: ``memory://[name][?dedup_window=120&visibility_timeout=30]``. The files
are those of every adapter: ``settings.py`` (the URL), ``schema.py`` (plan and
apply), ``broker.py`` (the I/O), ``testing.py`` (namespaces for tests and
benchmarks); ``server.py`` is the in-process server the others talk to.
"""

from .broker import MemoryBroker
from .server import reset
from .settings import MemorySettings, parse_url

__all__ = ["MemoryBroker", "MemorySettings", "parse_url", "reset"]
