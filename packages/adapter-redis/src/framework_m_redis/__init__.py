"""Redis broker adapter of framework-m (``redis://`` and ``rediss://``)."""

from .broker import RedisBroker
from .settings import RedisSettings, parse_url

__all__ = ["RedisBroker", "RedisSettings", "parse_url"]
