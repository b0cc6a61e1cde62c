"""The outbox on PostgreSQL, MariaDB and SQLite: rows written in the caller's
transaction through handles and by name, sync and async, and relayed to a broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.errors import ConfigurationError, InvalidJobError, SchemaMissingError
from framework_m_core.ports import BatchJob, Capability, Delivery, decode_message, derived_job_id
from framework_m_core.testing import receive_all, wait_until
from framework_m_outbox import Outbox, OutboxRelay, sync_schema
from framework_m_outbox.database import engine as database_engine
from framework_m_outbox.database import parse
from framework_m_outbox.table import outbox

pytestmark = pytest.mark.anyio

app = App()


@app.job(keep_result=60)
async def send_receipt(ctx: JobContext, order_id: int, to: str = "") -> None:
    """A job the tests enqueue through the outbox (never run here)."""


@contextlib.asynccontextmanager
async def relaying(relay: OutboxRelay) -> AsyncIterator[None]:
    """``relay`` running for the block; stopped, and its end awaited, after."""
    task = asyncio.create_task(relay.run())
    try:
        yield
    finally:
        relay.stop()
        await asyncio.wait_for(task, 10)


def _job_id(delivery: Delivery) -> str:
    return decode_message(delivery.body).id


def _rows(url: str) -> list[sa.Row[Any]]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(outbox).order_by(outbox.c.created_at)))
    finally:
        engine.dispose()


async def test_schema_sync_creates_the_table_once_and_dry_run_changes_nothing(
    database: str,
) -> None:
    assert await sync_schema(database, dry_run=True) == ["create table framework_m_outbox"]
    assert _table_missing(database)
    created = await sync_schema(database)
    assert created[0] == "created table framework_m_outbox"
    assert await sync_schema(database) == []
    assert await sync_schema(database, dry_run=True) == []
    assert _rows(database) == []


def _table_missing(url: str) -> bool:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        return not sa.inspect(engine).has_table("framework_m_outbox")
    finally:
        engine.dispose()


async def test_replicas_syncing_at_once_all_succeed(database: str) -> None:
    await asyncio.gather(*(sync_schema(database) for _ in range(4)))
    assert await sync_schema(database, dry_run=True) == []


async def test_a_sync_session_writes_rows_only_when_its_transaction_commits(
    database: str,
) -> None:
    await sync_schema(database)
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    try:
        with Session(engine) as session, session.begin():
            kept = send_receipt.enqueue_sync(Outbox(session), 7, to="ada@example.com")
            by_name = Outbox(session).enqueue_sync("send_receipt", "receipt:8", order_id=8)
        with Session(engine) as session:
            session.begin()
            send_receipt.enqueue_sync(Outbox(session), order_id=9)
            session.rollback()
        with (
            Session(engine) as session,
            session.begin(),
            pytest.raises(InvalidJobError, match="to"),  # checked before any row is written
        ):
            send_receipt.enqueue_sync(Outbox(session), order_id=10, to=object())  # type: ignore[arg-type]
    finally:
        engine.dispose()
    rows = _rows(database)
    assert [r.job_id for r in rows] == [kept, by_name]
    first, second = rows
    body = json.loads(first.body)
    assert body["kwargs"] == {"order_id": 7, "to": "ada@example.com"}
    assert body["dedup_id"] == f"outbox:{first.id}"
    assert kept == derived_job_id(f"outbox:{first.id}")
    assert body["keep"] == 60  # the job's keep_result travels with it
    assert by_name == derived_job_id("receipt:8")  # the caller's id names the job
    assert json.loads(second.body)["dedup_id"] == "receipt:8"
    assert first.attempts == 0
    assert first.claimed_until == 0


async def test_an_async_session_and_connection_write_in_their_transaction(database: str) -> None:
    await sync_schema(database)
    engine = create_async_engine(parse(database))
    try:
        async with AsyncSession(engine) as session, session.begin():
            one = await send_receipt.enqueue(Outbox(session), order_id=1)
            later = await send_receipt.enqueue_in(Outbox(session), 3600, order_id=2)
        async with engine.connect() as conn:
            await Outbox(conn).enqueue("send_receipt", order_id=3)
            await conn.rollback()
        async with engine.begin() as conn:
            many = await Outbox(conn).enqueue_many(
                [BatchJob("send_receipt", {"order_id": n}) for n in (4, 5)]
            )
    finally:
        await engine.dispose()
    rows = _rows(database)
    assert [r.job_id for r in rows][:2] == [one, later]
    assert sorted(r.job_id for r in rows[2:]) == sorted(many)  # written in one instant
    not_before = json.loads(rows[1].body)["not_before"]
    assert time.time() + 3500 < not_before < time.time() + 3700


async def test_wrong_targets_and_kinds_are_refused_clearly(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="Session or Connection"):
        Outbox("postgresql://db")  # type: ignore[arg-type]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        with pytest.raises(ConfigurationError, match="use enqueue_sync"):
            await send_receipt.enqueue(Outbox(session), order_id=1)
        with pytest.raises(InvalidJobError, match="job name"):
            Outbox(session).enqueue_sync("no such name!")
    engine.dispose()
    for bad, said in (
        ("not a url", "not a database URL"),
        ("oracle://db", "not 'oracle'"),
        ("sqlite://", "in-memory"),
    ):
        with pytest.raises(ConfigurationError, match=said):
            parse(bad)
    assert parse("postgresql://u:secret@h/db").drivername == "postgresql+psycopg"
    assert parse("mariadb://u@h/db").drivername == "mariadb+aiomysql"
    assert parse("sqlite:///x.db").drivername == "sqlite+aiosqlite"


async def test_the_relay_publishes_committed_rows_once_and_deletes_them(
    database: str, memory: MemoryBroker
) -> None:
    await sync_schema(database)
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        ids = [send_receipt.enqueue_sync(Outbox(session), order_id=n) for n in range(30)]
        held = send_receipt.enqueue_in_sync(Outbox(session), 0.5, order_id=99)
        twice = [
            send_receipt.with_options(deduplication_id="r:1").enqueue_sync(
                Outbox(session), order_id=100
            )
            for _ in range(2)
        ]
    engine.dispose()
    relay = OutboxRelay(database, memory, poll=0.05, batch=7)
    async with relaying(relay):
        await wait_until(lambda: relay.relayed == 33, timeout=20, what="33 rows relayed")
        got = await receive_all(memory, quiet=1.0)
    assert sorted(_job_id(d) for d in got) == sorted({*ids, held, *twice})
    assert twice[0] == twice[1]
    assert memory.stats.duplicates == 1
    assert _rows(database) == []


class _Failing(MemoryBroker):
    """A memory broker whose first ``fails`` publishes fail."""

    fails = 3

    async def publish(self, message: Any) -> Any:
        if self.fails > 0:
            self.fails -= 1
            from framework_m_core.errors import BrokerError

            raise BrokerError("the broker is away")
        return await super().publish(message)


async def test_a_failed_publish_keeps_the_row_and_tries_again_with_backoff(
    database: str, memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    await sync_schema(database)
    broker = _Failing(memory.settings)
    await broker.connect()
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        job = send_receipt.enqueue_sync(Outbox(session), order_id=1)
    engine.dispose()
    relay = OutboxRelay(database, broker, poll=0.05)
    async with relaying(relay):
        await wait_until(lambda: broker.fails == 1, timeout=10, what="two failures")
        [row] = _rows(database)
        assert row.attempts >= 1
        assert "the broker is away" in row.last_error
        await wait_until(lambda: relay.relayed == 1, timeout=20, what="the row relayed")
    await broker.close()
    assert [_job_id(d) for d in await receive_all(memory)] == [job]
    said = [r.getMessage() for r in caplog.records if "publish of job" in r.getMessage()]
    assert len(said) == 3
    assert all(job in line and "attempt" in line for line in said)


async def test_rows_a_dead_relay_claimed_are_published_once_its_claim_lapses(
    database: str, memory: MemoryBroker
) -> None:
    await sync_schema(database)
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        job = send_receipt.enqueue_sync(Outbox(session), order_id=1)
    dead_relay_published = await memory.publish(decode_message(_rows(database)[0].body.encode()))
    now = time.time()
    with engine.begin() as conn:  # claimed by a relay killed after it published
        conn.execute(sa.update(outbox).values(claimed_until=now + 1.0, first_tried_at=now))
    engine.dispose()
    relay = OutboxRelay(database, memory, poll=0.05)
    async with relaying(relay):
        await asyncio.sleep(0.5)
        assert relay.relayed == 0  # still claimed
        await wait_until(lambda: relay.relayed == 1, timeout=10, what="the lapsed claim relayed")
    assert dead_relay_published.job_id == job
    assert [_job_id(d) for d in await receive_all(memory)] == [job]  # the copy dropped
    assert memory.stats.duplicates == 1


async def test_a_claim_the_dedup_window_cannot_cover_is_refused(memory: MemoryBroker) -> None:
    relay = OutboxRelay("sqlite:///x.db", memory, lease=100.0, clock_skew=25.0)
    with pytest.raises(ConfigurationError, match="dedup window of 120s"):
        relay.check(memory.dedup_window)
    OutboxRelay("sqlite:///x.db", memory, lease=30.0, clock_skew=5.0).check(120.0)
    fitted = OutboxRelay("sqlite:///x.db", memory, clock_skew=5.0)
    fitted.check(120.0)
    assert fitted.lease == 30.0
    fitted.check(30.0)  # a short window: a shorter claim, inside it
    assert fitted.lease == 12.5
    with pytest.raises(ConfigurationError, match="claim lasts 2s at least"):
        OutboxRelay("sqlite:///x.db", memory, clock_skew=1.0).check(4.0)


async def test_without_schema_sync_a_missing_table_stops_the_relay(
    database: str, memory: MemoryBroker
) -> None:
    relay = OutboxRelay(database, memory, sync_schema=False)
    with pytest.raises(SchemaMissingError, match="m sync-schema --outbox-url"):
        await asyncio.wait_for(relay.run(), 20)


async def test_a_row_past_the_dedup_window_is_not_sent_again_when_the_broker_has_it(
    database: str, memory: MemoryBroker
) -> None:
    await sync_schema(database)
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        stored = send_receipt.enqueue_sync(Outbox(session), order_id=1)
        lost = send_receipt.enqueue_sync(Outbox(session), order_id=2)
    published = await memory.publish(decode_message(_rows(database)[0].body.encode()))
    assert published.job_id == stored
    long_ago = time.time() - 1000  # every relay was away longer than the window
    with engine.begin() as conn:
        conn.execute(sa.update(outbox).values(first_tried_at=long_ago))
    engine.dispose()
    relay = OutboxRelay(database, memory, poll=0.05)
    async with relaying(relay):
        await wait_until(lambda: relay.relayed == 2, timeout=10, what="both rows settled")
    assert memory.stats.duplicates == 0  # the stored one was looked up, not sent again
    assert sorted(_job_id(d) for d in await receive_all(memory)) == sorted([stored, lost])
    assert _rows(database) == []


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
async def test_a_claim_in_progress_never_holds_up_the_application_s_inserts(
    database: str, memory: MemoryBroker
) -> None:
    await sync_schema(database)
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        send_receipt.enqueue_sync(Outbox(session), order_id=1)
    relay = OutboxRelay(database, memory)
    relay.check(memory.dedup_window)
    claiming = database_engine(parse(database))
    try:
        async with claiming.begin() as conn:  # a relay's claim, its transaction still open
            assert len(await relay._claim(conn, time.time())) == 1
            with engine.connect() as app:
                if app.dialect.name == "postgresql":
                    app.execute(sa.text("SET lock_timeout = '2s'"))
                else:
                    app.execute(sa.text("SET innodb_lock_wait_timeout = 2"))
                send_receipt.enqueue_sync(Outbox(app), order_id=2)
                app.commit()
    finally:
        await claiming.dispose()
        engine.dispose()
    assert len(_rows(database)) == 2


class _NoDelays(MemoryBroker):
    """A memory broker that, like some brokers, cannot hold a job until it is due."""

    capabilities = MemoryBroker.capabilities - {Capability.DELAYED_ENQUEUE}


async def test_a_broker_that_cannot_hold_a_delayed_job_gets_it_from_the_table_when_due(
    database: str, memory: MemoryBroker
) -> None:
    await sync_schema(database)
    broker = _NoDelays(memory.settings)
    await broker.connect()
    engine = sa.create_engine(database, poolclass=sa.NullPool)
    with Session(engine) as session, session.begin():
        now = send_receipt.enqueue_sync(Outbox(session), order_id=1)
        later = send_receipt.enqueue_in_sync(Outbox(session), 1.5, order_id=2)
    due = time.time() + 1.5
    engine.dispose()
    relay = OutboxRelay(database, broker, poll=0.05)
    async with relaying(relay):
        await wait_until(lambda: relay.relayed == 1, timeout=10, what="the due row relayed")
        [waiting] = _rows(database)
        assert waiting.job_id == later
        assert waiting.attempts == 0  # waiting for its time is no failure
        assert waiting.last_error is None
        await wait_until(lambda: relay.relayed == 2, timeout=10, what="the delayed row relayed")
    assert time.time() >= due - 0.01
    await broker.close()
    assert [_job_id(d) for d in await receive_all(memory)] == [now, later]
