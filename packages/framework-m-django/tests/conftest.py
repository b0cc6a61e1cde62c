"""The example project's settings, and a fresh namespace on Redis per test that needs a
broker (TASKS pointed at it while the test runs)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.test import override_settings

from framework_m_core import connect_sync
from framework_m_core.testing import namespace

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "django_project"
SERVER = os.environ.get("M_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

sys.path.insert(0, str(EXAMPLE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()


def tasks_on(url: str, **options: object) -> dict[str, object]:
    """A TASKS setting whose default backend is framework-m's on ``url``."""
    return {
        "default": {
            "BACKEND": "framework_m_django.TaskBackend",
            "OPTIONS": {"broker_url": url, **options},
        }
    }


@pytest.fixture
def broker_url() -> Iterator[str]:
    """A fresh namespace with its schema, the default backend's broker while the test
    runs; dropped after."""
    ns = namespace(SERVER)
    url = ns.url()
    try:
        connect_sync(url, sync_schema=True).close()
        with override_settings(TASKS=tasks_on(url)):
            yield url
    finally:
        asyncio.run(ns.drop())
