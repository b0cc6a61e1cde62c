"""An example third-party adapter of framework-m on SQLite (``sqlite://``)."""

from .broker import SqliteBroker
from .settings import SqliteSettings, parse_url

__all__ = ["SqliteBroker", "SqliteSettings", "parse_url"]
