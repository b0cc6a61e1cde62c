"""Contract tests of leases: a few places under a key, each held by one holder until it
is released or expires; one test or more for each sentence of
:meth:`~framework_m_core.control.shared.Shared.acquire_lease`."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from ...control.shared import shared
from ...errors import BrokerError, InvalidLeaseError
from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ..helpers import BrokerFactory, many, wait_until
from ..scenarios import Process, Processes
from .base import ContractBase
from .requirements import requires

TTL = 1.0
# A lease expires within this long after its ttl (broker timers, a loaded machine).
LATE = 2.0


def _key() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


async def _free_after(broker: BrokerProtocol, key: str, holder: str, since: float) -> float:
    """Seconds from ``since`` until ``holder`` could take a place under ``key``."""
    await wait_until(
        lambda: shared(broker).acquire_lease(key, holder, TTL),
        timeout=TTL + LATE + 3,
        interval=0.05,
        what=f"{holder} acquiring {key}",
    )
    return time.monotonic() - since


class LeaseContract(ContractBase):
    """Leases: exclusive across connections and processes, expiring unless extended."""

    @requires(Capability.STORE)
    async def test_a_place_is_held_until_released_and_then_free_at_once(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).acquire_lease(key, "a", TTL) is True
        assert await shared(broker).acquire_lease(key, "b", TTL) is False
        assert list(await shared(broker).lease_holders(key)) == ["a"]  # the refusal changed nothing
        assert await shared(broker).release_lease(key, "a") is True
        assert await shared(broker).acquire_lease(key, "b", TTL) is True
        assert list(await shared(broker).lease_holders(key)) == ["b"]

    @requires(Capability.STORE)
    async def test_keys_are_independent(self, broker: BrokerProtocol) -> None:
        one, two = _key(), _key()
        assert await shared(broker).acquire_lease(one, "a", TTL)
        assert await shared(broker).acquire_lease(two, "b", TTL)
        assert await shared(broker).acquire_lease(two, "a", TTL) is False
        assert list(await shared(broker).lease_holders(one)) == ["a"]
        assert list(await shared(broker).lease_holders(two)) == ["b"]

    @requires(Capability.STORE)
    async def test_never_more_than_limit_holders_across_connections_at_once(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 4) as brokers:
            held = await asyncio.gather(
                *(
                    shared(brokers[i % 4]).acquire_lease(key, f"h{i}", 5.0, limit=3)
                    for i in range(24)
                )
            )
            assert sum(held) == 3, held
            winners = {f"h{i}" for i, ok in enumerate(held) if ok}
            for b in brokers:
                assert set(await shared(b).lease_holders(key, limit=3)) == winners
            assert not await shared(brokers[0]).acquire_lease(key, "late", 5.0, limit=3)

    @requires(Capability.STORE)
    async def test_acquiring_again_keeps_one_place_and_renews_it(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).acquire_lease(key, "a", TTL, limit=2)
        assert await shared(broker).acquire_lease(key, "a", TTL, limit=2)  # the same place
        assert await shared(broker).acquire_lease(key, "b", TTL, limit=2)  # so one is left for b
        assert not await shared(broker).acquire_lease(key, "c", TTL, limit=2)
        start = time.monotonic()
        while time.monotonic() - start < 2.5 * TTL:  # renewed by acquiring, it stays held
            assert await shared(broker).acquire_lease(key, "a", TTL, limit=2)
            await asyncio.sleep(TTL / 4)
        assert list(await shared(broker).lease_holders(key, limit=2)) == ["a"]  # b expired
        assert await shared(broker).acquire_lease(key, "c", TTL, limit=2)
        assert not await shared(broker).acquire_lease(key, "d", TTL, limit=2)

    @requires(Capability.STORE)
    async def test_a_place_expires_after_its_ttl_and_not_before(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        start = time.monotonic()
        assert await shared(broker).acquire_lease(key, "a", TTL)
        await asyncio.sleep(TTL / 2)
        assert not await shared(broker).acquire_lease(key, "b", TTL)
        assert list(await shared(broker).lease_holders(key)) == ["a"]
        waited = await _free_after(broker, key, "b", start)
        assert TTL * 0.9 <= waited <= TTL + LATE, waited
        assert list(await shared(broker).lease_holders(key)) == ["b"]

    @requires(Capability.STORE)
    async def test_a_place_held_at_close_lasts_until_its_ttl(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        """Closing a broker releases none of its places: a holder that closes without
        releasing keeps its place until the ttl, as if it had died."""
        key = _key()
        holder = broker_factory()
        await holder.connect()
        start = time.monotonic()
        try:
            assert await shared(holder).acquire_lease(key, "closing", TTL)
        finally:
            await holder.close()
        assert list(await shared(broker).lease_holders(key)) == ["closing"]
        assert not await shared(broker).acquire_lease(key, "other", TTL)
        waited = await _free_after(broker, key, "other", start)
        assert TTL * 0.9 <= waited <= TTL + LATE, waited

    @requires(Capability.STORE)
    async def test_an_extended_place_is_kept_past_its_ttl_then_expires(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 2) as (holder, rival):
            assert await shared(holder).acquire_lease(key, "a", TTL)
            start = time.monotonic()
            while time.monotonic() - start < 3 * TTL:
                assert await shared(holder).extend_lease(key, "a")
                assert not await shared(rival).acquire_lease(key, "b", TTL)
                await asyncio.sleep(TTL / 4)
            stopped = time.monotonic()
            waited = await _free_after(rival, key, "b", stopped)
            assert waited <= TTL + LATE, waited

    @requires(Capability.STORE)
    async def test_extending_by_another_holder_fails_and_changes_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        start = time.monotonic()
        assert await shared(broker).acquire_lease(key, "a", TTL)
        assert await shared(broker).extend_lease(key, "b") is False
        assert await shared(broker).extend_lease(_key(), "a") is False  # a key it never held
        assert list(await shared(broker).lease_holders(key)) == ["a"]

        async def others_extend() -> None:
            while True:
                assert await shared(broker).extend_lease(key, "b") is False
                await asyncio.sleep(TTL / 5)

        extending = asyncio.ensure_future(others_extend())
        try:  # b's extends do not keep a's place alive
            waited = await _free_after(broker, key, "c", start)
        finally:
            extending.cancel()
        assert waited <= TTL + LATE, waited

    @requires(Capability.STORE)
    async def test_an_expired_place_is_never_revived_by_extend(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).acquire_lease(key, "a", TTL)

        async def expired() -> bool:
            return list(await shared(broker).lease_holders(key)) == []

        await wait_until(expired, timeout=TTL + LATE, interval=0.05, what="expiry")
        assert await shared(broker).extend_lease(key, "a") is False
        assert list(await shared(broker).lease_holders(key)) == []
        assert await shared(broker).acquire_lease(key, "b", TTL)
        assert await shared(broker).extend_lease(key, "a") is False
        assert list(await shared(broker).lease_holders(key)) == ["b"]

    @requires(Capability.STORE)
    async def test_release_is_idempotent_and_never_frees_another_holders_place(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 2) as (one, two):
            assert await shared(one).acquire_lease(key, "a", 5.0)
            assert await shared(two).release_lease(key, "b") is False  # not b's
            assert await shared(one).release_lease(key, "b") is False
            assert list(await shared(two).lease_holders(key)) == ["a"]
            assert await shared(one).release_lease(key, "a") is True
            assert await shared(one).release_lease(key, "a") is False  # released already
            assert await shared(two).acquire_lease(key, "b", 5.0)
            assert await shared(one).release_lease(key, "a") is False
            assert await shared(one).release_lease(key, "c") is False
            assert list(await shared(one).lease_holders(key)) == ["b"]
            assert not await shared(one).acquire_lease(key, "c", 5.0)
            assert await shared(one).release_lease(_key(), "b") is False

    @requires(Capability.STORE)
    async def test_releasing_an_expired_place_returns_false(self, broker: BrokerProtocol) -> None:
        key = _key()
        assert await shared(broker).acquire_lease(key, "a", TTL)
        await _free_after(broker, key, "b", time.monotonic())
        assert await shared(broker).release_lease(key, "a") is False
        assert list(await shared(broker).lease_holders(key)) == ["b"]

    @requires(Capability.STORE)
    async def test_reading_the_holders_changes_nothing(self, broker: BrokerProtocol) -> None:
        key = _key()
        assert list(await shared(broker).lease_holders(key, limit=2)) == []
        assert await shared(broker).acquire_lease(key, "a", 5.0, limit=2)
        assert await shared(broker).acquire_lease(key, "b", 5.0, limit=2)
        for _ in range(3):
            assert sorted(await shared(broker).lease_holders(key, limit=2)) == ["a", "b"]
        assert not await shared(broker).acquire_lease(key, "c", 5.0, limit=2)

    @pytest.mark.parametrize(
        ("key", "holder", "ttl", "limit"),
        [
            ("", "a", 1.0, 1),
            (" k", "a", 1.0, 1),
            ("k" * 201, "a", 1.0, 1),
            ("k\n", "a", 1.0, 1),
            (7, "a", 1.0, 1),
            ("k", "", 1.0, 1),
            ("k", "a\t", 1.0, 1),
            ("k", None, 1.0, 1),
            ("k", "a", 0, 1),
            ("k", "a", -1.0, 1),
            ("k", "a", math.nan, 1),
            ("k", "a", math.inf, 1),
            ("k", "a", True, 1),
            ("k", "a", "1", 1),
            ("k", "a", 1.0, 0),
            ("k", "a", 1.0, 1.5),
            ("k", "a", 1.0, True),
            ("k", "a", 1.0, 10**6),
        ],
    )
    async def test_invalid_arguments_are_refused_and_send_nothing(
        self, broker: BrokerProtocol, key: object, holder: object, ttl: object, limit: object
    ) -> None:
        with pytest.raises(InvalidLeaseError):
            await shared(broker).acquire_lease(key, holder, ttl, limit=limit)  # type: ignore[arg-type]
        if isinstance(key, str) and isinstance(holder, str) and (key, holder) != ("k", "a"):
            with pytest.raises(InvalidLeaseError):
                await shared(broker).extend_lease(key, holder)
            with pytest.raises(InvalidLeaseError):
                await shared(broker).release_lease(key, holder)
        if Capability.STORE in broker.capabilities:
            assert list(await shared(broker).lease_holders("k")) == []

    async def test_a_broker_without_leases_says_so(self, broker: BrokerProtocol) -> None:
        if Capability.STORE in broker.capabilities:
            pytest.skip("the adapter declares the 'store' capability")
        for call in (
            shared(broker).acquire_lease("k", "a", 1.0),
            shared(broker).extend_lease("k", "a"),
            shared(broker).release_lease("k", "a"),
            shared(broker).lease_holders("k"),
        ):
            with pytest.raises(BrokerError):
                await call

    # -- across processes --------------------------------------------------------------

    def _holders(
        self, procs: Processes, url: str, key: str, go: Path, *holders: str, limit: int = 1
    ) -> Process:
        return procs.start(
            sys.executable,
            "-m",
            "framework_m_core.testing.lease_holder",
            url,
            key,
            str(TTL),
            str(limit),
            str(go),
            *holders,
        )

    @requires(Capability.STORE, Capability.CROSS_PROCESS)
    async def test_processes_acquiring_at_once_never_exceed_the_limit(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        key, go = _key(), tmp_path / "go"
        children = [
            self._holders(procs, broker_url, key, go, *(f"p{p}h{i}" for i in range(6)), limit=2)
            for p in range(3)
        ]
        for child in children:
            await asyncio.to_thread(child.wait_for, "^ready$", 1, 30)
        go.touch()
        won: set[str] = set()
        for child in children:
            [line] = await asyncio.to_thread(child.wait_for, r"^\{", 1, 30)
            won |= {h for h, ok in json.loads(line.string).items() if ok}
        assert len(won) == 2, won
        assert set(await shared(broker).lease_holders(key, limit=2)) == won
        assert not await shared(broker).acquire_lease(key, "parent", TTL, limit=2)

    @requires(Capability.STORE, Capability.CROSS_PROCESS)
    async def test_a_live_process_that_stops_extending_loses_its_place(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        key, go = _key(), tmp_path / "go"
        child = self._holders(procs, broker_url, key, go, "child")
        await asyncio.to_thread(child.wait_for, "^ready$", 1, 30)
        go.touch()
        await asyncio.to_thread(child.wait_for, r'^\{"child": true\}', 1, 30)
        start = time.monotonic()
        assert not await shared(broker).acquire_lease(key, "parent", TTL)
        waited = await _free_after(broker, key, "parent", start)
        assert waited <= TTL + LATE, waited
        assert child.proc.poll() is None  # it lived on, holding nothing

    @requires(Capability.STORE, Capability.CROSS_PROCESS)
    async def test_a_process_extending_keeps_its_place_and_a_killed_one_frees_it(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        key, go = _key(), tmp_path / "go"
        child = self._holders(procs, broker_url, key, go, "--extend", "child")
        await asyncio.to_thread(child.wait_for, "^ready$", 1, 30)
        go.touch()
        await asyncio.to_thread(child.wait_for, r'^\{"child": true\}', 1, 30)
        start = time.monotonic()
        while time.monotonic() - start < 3 * TTL:
            assert not await shared(broker).acquire_lease(key, "parent", TTL)
            assert list(await shared(broker).lease_holders(key)) == ["child"]
            await asyncio.sleep(TTL / 4)
        assert not child.matches("^lost")
        child.signal(signal.SIGKILL)
        killed = time.monotonic()
        waited = await _free_after(broker, key, "parent", killed)
        assert waited <= TTL + LATE, waited
