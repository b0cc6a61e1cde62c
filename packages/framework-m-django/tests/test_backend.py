"""The backend as Django's tasks API sees it: its flags true to what it does, arguments
checked before anything is sent, delayed runs, results and errors, and its checks."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core import checks
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import override_settings
from framework_m_django import TaskBackend
from framework_m_django.results import exception_path
from framework_m_django.worker import django_app

from framework_m_core import connect_sync
from framework_m_core.testing import worker_in_a_thread

from .conftest import tasks_on


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def boom() -> None:
    raise LookupError("nothing here")


@task
async def shout(word: str) -> str:
    return word.upper()


def _finished(result_id: str, timeout: float = 20) -> object:
    deadline = time.monotonic() + timeout
    while not (found := default_task_backend.get_result(result_id)).is_finished:
        assert time.monotonic() < deadline, found
        time.sleep(0.05)
    return found


def test_its_flags_say_what_it_does(broker_url: str) -> None:
    backend = task_backends["default"]
    assert isinstance(backend, TaskBackend)
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, False)
    with pytest.raises(InvalidTask, match="priority"):
        add.using(priority=10)
    with pytest.raises(InvalidTask, match="not valid"):
        add.using(queue_name="heavy")


def test_arguments_that_do_not_bind_or_are_not_json_are_refused_before_sending(
    broker_url: str,
) -> None:
    with pytest.raises(InvalidTask, match="unexpected keyword argument 'c'"):
        add.enqueue(1, b=2, c=3)
    with pytest.raises(InvalidTask, match="missing a required argument"):
        add.enqueue(1)
    with pytest.raises(InvalidTask, match="JSON"):
        add.enqueue(1, b={1, 2})
    with connect_sync(broker_url) as client:
        stats = client.run(lambda b: b.queue_stats(), "counting")
    assert (stats.ready, stats.scheduled) == (0, 0)


def test_results_values_errors_and_delayed_runs_come_back_through_get_result(
    broker_url: str,
) -> None:
    summed = add.enqueue(2, b=3)
    assert summed.status is TaskResultStatus.READY
    assert add.get_result(summed.id).status is TaskResultStatus.READY
    later = add.using(run_after=datetime.now(UTC) + timedelta(seconds=1)).enqueue(1, 1)
    failed = boom.enqueue()
    loud = asyncio.run(shout.aenqueue("hi"))
    app = django_app()
    assert app is not None
    with worker_in_a_thread(app, broker_url):
        done = _finished(summed.id)
        assert done.return_value == 5  # type: ignore[attr-defined]
        assert done.attempts == 1  # type: ignore[attr-defined]
        assert _finished(loud.id).return_value == "HI"  # type: ignore[attr-defined]
        wrong = _finished(failed.id, timeout=60)
        assert wrong.status is TaskResultStatus.FAILED  # type: ignore[attr-defined]
        [error] = wrong.errors  # type: ignore[attr-defined]
        assert error.exception_class is LookupError
        assert "nothing here" in error.traceback
        assert "raise LookupError" in error.traceback
        delayed = _finished(later.id)
        assert delayed.return_value == 2  # type: ignore[attr-defined]
        assert delayed.started_at >= later.enqueued_at + timedelta(seconds=0.9)  # type: ignore[attr-defined]
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("0" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("not an id")


def test_manage_py_check_names_each_bad_option() -> None:
    cases = [
        ({"broker_url": "redis://127.0.0.1:6379/0", "brokr": 1}, "framework_m_django.E001"),
        ({}, "framework_m_django.E002"),
        ({"broker_url": "memory://"}, "framework_m_django.E003"),
        ({"broker_url": "redis://127.0.0.1:6379/0?nonsense=1"}, "framework_m_django.E004"),
        ({"broker_url": "redis://127.0.0.1:6379/0", "timeout": 0}, "framework_m_django.E005"),
        ({"broker_url": "redis://127.0.0.1:6379/0", "outbox": "nope"}, "framework_m_django.E009"),
        # the example project has no database unless SHOP_DATABASE_URL is set: a dummy one
        (
            {"broker_url": "redis://127.0.0.1:6379/0", "outbox": "default"},
            "framework_m_django.E011",
        ),
    ]
    for options, code in cases:
        with override_settings(TASKS={"default": {"BACKEND": "framework_m_django.TaskBackend",
                                                  "OPTIONS": options}}):  # fmt: skip
            found = [m.id for m in checks.run_checks() if m.level >= checks.ERROR]
            assert found == [code], (options, found)
    with override_settings(TASKS={"default": {**tasks_on("redis://127.0.0.1:6379/0")["default"],  # type: ignore[dict-item]
                                              "QUEUES": ["default", "heavy"]}}):  # fmt: skip
        assert [m.id for m in checks.run_checks()] == ["framework_m_django.E008"]


def test_an_exception_class_is_read_from_a_traceback_s_last_line() -> None:
    assert exception_path("Traceback...\nValueError: bad") == "builtins.ValueError"
    assert exception_path("x\nshop.errors.OutOfStock: none") == "shop.errors.OutOfStock"
    assert exception_path("something odd") == "builtins.Exception"
    assert exception_path("") == "builtins.Exception"
