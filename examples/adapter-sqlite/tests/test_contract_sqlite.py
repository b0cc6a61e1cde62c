"""The contract suite against the SQLite adapter: the whole hook-up a third party writes."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from framework_m_core.testing import BrokerContract


class TestSqliteBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, tmp_path: Path) -> str:  # fresh namespace per test
        return (
            f"sqlite://{tmp_path}/jobs.db?queue={uuid4().hex}&dedup_window=1&visibility_timeout=1"
        )
