"""Fixtures shared by the adapter's tests: the server, and a namespace on it per test."""

from __future__ import annotations

import os

from framework_m_core.testing import namespace_fixture

NATS_URL = os.environ.get("M_TEST_NATS_URL", "nats://127.0.0.1:4222")

namespace = namespace_fixture(NATS_URL)
