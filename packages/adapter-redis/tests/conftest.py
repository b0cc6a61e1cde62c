"""Fixtures shared by the adapter's tests: the server, and a namespace on it per test."""

from __future__ import annotations

import os

from framework_m_core.testing import namespace_fixture

REDIS_URL = os.environ.get("M_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

namespace = namespace_fixture(REDIS_URL)
