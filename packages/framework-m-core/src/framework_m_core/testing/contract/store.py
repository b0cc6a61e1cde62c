"""Contract tests of the store: records with versions, written by compare-and-set,
expiring, claimed and watched; one test or more for each sentence of
:class:`~framework_m_core.ports.store.StoreProtocol`."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ...errors import BrokerError, InvalidRecordError
from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ...ports.store import (
    ANY,
    MAX_KEY,
    MAX_VALUE,
    WATCH_DELAY,
    Record,
    StoreProtocol,
    Write,
    place_key,
)
from ..helpers import BrokerFactory, many
from ..scenarios import Process, Processes
from .base import ContractBase
from .requirements import requires

TTL = 1.5
# A record is read this long before its ttl ends (it must be there) and after (gone).
MARGIN = 0.5


def _key() -> str:
    return f"rec-{uuid.uuid4().hex[:8]}"


async def _create(store: StoreProtocol, key: str, value: bytes, ttl: float | None = None) -> int:
    (version,) = await store.write([Write(key, value, version=None, ttl=ttl)])
    assert version is not None, f"creating {key} was refused"
    return version


async def _one(store: StoreProtocol, key: str) -> Record | None:
    (record,) = await store.read([key])
    return record


async def _increment(store: StoreProtocol, key: str) -> None:
    """Add one to the counter under ``key`` by read, compare-and-set, retry."""
    while True:
        record = await _one(store, key)
        count = 0 if record is None else int(record.value)
        version = None if record is None else record.version
        (new,) = await store.write([Write(key, b"%d" % (count + 1), version=version)])
        if new is not None:
            return


async def _until(since: float, seconds: float) -> None:
    await asyncio.sleep(max(0.0, since + seconds - time.monotonic()))


class StoreContract(ContractBase):
    """The store: what was written is read back everywhere, stale writes change nothing,
    records last their ttl and no longer, claims never share a place, watches wake."""

    # -- read and write ------------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_store_keys_without_a_record_read_none_and_a_create_makes_one(
        self, broker: BrokerProtocol
    ) -> None:
        store, one, two = broker.store, _key(), _key()
        assert await store.read([]) == []
        assert await store.read([one, two]) == [None, None]
        version = await _create(store, one, b"one")
        assert isinstance(version, int)
        assert not isinstance(version, bool)
        assert version >= 1
        assert await store.read([one, two, one]) == [
            Record(b"one", version),
            None,
            Record(b"one", version),
        ]
        assert await store.read([one]) == [Record(b"one", version)]  # reading changed nothing

    @requires(Capability.STORE)
    async def test_store_a_create_over_a_record_is_refused_and_changes_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        version = await _create(store, key, b"first")
        assert await store.write([Write(key, b"second", version=None)]) == [None]
        assert await _one(store, key) == Record(b"first", version)

    @requires(Capability.STORE)
    async def test_store_a_write_with_the_current_version_replaces_and_gives_a_greater_one(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        versions = [await _create(store, key, b"v0")]
        for i in range(1, 5):
            (new,) = await store.write([Write(key, b"v%d" % i, version=versions[-1])])
            assert new is not None
            versions.append(new)
            assert await _one(store, key) == Record(b"v%d" % i, new)
        assert versions == sorted(set(versions)), versions

    @requires(Capability.STORE)
    async def test_store_a_write_with_a_stale_or_unknown_version_changes_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        assert await store.write([Write(key, b"x", version=1)]) == [None]  # no record yet
        assert await _one(store, key) is None
        first = await _create(store, key, b"first")
        (second,) = await store.write([Write(key, b"second", version=first)])
        assert second is not None
        for stale in (first, second + 1, second + 1000):
            assert await store.write([Write(key, b"stale", version=stale)]) == [None]
            assert await store.write([Write(key, None, version=stale)]) == [None]
        assert await _one(store, key) == Record(b"second", second)

    @requires(Capability.STORE)
    async def test_store_a_write_of_any_version_always_lands(self, broker: BrokerProtocol) -> None:
        store, key = broker.store, _key()
        (first,) = await store.write([Write(key, b"a")])  # no record: lands
        (second,) = await store.write([Write(key, b"b", version=ANY)])  # a record: lands
        assert first is not None
        assert second is not None
        assert second > first
        assert await _one(store, key) == Record(b"b", second)

    @requires(Capability.STORE)
    async def test_store_sent_writes_land_in_order_and_are_read_on_every_connection(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 2) as (sender, other):
            store, key, gone = sender.store, _key(), _key()
            # the first call on a fresh store: nothing made before it
            await store.send([Write(key, b"a", ttl=60), Write(gone, b"x"), Write(key, b"b")])
            await store.send([Write(gone, None)])
            deadline = time.monotonic() + WATCH_DELAY
            while True:
                record, removed = await other.store.read([key, gone])
                if record is not None and record.value == b"b" and removed is None:
                    break
                assert time.monotonic() < deadline, f"not read back: {record}, {removed}"
                await asyncio.sleep(0.05)
            (after,) = await store.write([Write(key, b"c", version=record.version)])
            assert after is not None  # a sent write has a version to write again by
            assert after > record.version

    @requires(Capability.STORE)
    async def test_store_a_write_after_a_send_lands_after_it(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 2) as (sender, other):
            store = sender.store
            for _ in range(20):
                sent, written = _key(), _key()
                await store.send([Write(sent, b"sent", ttl=60)])
                await _create(store, written, b"written")
                assert [r and r.value for r in await other.store.read([written, sent])] == [
                    b"written",
                    b"sent",
                ]

    @requires(Capability.STORE)
    async def test_store_a_delete_returns_the_version_it_removed_and_only_when_it_matched(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        assert await store.write([Write(key, None)]) == [None]  # nothing to delete
        version = await _create(store, key, b"x")
        assert await store.write([Write(key, None, version=None)]) == [None]  # it has one
        assert await store.write([Write(key, None, version=version)]) == [version]
        assert await _one(store, key) is None
        assert await store.write([Write(key, None, version=version)]) == [None]
        again = await _create(store, key, b"y")
        assert await store.write([Write(key, None)]) == [again]  # ANY
        assert await _one(store, key) is None

    @requires(Capability.STORE)
    async def test_store_versions_grow_across_keys_and_never_come_back_to_a_key(
        self, broker: BrokerProtocol
    ) -> None:
        """A version is never given twice: a compare-and-set holding an old version of a
        key that was deleted and written again must be refused."""
        store, one, two = broker.store, _key(), _key()
        given = [await _create(store, one, b"1"), await _create(store, two, b"2")]
        (deleted,) = await store.write([Write(one, None)])
        assert deleted == given[0]
        given.append(await _create(store, one, b"1 again"))
        (replaced,) = await store.write([Write(two, b"2'", version=given[1])])
        assert replaced is not None
        given.append(replaced)
        assert given == sorted(set(given)), given
        assert await store.write([Write(one, b"stale", version=given[0])]) == [None]
        assert await _one(store, one) == Record(b"1 again", given[2])

    @requires(Capability.STORE)
    async def test_store_the_writes_of_one_call_apply_in_order_each_on_its_own(
        self, broker: BrokerProtocol
    ) -> None:
        store, one, two = broker.store, _key(), _key()
        taken = await _create(store, two, b"taken")
        results = await store.write(
            [
                Write(one, b"a", version=None),
                Write(two, b"refused", version=None),  # two has a record: refused
                Write(one, b"b", version=None),  # the first write made one: refused
                Write(one, b"c", version=ANY),
            ]
        )
        assert results[1] is None
        assert results[2] is None
        assert results[0] is not None
        assert results[3] is not None
        assert results[3] > results[0] > taken
        assert await store.read([one, two]) == [Record(b"c", results[3]), Record(b"taken", taken)]
        (last,) = await store.write([Write(one, b"d", version=results[3])])
        assert last is not None

    @requires(Capability.STORE)
    async def test_store_values_come_back_byte_for_byte(self, broker: BrokerProtocol) -> None:
        store = broker.store
        values = [b"", bytes(range(256)), b"\x00" * 7, b"\xff" * MAX_VALUE, "é ✓".encode()]
        keys = [_key() for _ in values]
        versions = await store.write(
            [Write(k, v, version=None) for k, v in zip(keys, values, strict=True)]
        )
        records = await store.read(keys)
        assert [r.value if r else None for r in records] == values
        assert [r.version if r else None for r in records] == versions

    @requires(Capability.STORE)
    async def test_store_a_write_is_read_on_every_connection_once_it_returned(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 3) as brokers:
            version: Any = None
            for i in range(6):
                writer, reader = brokers[i % 3].store, brokers[(i + 1) % 3].store
                (version,) = await writer.write([Write(key, b"w%d" % i, version=version)])
                assert version is not None
                assert await _one(reader, key) == Record(b"w%d" % i, version)

    @requires(Capability.STORE)
    async def test_store_of_writes_with_one_condition_at_once_exactly_one_succeeds(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 4) as brokers:
            stores = [b.store for b in brokers]
            for case in ("create", "replace", "delete"):
                key = _key()
                version = None if case == "create" else await _create(stores[0], key, b"base")
                results = await asyncio.gather(
                    *(
                        stores[i % 4].write(
                            [Write(key, None if case == "delete" else b"w%d" % i, version)]
                        )
                        for i in range(16)
                    )
                )
                won = [i for i, (v,) in enumerate(results) if v is not None]
                assert len(won) == 1, (case, results)
                (new,) = results[won[0]]
                assert new is not None
                expected = None if case == "delete" else Record(b"w%d" % won[0], new)
                assert await _one(stores[3], key) == expected, case

    @requires(Capability.STORE)
    async def test_store_first_writes_on_many_connections_at_once_all_land(
        self, broker_factory: BrokerFactory
    ) -> None:
        """Whatever an adapter makes on first use, connections that make it at once all
        get it."""
        keys = [_key() for _ in range(8)]
        async with many(broker_factory, 8) as brokers:
            await asyncio.gather(
                *(_create(b.store, k, b"first") for b, k in zip(brokers, keys, strict=True))
            )
            records = await brokers[0].store.read(keys)
        assert [r.value if r else None for r in records] == [b"first"] * 8

    @requires(Capability.STORE)
    async def test_store_read_modify_write_loses_no_update_across_connections(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 4) as brokers:
            await asyncio.gather(*(_increment(brokers[i % 4].store, key) for i in range(24)))
            record = await _one(brokers[0].store, key)
        assert record is not None
        assert record.value == b"24"

    # -- time to live --------------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_store_a_record_lasts_its_ttl_and_not_longer(
        self, broker: BrokerProtocol
    ) -> None:
        store, key, lasting = broker.store, _key(), _key()
        asked = time.monotonic()
        await store.write([Write(key, b"brief", version=None, ttl=TTL), Write(lasting, b"kept")])
        wrote = time.monotonic()
        await _until(wrote, TTL - MARGIN)
        record = await _one(store, key)
        if time.monotonic() < asked + TTL:  # read before the ttl could end: there
            assert record is not None, "the record died before its ttl"
            assert record.value == b"brief"
        await _until(wrote, TTL + MARGIN)
        assert await _one(store, key) is None, "the record outlived its ttl"
        assert await _one(store, lasting) is not None  # no ttl: no expiry

    @requires(Capability.STORE)
    async def test_store_a_write_sets_the_ttl_anew_and_one_without_ttl_ends_expiry(
        self, broker: BrokerProtocol
    ) -> None:
        store, renewed, kept = broker.store, _key(), _key()
        one = await _create(store, renewed, b"1", ttl=TTL)
        kept_v = await _create(store, kept, b"1", ttl=TTL)
        await asyncio.sleep(TTL - MARGIN)
        (two,) = await store.write([Write(renewed, b"2", version=one, ttl=TTL)])
        (kept_two,) = await store.write([Write(kept, b"2", version=kept_v)])  # no ttl now
        wrote = time.monotonic()
        assert two is not None
        assert kept_two is not None
        await _until(wrote, TTL - MARGIN)  # past the first ttl, inside the second
        assert await store.read([renewed, kept]) == [Record(b"2", two), Record(b"2", kept_two)]
        await _until(wrote, TTL + MARGIN)
        assert await store.read([renewed, kept]) == [None, Record(b"2", kept_two)]

    @requires(Capability.STORE)
    async def test_store_an_expired_record_counts_as_none(self, broker: BrokerProtocol) -> None:
        store, key = broker.store, _key()
        old = await _create(store, key, b"old", ttl=0.2)
        await asyncio.sleep(0.2 + MARGIN)
        assert await store.write([Write(key, b"x", version=old)]) == [None]
        assert await store.write([Write(key, None, version=old)]) == [None]
        new = await _create(store, key, b"new")
        assert new > old
        assert await _one(store, key) == Record(b"new", new)

    # -- claims --------------------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_store_a_claim_takes_the_first_place_without_a_record(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        places = [place_key(key, n) for n in range(3)]
        someone = await _create(store, places[0], b"someone")
        got = await store.claim(key, 3, b"me", TTL)
        assert got is not None
        assert got.key == places[1]
        assert got.version > someone
        assert await store.read(places) == [
            Record(b"someone", someone),
            Record(b"me", got.version),
            None,
        ]
        other = await store.claim(key, 3, b"you", TTL)
        assert other is not None
        assert other.key == places[2]
        assert await store.claim(key, 3, b"third", TTL) is None
        assert [r.value if r else None for r in await store.read(places)] == [
            b"someone",
            b"me",
            b"you",
        ]
        assert await store.read([key, place_key(key, 3)]) == [None, None]  # no more places

    @requires(Capability.STORE)
    async def test_store_a_claim_never_takes_a_place_taken_elsewhere_since(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        places = [place_key(key, n) for n in range(3)]
        async with many(broker_factory, 2) as (here, there):
            first = await here.store.claim(key, 3, b"here", TTL)  # here saw 1 and 2 free
            taken = await there.store.claim(key, 3, b"there", TTL)
            second = await here.store.claim(key, 3, b"here too", TTL)
            assert [c.key if c else None for c in (first, taken, second)] == places
            records = await here.store.read(places)
        assert [r.value if r else None for r in records] == [b"here", b"there", b"here too"]

    @requires(Capability.STORE)
    async def test_store_a_claim_asked_again_keeps_its_place_and_restarts_its_ttl(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        places = [place_key(key, n) for n in range(3)]
        first = await store.claim(key, 3, b"me", TTL)
        assert first is not None
        await asyncio.sleep(TTL - MARGIN)
        again = await store.claim(key, 3, b"me", TTL)
        claimed = time.monotonic()
        assert again is not None
        assert again.key == first.key
        assert again.version > first.version
        await _until(claimed, TTL - MARGIN)  # past the first ttl
        assert await _one(store, first.key) == Record(b"me", again.version)
        held = [r for r in await store.read(places) if r is not None]
        assert held == [Record(b"me", again.version)]

    @requires(Capability.STORE)
    async def test_store_a_claimed_place_is_free_again_after_its_ttl(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        first = await store.claim(key, 1, b"a", TTL)
        claimed = time.monotonic()
        assert first is not None
        assert await store.claim(key, 1, b"b", TTL) is None
        await _until(claimed, TTL + MARGIN)
        second = await store.claim(key, 1, b"b", TTL)
        assert second is not None
        assert second.key == place_key(key, 0)
        assert second.version > first.version

    @requires(Capability.STORE)
    async def test_store_claims_at_once_never_take_one_place_twice(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        places = [place_key(key, n) for n in range(5)]
        async with many(broker_factory, 4) as brokers:
            claims = await asyncio.gather(
                *(brokers[i % 4].store.claim(key, 5, b"v%d" % i, TTL * 10) for i in range(16))
            )
            taken = {c.key: i for i, c in enumerate(claims) if c is not None}
            assert sorted(taken) == places, claims
            assert sum(c is not None for c in claims) == 5, claims
            records = await brokers[0].store.read(places)
        assert [r.value if r else None for r in records] == [b"v%d" % taken[k] for k in places]

    # -- watches -------------------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_store_a_watch_returns_at_once_when_the_record_differs(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        async with asyncio.timeout(WATCH_DELAY * 2):  # far below the watches' timeout
            assert await store.watch(key, 7, timeout=60) is None
            one = await _create(store, key, b"one")
            assert await store.watch(key, None, timeout=60) == Record(b"one", one)
            assert await store.watch(key, one + 5, timeout=60) == Record(b"one", one)

    @requires(Capability.STORE)
    async def test_store_a_write_or_delete_elsewhere_wakes_a_watch_within_the_delay(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 2) as (watcher, writer):
            changes: list[tuple[str, Callable[[int | None], Awaitable[list[int | None]]]]] = [
                ("create", lambda v: writer.store.write([Write(key, b"a", version=v)])),
                ("replace", lambda v: writer.store.write([Write(key, b"b", version=v)])),
                ("delete", lambda v: writer.store.write([Write(key, None, version=v)])),
            ]
            version: int | None = None
            for what, change in changes:
                watching = asyncio.ensure_future(watcher.store.watch(key, version, timeout=60))
                await asyncio.sleep(0.2)  # the watch is under way, not answered at once
                assert not watching.done(), f"a watch returned with nothing changed ({what})"
                (new,) = await change(version)
                changed = time.monotonic()
                assert new is not None
                record = await asyncio.wait_for(watching, WATCH_DELAY + 5)
                waited = time.monotonic() - changed
                assert waited <= WATCH_DELAY, f"a {what} woke the watch after {waited:.2f}s"
                version = None if what == "delete" else new
                assert (record.version if record else None) == version, what

    @requires(Capability.STORE)
    async def test_store_an_unchanged_watch_returns_the_record_at_its_timeout(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        version = await _create(store, key, b"same")
        other = _key()
        await _create(store, other, b"elsewhere")
        started = time.monotonic()
        watching = asyncio.ensure_future(store.watch(key, version, timeout=1.0))
        await store.write([Write(other, b"changed")])  # another key: no wake
        record = await asyncio.wait_for(watching, 10)
        waited = time.monotonic() - started
        assert record == Record(b"same", version)
        assert waited >= 0.95, f"returned after {waited:.2f}s, before its timeout"
        assert await store.watch(_key(), None, timeout=0.3) is None

    # -- input ---------------------------------------------------------------------------

    @requires(Capability.STORE)
    async def test_store_invalid_arguments_are_refused_and_send_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        store, key = broker.store, _key()
        bad_calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.read([""]),
            lambda: store.read([" padded"]),
            lambda: store.read(["x" * (MAX_KEY + 1)]),
            lambda: store.read(key),  # a string is no sequence of keys here
            lambda: store.write([Write(key, "text")]),  # type: ignore[arg-type]
            lambda: store.write([Write(key, b"x" * (MAX_VALUE + 1))]),
            lambda: store.write([Write(key, b"x", version=0)]),
            lambda: store.write([Write(key, b"x", version=True)]),
            lambda: store.write([Write(key, b"x", ttl=0)]),
            lambda: store.write([Write(key, b"x", ttl=float("inf"))]),
            lambda: store.write([Write(key, None, ttl=1)]),
            lambda: store.write([(key, b"x")]),  # type: ignore[list-item]
            lambda: store.write([Write(key, b"ok"), Write("\n", b"x")]),  # one bad: none sent
            lambda: store.send([Write(key, b"x", version=None)]),  # sends are unconditional
            lambda: store.send([Write(key, b"x", version=3)]),
            lambda: store.send([Write(key, None, ttl=1)]),
            lambda: store.claim("", 1, b"x", 1),
            lambda: store.claim(key, 0, b"x", 1),
            lambda: store.claim(key, 1001, b"x", 1),
            lambda: store.claim(key, True, b"x", 1),
            lambda: store.claim(key, 1, "x", 1),  # type: ignore[arg-type]
            lambda: store.claim(key, 1, b"x", 0),
            lambda: store.claim("k" * (MAX_KEY - 1), 10, b"x", 1),  # "#9" makes it too long
            lambda: store.watch(key, ANY, timeout=1),  # type: ignore[arg-type]
            lambda: store.watch(key, None, timeout=0),
            lambda: store.watch(key, None, timeout=3601),
        ]
        for call in bad_calls:
            with pytest.raises(InvalidRecordError):
                await call()
        assert await store.read([key]) == [None]

    async def test_store_a_broker_without_a_store_says_so(self, broker: BrokerProtocol) -> None:
        if Capability.STORE in broker.capabilities:
            pytest.skip("the adapter declares the 'store' capability")
        store = broker.store
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.read([_key()]),
            lambda: store.write([Write(_key(), b"x")]),
            lambda: store.claim(_key(), 1, b"x", 1),
            lambda: store.watch(_key(), None, timeout=1),
        ]
        for call in calls:
            with pytest.raises(BrokerError, match="keeps no store"):
                await call()

    # -- across processes ----------------------------------------------------------------

    def _child(self, procs: Processes, url: str, go: Path, *command: str) -> Process:
        return procs.start(
            sys.executable, "-m", "framework_m_core.testing.store_child", url, str(go), *command
        )

    @requires(Capability.STORE, Capability.CROSS_PROCESS)
    async def test_store_processes_claiming_and_creating_at_once_never_share_a_place(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        key, created, go = _key(), _key(), tmp_path / "go"
        keys = [place_key(key, n) for n in range(4)]
        claimers = [
            self._child(procs, broker_url, go, "claim", key, "4", "30", *values)
            for values in ([f"p{p}v{i}" for i in range(4)] for p in range(3))
        ]
        creators = [
            self._child(procs, broker_url, go, "create", created, *(f"p{p}c{i}" for i in range(4)))
            for p in range(3)
        ]
        for child in claimers + creators:
            await asyncio.to_thread(child.wait_for, "^ready$", 1, 30)
        go.touch()
        taken: dict[str, str] = {}
        for child in claimers:
            [line] = await asyncio.to_thread(child.wait_for, r"^\{", 1, 30)
            for value, key in json.loads(line.string).items():
                if key is not None:
                    assert key not in taken, f"{key} claimed by {taken[key]} and {value}"
                    taken[key] = value
        assert sorted(taken) == sorted(keys)
        records = await broker.store.read(keys)
        assert [r.value.decode() if r else None for r in records] == [taken[k] for k in keys]
        won = []
        for child in creators:
            [line] = await asyncio.to_thread(child.wait_for, r"^\{", 1, 30)
            won += [v for v, version in json.loads(line.string).items() if version is not None]
        assert len(won) == 1, won
        record = await _one(broker.store, created)
        assert record is not None
        assert record.value.decode() == won[0]

    @requires(Capability.STORE, Capability.CROSS_PROCESS)
    async def test_store_a_write_here_wakes_a_watch_in_another_process(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        key, go = _key(), tmp_path / "go"
        version = await _create(broker.store, key, b"before")
        child = self._child(procs, broker_url, go, "watch", key, str(version), "60")
        await asyncio.to_thread(child.wait_for, "^ready$", 1, 30)
        go.touch()
        await asyncio.to_thread(child.wait_for, "^watching$", 1, 30)
        await asyncio.sleep(0.2)  # the watch is under way
        assert not child.matches(r"^\{"), "the watch returned with nothing changed"
        (new,) = await broker.store.write([Write(key, b"after", version=version)])
        changed = time.monotonic()
        [line] = await asyncio.to_thread(child.wait_for, r"^\{", 1, WATCH_DELAY + 10)
        waited = time.monotonic() - changed
        assert json.loads(line.string) == {"value": "after", "version": new}
        assert waited <= WATCH_DELAY, f"the watch woke {waited:.2f}s after the write"
