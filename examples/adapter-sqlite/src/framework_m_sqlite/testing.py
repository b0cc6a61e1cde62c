"""``sqlite://`` namespaces for tests: a queue of their own in the database file."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any
from urllib.parse import urlsplit

from framework_m_core.testing.namespaces import Namespace, with_options

from . import schema


class SqliteNamespace(Namespace):
    """Queue ``fmtest_<tag>`` in the database of ``server`` (``sqlite:///path/jobs.db``)."""

    def url(self, **options: Any) -> str:
        return with_options(self.server, queue=self.name, **options)

    async def drop(self) -> None:
        await asyncio.to_thread(self._drop)

    def _drop(self) -> None:
        db = sqlite3.connect(urlsplit(self.server).path, timeout=30)
        try:
            with db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
                for table in schema.TABLES:
                    if table in tables:
                        db.execute(f"DELETE FROM {table} WHERE queue = ?", (self.name,))
        finally:
            db.close()
