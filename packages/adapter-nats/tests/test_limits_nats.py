"""The server's max_payload: refused at enqueue, never a dead-letter copy that kills the link."""

from __future__ import annotations

import pytest

from framework_m_core import App, InvalidJobError, JobContext, JobMessage, decode_message
from framework_m_core.errors import DeliveryLostError
from framework_m_core.testing import PROMPT, running_worker, wait_until
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

pytestmark = pytest.mark.anyio


def padded(name: str, size: int) -> dict[str, str]:
    """kwargs that make the encoded job ``name`` ``size`` bytes (less up to 8: the time)."""
    empty = len(JobMessage(name, {"blob": ""}, enqueued_at=1e9 + 0.25).encode())
    return {"blob": "x" * (size - empty - 8)}


def server_limit(broker: NatsBroker) -> int:
    limit = broker.max_body_size
    assert limit is not None
    return limit


async def test_a_job_over_the_limit_is_refused_and_nothing_is_stored(broker: NatsBroker) -> None:
    limit = server_limit(broker)
    assert limit > 900_000  # max_payload (1 MiB by default) less the header room
    with pytest.raises(InvalidJobError, match=f"stores at most {limit:,}"):
        await broker.enqueue("job", **padded("job", limit + 9))
    assert list(await broker.receive(10, 0.3)) == []


async def test_a_job_at_the_limit_is_stored_and_dead_lettered_whole(broker: NatsBroker) -> None:
    app, ran = App(), []

    @app.job
    async def known(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    await broker.enqueue("not_registered", **padded("not_registered", server_limit(broker)))
    async with running_worker(app, broker) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
        good = await broker.enqueue("known")
        await wait_until(lambda: ran == [good])
    [dead] = await broker.dead_letters()
    assert len(dead.body) >= server_limit(broker) - 16
    assert "unknown job 'not_registered'" in dead.reason


async def test_a_raw_body_too_big_to_copy_is_dead_lettered_without_it(broker: NatsBroker) -> None:
    app, ran = App(), []

    @app.job
    async def known(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    size = server_limit(broker) + 4000  # fits alone, not with the dead-letter headers
    await broker.requeue(b"x" * size)
    async with running_worker(app, broker) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
        good = await broker.enqueue("known")
        await wait_until(lambda: ran == [good])
    [dead] = await broker.dead_letters()
    assert dead.body == b""
    assert dead.reason.startswith(f"body of {size:,} bytes not kept")
    assert "undecodable message" in dead.reason


async def test_a_connection_the_server_closed_is_opened_again(namespace: NatsNamespace) -> None:
    async with NatsBroker.from_url(namespace.url(ack_wait=2)) as broker:
        await broker.sync_schema()
        job_id = await broker.enqueue("job")
        [held] = await broker.receive(10, PROMPT)
        nc = broker._nc  # the live client: send what only a broken client would
        assert nc is not None
        await nc.publish("fm.limits", b"x" * (nc.max_payload - 10), headers={"pad": "y" * 64})
        await wait_until(lambda: nc.is_closed)  # the server answered with a protocol error
        with pytest.raises(DeliveryLostError, match="connection was closed"):
            await broker.ack(held)
        [again] = await broker.receive(10, 2 + PROMPT)  # a new link, after ack_wait
        assert (decode_message(again.body).id, again.attempt) == (job_id, 2)
        await broker.ack(again)
        assert await broker.enqueue("job") != job_id
