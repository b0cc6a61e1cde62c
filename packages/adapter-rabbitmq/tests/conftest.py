"""Fixtures shared by the adapter's tests: the server, and a namespace on it per test."""

from __future__ import annotations

import os

from framework_m_core.testing import namespace_fixture

AMQP_URL = os.environ.get("M_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

namespace = namespace_fixture(AMQP_URL)
