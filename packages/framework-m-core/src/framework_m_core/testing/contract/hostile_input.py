"""Contract tests with hostile input: whatever a message holds, it is settled."""

from __future__ import annotations

import json
import logging

import pytest

from ...app import App
from ...jobs import JobContext
from ...ports.capabilities import Capability
from ...ports.messages import MAX_NESTING
from ...ports.protocols import BrokerProtocol
from ..helpers import running_worker, wait_until
from .base import ContractBase
from .requirements import requires


def _job(**fields: object) -> bytes:
    base: dict[str, object] = {"v": 1, "id": "h1", "job": "good", "enqueued_at": 1, "kwargs": {}}
    return json.dumps({**base, **fields}).encode()


def _nested(levels: int) -> object:
    value: object = 0
    for _ in range(levels):
        value = [value]
    return value


# Raw bodies no well-behaved producer writes, each with what its dead-letter reason says.
HOSTILE_BODIES: list[tuple[bytes, str]] = [
    (b"", "not JSON"),
    (b"\x00\xff\xfe binary \r\n", "not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"[1, 2]", "not an object"),
    (_job(v=2), "version"),
    (_job(id="a\nforged log line"), "'id'"),
    (_job(id="x" * 100_000), "'id'"),
    (_job(job="good\n"), "invalid job name"),
    (_job(job="j" * 100_000), "invalid job name"),
    (_job(enqueued_at=1e300), "unix time"),
    (_job(enqueued_at="1"), "unix time"),
    (b'{"v":1,"id":"a","job":"good","kwargs":{},"enqueued_at":' + b"9" * 5000 + b"}", "unix time"),
    (_job(scheduled_at=10**30), "scheduled_at"),
    (_job(kwargs=[]), "'kwargs' must be an object"),
    (_job(kwargs={"n": _nested(MAX_NESTING)}), "nested more than"),
    (_job(job="not_registered"), "unknown job 'not_registered'"),
    (_job(kwargs={"unexpected": 1}), "kwargs do not match"),
    (_job(job="not_registered", kwargs={"blob": "x" * 200_000}), "unknown job"),
]
# What a worker may log about all of them together: enough to say what happened, no more.
LOG_BUDGET = 200_000


class HostileInputContract(ContractBase):
    """Hostile bodies and failures beside good jobs, on this adapter."""

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_hostile_messages_are_dead_lettered_and_every_good_job_runs(
        self, broker: BrokerProtocol, caplog: pytest.LogCaptureFixture
    ) -> None:
        app, ran = App(), []

        @app.job
        async def good(ctx: JobContext, n: int = 0) -> None:
            ran.append(n)

        @app.job(max_attempts=1)
        async def explode(ctx: JobContext) -> None:
            raise RuntimeError("boom " + "\u2603" * 200_000)  # a 600 KB message

        expected = [why for _, why in HOSTILE_BODIES] + ["RuntimeError: boom"]
        for i, (body, _) in enumerate(HOSTILE_BODIES):
            await broker.enqueue("good", n=i)
            await broker.requeue(body)
        await broker.enqueue("explode")
        await broker.enqueue("good", n=len(HOSTILE_BODIES))
        caplog.set_level(logging.INFO, logger="framework_m")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == len(expected), timeout=60)
            await wait_until(lambda: len(ran) == len(HOSTILE_BODIES) + 1)
            last = await broker.enqueue("good", n=-1)  # the worker still takes new jobs
            await wait_until(lambda: ran[-1:] == [-1])
        assert sorted(ran) == [-1, *range(len(HOSTILE_BODIES) + 1)], f"ran {ran}"
        assert worker.stats.dead_lettered == len(expected), last
        reasons = [d.reason for d in await broker.dead_letters(len(expected) + 5)]
        missing = [why for why in expected if not any(why in r for r in reasons)]
        assert not missing, f"no dead letter says {missing}; reasons: {reasons}"
        assert all(len(r) <= 4096 for r in reasons), "a reason was stored unbounded"
        ours = [r for r in caplog.records if r.name.startswith("framework_m")]
        text = "\n".join(logging.Formatter().format(r) for r in ours)
        assert len(text) < LOG_BUDGET, f"the worker logged {len(text):,} characters"
        assert "\nforged log line" not in text
