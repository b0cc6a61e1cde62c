"""Contract tests of schema sync (``SchemaSyncProtocol``) and of the dedup window it sets."""

from __future__ import annotations

import asyncio
import time

import pytest

from ...adapters.registry import open_broker
from ...errors import SchemaConflictError
from ...ports.capabilities import Capability
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ..helpers import PROMPT, BrokerFactory, connected, receive_all
from ..namespaces import with_option
from .base import ContractBase
from .requirements import DEDUP_WINDOW_IN_URL, SHORT_DEDUP_WINDOW, requires


async def _enforced_window(broker: BrokerProtocol, shortest: float) -> bool:
    """Whether an id enqueued ``shortest`` + 0.5 s earlier is still a duplicate."""
    dedup_id = f"window-probe:{time.monotonic_ns()}"
    await broker.enqueue("probe", deduplication_id=dedup_id)
    stored_by = time.monotonic()
    await asyncio.sleep(max(0.0, stored_by + shortest + 0.5 - time.monotonic()))
    before = broker.stats.duplicates
    await broker.enqueue("probe", deduplication_id=dedup_id)
    return broker.stats.duplicates == before + 1


class SchemaContract(ContractBase):
    """Planning, syncing, refusing, and the window the broker really keeps."""

    async def test_planning_and_a_dry_run_change_nothing(
        self, broker_factory: BrokerFactory
    ) -> None:
        broker = broker_factory()
        await broker.connect()
        try:
            plan = await broker.plan_schema()
            assert not plan.in_sync
            assert not plan.refused
            assert {c.action for c in plan.changes} == {"create"}
            assert (await broker.plan_schema()).changes == plan.changes
            assert (await broker.sync_schema(dry_run=True)).changes == plan.changes
            assert (await broker.plan_schema()).changes == plan.changes
        finally:
            await broker.close()

    async def test_sync_creates_then_finds_nothing_to_do_and_keeps_messages(
        self, broker_factory: BrokerFactory
    ) -> None:
        broker = broker_factory()
        await broker.connect()
        try:
            assert not (await broker.sync_schema()).in_sync
            job_id = await broker.enqueue("job")
            async with connected(broker_factory) as other:
                assert (await other.sync_schema()).in_sync
                assert (await other.plan_schema()).in_sync
                assert (await other.sync_schema(dry_run=True)).in_sync
            [delivery] = await broker.receive(10, PROMPT)
            assert decode_message(delivery.body).id == job_id
        finally:
            await broker.close()

    async def test_replicas_syncing_at_once_all_succeed(
        self, broker_factory: BrokerFactory
    ) -> None:
        brokers = [broker_factory() for _ in range(4)]
        await asyncio.gather(*(b.connect() for b in brokers))
        try:
            await asyncio.gather(*(b.sync_schema() for b in brokers))
            assert (await brokers[0].plan_schema()).in_sync
        finally:
            await asyncio.gather(*(b.close() for b in brokers))

    @requires(DEDUP_WINDOW_IN_URL, SHORT_DEDUP_WINDOW)
    async def test_a_new_dedup_window_is_migrated_in_place_or_refused_and_reported(
        self, broker: BrokerProtocol, broker_url: str
    ) -> None:
        old = broker.dedup_window
        new = old + 4.0  # a probe past the old window stays well inside the new one
        job_id = await broker.enqueue("queued_before")
        changed_url = with_option(broker_url, "dedup_window", new)
        changed = open_broker(changed_url)
        await changed.connect()
        try:
            plan = await changed.plan_schema()
            assert (await changed.sync_schema(dry_run=True)).changes == plan.changes
            if plan.refused:  # the broker cannot change it in place: nothing changes
                with pytest.raises(SchemaConflictError):
                    await changed.sync_schema()
                assert (await changed.plan_schema()).changes == plan.changes
                in_force, in_force_url = broker, broker_url
            else:
                assert (await changed.sync_schema()).changes == plan.changes
                assert (await changed.plan_schema()).in_sync
                in_force, in_force_url = changed, changed_url
            # dedup_window of the broker that synced is the window enforced, and the one
            # any other replica finds.
            assert in_force.dedup_window in (old, new)
            assert await _enforced_window(in_force, old) == (in_force.dedup_window == new)
            fresh = open_broker(in_force_url)
            await fresh.connect()
            try:
                await fresh.sync_schema()
                assert fresh.dedup_window == in_force.dedup_window
            finally:
                await fresh.close()
        finally:
            await changed.close()
        queued = [decode_message(d.body) for d in await receive_all(broker)]
        assert job_id in [m.id for m in queued]

    @requires(Capability.STORED_DEDUP_WINDOW, DEDUP_WINDOW_IN_URL)
    async def test_a_url_with_another_dedup_window_plans_a_change(
        self, broker: BrokerProtocol, broker_url: str
    ) -> None:
        other = with_option(broker_url, "dedup_window", broker.dedup_window + 4.0)
        async with connected(lambda: open_broker(other), sync=False) as changed:
            plan = await changed.plan_schema()
            assert not plan.in_sync, "a different dedup window is a difference"
            assert {c.action for c in plan.changes} <= {"update", "refuse"}

    @requires(Capability.STORED_DEDUP_WINDOW, DEDUP_WINDOW_IN_URL)
    async def test_every_replica_reports_the_window_the_queue_keeps(
        self, broker: BrokerProtocol, broker_url: str
    ) -> None:
        old = broker.dedup_window
        new_url = with_option(broker_url, "dedup_window", old + 4.0)
        async with connected(lambda: open_broker(new_url), sync=False) as changed:
            plan = await changed.plan_schema()
            if not plan.refused:  # (refused: a replica with that URL cannot start at all)
                await changed.sync_schema()
                assert changed.dedup_window == old + 4.0
            kept = old if plan.refused else old + 4.0
            # A replica opened with the old URL after the change, which only reads the
            # schema (a worker with --no-sync-schema), reports the window kept.
            async with connected(lambda: open_broker(broker_url), sync=False) as stale:
                await stale.plan_schema()
                assert stale.dedup_window == kept, "the queue's window, not the URL's"

    async def test_a_plan_that_refuses_changes_nothing_when_synced(
        self, broker: BrokerProtocol, refused_url: str | None
    ) -> None:
        if refused_url is None:
            pytest.skip(
                "the hook-up gives no refused_url fixture (a URL, or a queue made so, whose "
                "plan the adapter must refuse): the refusal path is not tested"
            )
        job_id = await broker.enqueue("queued_before")
        async with connected(lambda: open_broker(refused_url), sync=False) as refusing:
            plan = await refusing.plan_schema()
            assert plan.refused, "the refused_url fixture must give a URL whose plan refuses"
            with pytest.raises(SchemaConflictError):
                await refusing.sync_schema()
            assert (await refusing.plan_schema()).changes == plan.changes  # nothing changed
        queued = [decode_message(d.body) for d in await receive_all(broker)]
        assert job_id in [m.id for m in queued]
