"""Contract tests of shared state: records with versions, changed by compare-and-set;
one test or more for each sentence of
:meth:`~framework_m_core.control.shared.Shared.write_state`."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from ...control import runtime_schedules
from ...control.checks import MAX_STATE_VALUE, MAX_STATE_WAIT
from ...control.shared import StateEntry, shared
from ...errors import BrokerError, InvalidStateError
from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ...ports.store import WATCH_DELAY
from ..helpers import BrokerFactory, many
from .base import ContractBase
from .requirements import requires


def _key() -> str:
    return f"state-{uuid.uuid4().hex[:8]}"


async def _increment(broker: BrokerProtocol, key: str) -> int:
    """Add one to the counter under ``key`` by read, compare-and-set, retry; the number
    of writes refused on the way."""
    refused = 0
    while True:
        entry = await shared(broker).read_state(key)
        count = int(entry.value) if entry is not None else 0
        version = entry.version if entry is not None else None
        if await shared(broker).write_state(key, b"%d" % (count + 1), version=version) is not None:
            return refused
        refused += 1


class StateContract(ContractBase):
    """Shared state: what was written is read back everywhere; stale writes change nothing."""

    @requires(Capability.STORE)
    async def test_a_key_without_a_record_reads_none_and_a_first_write_creates_it(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).read_state(key) is None
        version = await shared(broker).write_state(key, b"one", version=None)
        assert isinstance(version, int)
        assert not isinstance(version, bool)
        assert version >= 1
        entry = await shared(broker).read_state(key)
        assert entry is not None
        assert (entry.value, entry.version) == (b"one", version)
        assert await shared(broker).read_state(key) == entry  # reading changed nothing

    @requires(Capability.STORE)
    async def test_a_write_with_the_current_version_replaces_and_gives_a_greater_one(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        versions = [await shared(broker).write_state(key, b"v0", version=None)]
        for i in range(1, 5):
            last = versions[-1]
            assert last is not None
            versions.append(await shared(broker).write_state(key, b"v%d" % i, version=last))
            entry = await shared(broker).read_state(key)
            assert entry is not None
            assert entry.value == b"v%d" % i
            assert entry.version == versions[-1]
        given = [v for v in versions if v is not None]
        assert given == versions
        assert given == sorted(set(given)), versions  # strictly increasing

    @requires(Capability.STORE)
    async def test_a_write_with_another_version_changes_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).write_state(key, b"x", version=1) is None  # no record yet
        assert await shared(broker).read_state(key) is None
        first = await shared(broker).write_state(key, b"first", version=None)
        assert first is not None
        assert await shared(broker).write_state(key, b"again", version=None) is None  # exists now
        second = await shared(broker).write_state(key, b"second", version=first)
        assert second is not None
        for stale in (first, second + 1, second + 1000):
            assert await shared(broker).write_state(key, b"stale", version=stale) is None
        entry = await shared(broker).read_state(key)
        assert entry is not None
        assert (entry.value, entry.version) == (b"second", second)

    @requires(Capability.STORE)
    async def test_state_keys_are_independent(self, broker: BrokerProtocol) -> None:
        one, two = _key(), _key()
        v1 = await shared(broker).write_state(one, b"one", version=None)
        assert v1 is not None
        assert await shared(broker).read_state(two) is None
        v2 = await shared(broker).write_state(two, b"two", version=None)
        assert v2 is not None
        assert await shared(broker).write_state(two, b"two'", version=v2) is not None
        entry = await shared(broker).read_state(one)
        assert entry is not None
        assert (entry.value, entry.version) == (b"one", v1)

    @requires(Capability.STORE)
    async def test_values_come_back_byte_for_byte(self, broker: BrokerProtocol) -> None:
        for value in (b"", bytes(range(256)), b"\x00" * 7, b"\xff" * MAX_STATE_VALUE):
            key = _key()
            assert await shared(broker).write_state(key, value, version=None) is not None
            entry = await shared(broker).read_state(key)
            assert entry is not None
            assert entry.value == value

    @requires(Capability.STORE)
    async def test_a_write_is_read_on_every_connection_once_it_returned(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 3) as brokers:
            version: int | None = None
            for i in range(6):
                writer, reader = brokers[i % 3], brokers[(i + 1) % 3]
                version = await shared(writer).write_state(key, b"w%d" % i, version=version)
                assert version is not None
                entry = await shared(reader).read_state(key)
                assert entry is not None
                assert (entry.value, entry.version) == (b"w%d" % i, version)

    @requires(Capability.STORE)
    async def test_of_writes_with_one_version_at_once_exactly_one_succeeds(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 4) as brokers:
            for expect_absent in (True, False):
                key = _key()
                version = None
                if not expect_absent:
                    version = await shared(brokers[0]).write_state(key, b"base", version=None)
                results = await asyncio.gather(
                    *(
                        shared(brokers[i % 4]).write_state(key, b"w%d" % i, version=version)
                        for i in range(16)
                    )
                )
                won = [i for i, v in enumerate(results) if v is not None]
                assert len(won) == 1, results
                entry = await shared(brokers[3]).read_state(key)
                assert entry is not None
                assert (entry.value, entry.version) == (b"w%d" % won[0], results[won[0]])

    @requires(Capability.STORE)
    async def test_first_writes_on_many_connections_at_once_all_land(
        self, broker_factory: BrokerFactory
    ) -> None:
        """Whatever an adapter makes on first use (a bucket, a table), connections that
        make it at once all get it."""
        keys = [_key() for _ in range(8)]
        async with many(broker_factory, 8) as brokers:
            versions = await asyncio.gather(
                *(
                    shared(b).write_state(k, b"first", version=None)
                    for b, k in zip(brokers, keys, strict=True)
                )
            )
            assert all(v is not None for v in versions), versions
            entries = [await shared(brokers[0]).read_state(k) for k in keys]
        assert [e.value if e else None for e in entries] == [b"first"] * 8

    @requires(Capability.STORE)
    async def test_read_modify_write_loses_no_update_across_connections(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 4) as brokers:
            refused = await asyncio.gather(*(_increment(brokers[i % 4], key) for i in range(24)))
            entry = await shared(brokers[0]).read_state(key)
        assert entry is not None, refused
        assert entry.value == b"24", (entry, refused)

    # -- waiting for a change ------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_a_wait_returns_at_once_when_the_record_differs(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        async with asyncio.timeout(10):  # far below the waits' own timeout
            assert await shared(broker).wait_state(key, 7, timeout=60) is None  # no record
            one = await shared(broker).write_state(key, b"one", version=None)
            assert one is not None
            assert await shared(broker).wait_state(key, None, timeout=60) == StateEntry(b"one", one)
            two = await shared(broker).write_state(key, b"two", version=one)
            assert two is not None
            assert await shared(broker).wait_state(key, one, timeout=60) == StateEntry(b"two", two)
            assert await shared(broker).wait_state(key, two + 5, timeout=60) == StateEntry(
                b"two", two
            )

    @requires(Capability.STORE)
    async def test_a_wait_on_an_unchanged_record_lasts_its_timeout(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        one = await shared(broker).write_state(key, b"one", version=None)
        assert one is not None
        for waited, version, expect in (
            (key, one, StateEntry(b"one", one)),
            (_key(), None, None),
        ):
            started = time.monotonic()
            assert await shared(broker).wait_state(waited, version, timeout=0.5) == expect
            assert time.monotonic() - started >= 0.45, "returned early with no change"

    @requires(Capability.STORE)
    async def test_a_wait_sees_writes_from_another_connection(
        self, broker_factory: BrokerFactory, broker: BrokerProtocol
    ) -> None:
        """Within WATCH_DELAY (two seconds) of the write, of a thirty-second wait."""
        key = _key()
        async with many(broker_factory, 2) as (writer, waiter):
            version: int | None = None
            for i in range(3):  # the first wait is on a key without a record
                waiting = asyncio.create_task(shared(waiter).wait_state(key, version, timeout=30))
                await asyncio.sleep(0.3)  # the wait is under way (or the check below fails)
                assert not waiting.done(), "returned with no change"
                version = await shared(writer).write_state(key, b"w%d" % i, version=version)
                wrote = time.monotonic()
                assert version is not None
                async with asyncio.timeout(WATCH_DELAY + 5):
                    entry = await waiting
                waited = time.monotonic() - wrote
                assert entry == StateEntry(b"w%d" % i, version)
                assert waited <= WATCH_DELAY, f"the write woke the wait after {waited:.2f}s"

    @requires(Capability.STORE)
    async def test_waits_on_one_key_from_many_connections_all_end(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 4) as brokers:
            first = await shared(brokers[0]).write_state(key, b"first", version=None)
            assert first is not None
            waits = [
                asyncio.create_task(shared(b).wait_state(key, first, timeout=3))
                for b in brokers[1:]
            ]
            waits.append(asyncio.create_task(shared(brokers[1]).wait_state(key, first, timeout=3)))
            await asyncio.sleep(0.3)
            second = await shared(brokers[0]).write_state(key, b"second", version=first)
            assert second is not None
            async with asyncio.timeout(10):
                entries = await asyncio.gather(*waits)
        assert entries == [StateEntry(b"second", second)] * 4

    async def test_invalid_arguments_are_refused_before_sending(
        self, broker: BrokerProtocol
    ) -> None:
        for key in ("", " k", "k\n", "x" * 201, None, 5):
            with pytest.raises(InvalidStateError):
                await shared(broker).read_state(key)  # type: ignore[arg-type]
            with pytest.raises(InvalidStateError):
                await shared(broker).write_state(key, b"v", version=None)  # type: ignore[arg-type]
        for value in ("text", bytearray(b"v"), None, b"x" * (MAX_STATE_VALUE + 1)):
            with pytest.raises(InvalidStateError):
                await shared(broker).write_state("k", value, version=None)  # type: ignore[arg-type]
        for version in (0, -1, True, 1.0, "1"):
            with pytest.raises(InvalidStateError):
                await shared(broker).write_state("k", b"v", version=version)  # type: ignore[arg-type]
            with pytest.raises(InvalidStateError):
                await shared(broker).wait_state("k", version, timeout=1)  # type: ignore[arg-type]
        for key in ("", " k", None):
            with pytest.raises(InvalidStateError):
                await shared(broker).wait_state(key, None, timeout=1)  # type: ignore[arg-type]
        bad_waits = (0, -1, float("nan"), float("inf"), MAX_STATE_WAIT + 1, True, "1", None)
        for timeout in bad_waits:
            with pytest.raises(InvalidStateError):
                await shared(broker).wait_state("k", None, timeout=timeout)  # type: ignore[arg-type]
        if Capability.STORE in broker.capabilities:
            assert await shared(broker).read_state("k") is None  # nothing was written

    async def test_a_broker_without_state_says_so(self, broker: BrokerProtocol) -> None:
        if Capability.STORE in broker.capabilities:
            pytest.skip("the adapter declares the 'store' capability")
        with pytest.raises(BrokerError):
            await shared(broker).read_state("k")
        with pytest.raises(BrokerError):
            await shared(broker).write_state("k", b"v", version=None)
        with pytest.raises(BrokerError):
            await shared(broker).wait_state("k", None, timeout=0.1)

    # -- runtime schedules: the records they are kept in (control.runtime_schedules)---------

    @requires(Capability.STORE)
    async def test_runtime_schedules_set_on_one_connection_are_read_on_another(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 2) as (writer, reader):
            one = _runtime("rt-one", every_seconds=5, kwargs={"tenant": "a"})
            two = _runtime("rt-two", cron_expression="0 9 * * 1-5", tz="Europe/Berlin")
            await runtime_schedules.set_schedule(writer, one)
            await runtime_schedules.set_schedule(writer, two)
            assert await runtime_schedules.list_schedules(reader) == [one, two]
            catalog = await runtime_schedules.read_catalog(reader)
            changed = _runtime("rt-one", every_seconds=7, kwargs={"tenant": "b"})
            await runtime_schedules.set_schedule(writer, changed)
            assert await runtime_schedules.get_schedule(reader, "rt-one") == changed
            later = await runtime_schedules.read_catalog(reader)
            assert later.changed_since(catalog.counter) == {runtime_schedules.bucket_of("rt-one")}
            assert await runtime_schedules.delete_schedule(writer, "rt-one")
            assert await runtime_schedules.list_schedules(reader) == [two]
            assert await runtime_schedules.get_schedule(reader, "rt-one") is None

    @requires(Capability.STORE)
    async def test_runtime_schedule_writers_on_many_connections_lose_none(
        self, broker_factory: BrokerFactory
    ) -> None:
        """Twelve sets and six deletes at once from four connections, half of them on
        ids that share one bucket record."""
        shared = _ids_in_one_bucket(6)
        ids = shared + [f"rt-spread-{i}" for i in range(6)]
        async with many(broker_factory, 4) as brokers:
            await asyncio.gather(
                *(
                    runtime_schedules.set_schedule(
                        brokers[i % 4], _runtime(schedule_id, every_seconds=60)
                    )
                    for i, schedule_id in enumerate(ids)
                )
            )
            assert [s.id for s in await runtime_schedules.list_schedules(brokers[0])] == sorted(ids)
            gone = ids[::2]
            await asyncio.gather(
                *(
                    runtime_schedules.delete_schedule(brokers[i % 4], sid)
                    for i, sid in enumerate(gone)
                )
            )
            left = [s.id for s in await runtime_schedules.list_schedules(brokers[1])]
        assert left == sorted(set(ids) - set(gone))


def _runtime(schedule_id: str, **options: Any) -> runtime_schedules.RuntimeSchedule:
    return runtime_schedules.runtime_schedule(schedule_id, "report", **options)


def _ids_in_one_bucket(count: int) -> list[str]:
    ids: dict[int, list[str]] = {}
    for i in range(100_000):
        schedule_id = f"rt-shared-{i}"
        found = ids.setdefault(runtime_schedules.bucket_of(schedule_id), [])
        found.append(schedule_id)
        if len(found) == count:
            return found
    raise AssertionError("no bucket took enough ids")
