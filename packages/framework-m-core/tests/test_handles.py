"""Job handles: ``@app.job`` returns the handler with typed enqueue methods."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from framework_m_core import (
    App,
    InvalidJobError,
    JobContext,
    JobHandle,
    JobState,
    decode_message,
)
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.handles import EnqueuedJob
from framework_m_core.testing import receive_all, run_job, running_worker

pytestmark = pytest.mark.anyio

app = App()


@app.job
async def add(ctx: JobContext, a: int, b: int = 0) -> int:
    return a + b


@app.job(name="report.daily", every=60)
def report(ctx: JobContext, day: str) -> str:
    return day


async def _queued(memory: MemoryBroker) -> list[tuple[str, dict[str, object], str | None]]:
    messages = [decode_message(d.body) for d in await receive_all(memory, quiet=0.2)]
    return [(m.job_name, dict(m.kwargs), m.deduplication_id) for m in messages]


async def test_a_handle_is_still_the_handler() -> None:
    assert isinstance(add, JobHandle)
    assert add.name == "add"
    assert add.__name__ == "add"
    assert await run_job(app, "add", a=2, b=3) == 5
    assert repr(report) == "<job 'report.daily'>"


async def test_enqueue_sends_the_job_with_its_kwargs(memory: MemoryBroker) -> None:
    job_id = await add.enqueue(memory, a=1, b=2)
    assert job_id
    await report.enqueue(memory, "mon")  # positional: sent under its parameter's name
    assert await _queued(memory) == [
        ("add", {"a": 1, "b": 2}, None),
        ("report.daily", {"day": "mon"}, None),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"a": 1, "c": 2}, "job 'add': got an unexpected keyword argument 'c'"),
        ((), {"b": 2}, "job 'add': missing a required argument: 'a'"),
        ((1, 2, 3), {}, "job 'add' takes 2 positional argument(s) after ctx, got 3"),
        ((1,), {"a": 1}, "job 'add': 'a' given twice"),
        ((), {"a": object()}, "not JSON-serializable"),
    ],
)
async def test_arguments_the_handler_cannot_take_are_refused_before_sending(
    memory: MemoryBroker, args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidJobError, match=message.replace("(", r"\(").replace(")", r"\)")):
        await add.enqueue(memory, *args, **kwargs)  # type: ignore[arg-type]
    assert memory.stats.enqueued == 0


async def test_options_carry_a_deduplication_id_and_a_delay(memory: MemoryBroker) -> None:
    once = add.with_options(deduplication_id="sum:1")
    first = await once.enqueue(memory, a=1)
    assert await once.enqueue(memory, a=1) == first  # a duplicate: the original's id
    later = add.with_options(delay=3600)
    await later.enqueue(memory, a=2)
    await add.enqueue_in(memory, 3600, a=3)
    await add.enqueue_at(memory, datetime(2999, 1, 1, tzinfo=UTC), a=4)
    await add.with_options(at=time.time() + 3600).enqueue(memory, a=5)
    assert await _queued(memory) == [("add", {"a": 1}, "sum:1")]  # the rest are held
    assert (await memory.queue_stats()).scheduled == 4
    with pytest.raises(InvalidJobError, match="delay or at, not both"):
        add.with_options(delay=1, at=time.time())


def test_mypy_checks_the_arguments_of_an_enqueue(tmp_path: Path) -> None:
    snippet = tmp_path / "uses_handles.py"
    snippet.write_text(
        "from framework_m_core import App, JobContext, JobQueueProtocol\n"
        "app = App()\n"
        "@app.job\n"
        "async def add(ctx: JobContext, a: int, b: int = 0) -> int:\n"
        "    return a + b\n"
        "@app.job(every=60)\n"
        "def report(ctx: JobContext, day: str) -> None: ...\n"
        "async def use(broker: JobQueueProtocol) -> None:\n"
        "    await add.enqueue(broker, a=1, b=2)\n"
        "    await add.enqueue_in(broker, 5, a=1)\n"
        "    await report.with_options(deduplication_id='d').enqueue(broker, day='mon')\n"
        "    await add.enqueue(broker, a=1, c=2)  # line 12: no parameter c\n"
        "    await report.enqueue(broker, day=1)  # line 13: not a str\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["12", "13"], done.stdout
    assert 'Unexpected keyword argument "c"' in errors[0]
    assert 'incompatible type "int"; expected "str"' in errors[1]


async def test_what_enqueue_returns_is_the_id_and_leads_to_status_result_and_cancel(
    memory: MemoryBroker,
) -> None:
    job = await add.enqueue(memory, a=2, b=3)
    assert isinstance(job, str)
    assert isinstance(job, EnqueuedJob)
    assert decode_message((await receive_all(memory))[0].body).id == job
    assert (await job.status()).state is JobState.QUEUED
    held = await add.enqueue_in(memory, 60, a=1)
    assert (await held.status()).state is JobState.SCHEDULED
    assert await held.cancel() is True
    assert (await held.status()).state is JobState.CANCELLED
    again = await add.enqueue(memory, a=4, b=5)
    async with running_worker(app, memory):
        assert await again.result(timeout=10) == 9
    assert await again.cancel() is False  # finished already
