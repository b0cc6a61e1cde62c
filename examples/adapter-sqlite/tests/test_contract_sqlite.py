"""The contract suite against the SQLite adapter: the whole hook-up a third party writes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from uuid import uuid4

import pytest

from framework_m_core import BrokerProtocol
from framework_m_core.testing import BrokerContract


class TestSqliteBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, tmp_path: Path) -> str:  # fresh namespace per test
        return (
            f"sqlite://{tmp_path}/jobs.db?queue={uuid4().hex}&dedup_window=1&visibility_timeout=1"
        )

    @pytest.fixture
    async def refused_url(self, broker: BrokerProtocol, broker_url: str) -> str:
        """The same queue, once synced, its layout marked as a newer adapter's: a plan
        refuses to change that."""
        parts = urlsplit(broker_url)
        queue = parse_qs(parts.query)["queue"][0]
        with sqlite3.connect(parts.path) as db:
            db.execute("UPDATE fm_meta SET value = 99 WHERE queue = ? AND key = 'layout'", (queue,))
        return broker_url
