"""What the store does without reading first stays exact: a claim whose reply was lost,
asked again, keeps its one place; a place freed here is taken again in one write."""

from __future__ import annotations

import asyncio
from typing import Any

import nats.errors
import pytest

from framework_m_core.errors import BrokerError
from framework_m_core.ports.store import Write, place_key
from framework_m_nats import NatsBroker
from framework_m_nats.store import _Held

pytestmark = pytest.mark.anyio

TTL = 30.0


async def test_a_claim_whose_reply_was_lost_asked_again_keeps_one_place(
    broker: NatsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, key = broker.store, "limit"
    places = [place_key(key, n) for n in range(3)]
    first = await store.claim(key, 3, b"other", TTL)  # reads: places 1 and 2 are free
    assert first is not None
    assert first.key == places[0]
    confirms = broker._confirms
    assert confirms is not None
    publish = confirms.publish

    async def reply_lost(*args: Any, **kwargs: Any) -> Any:
        await publish(*args, **kwargs)  # stored, but the ack never comes
        raise nats.errors.TimeoutError

    monkeypatch.setattr(confirms, "publish", reply_lost)
    with pytest.raises(BrokerError):
        await store.claim(key, 3, b"me", TTL)
    monkeypatch.undo()
    again = await store.claim(key, 3, b"me", TTL)
    assert again is not None
    records = await store.read(places)
    assert [r.value for r in records if r is not None].count(b"me") == 1, records


async def test_a_place_freed_here_is_taken_again_without_a_read(
    broker: NatsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, key = broker.store, "limit"
    claims = [await store.claim(key, 50, b"v%d" % n, TTL) for n in range(3)]
    held = [c for c in claims if c is not None]
    assert len(held) == 3
    (gone,) = await store.write([Write(held[1].key, None, held[1].version)])
    assert gone == held[1].version
    reads: list[str] = []
    held_of = store._held

    async def counted(kv: Any, k: str) -> Any:
        reads.append(k)
        return await held_of(kv, k)

    monkeypatch.setattr(store, "_held", counted)
    taken = await store.claim(key, 50, b"new", TTL)
    assert taken is not None
    assert taken.key == held[1].key
    extended = await store.write([Write(taken.key, b"new", taken.version, TTL)])
    released = await store.write([Write(taken.key, None, extended[0])])
    assert released == extended
    assert extended[0] is not None
    assert reads == [], "a place freed here, extended and released, was read"


async def test_a_claim_reading_again_lets_the_event_loop_turn(
    broker: NatsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that finds a free place with a write of it under way here reads again;
    a read that ended (its clean-up not yet run) is not what it awaits again, or it
    would never yield and the write it waits for could never land."""
    store, key = broker.store, "turning"
    place = place_key(key, 0)
    first = await store.claim(key, 1, b"first", TTL)
    assert first is not None
    await store.write([Write(first.key, None, first.version)])
    store._known.taken(place)  # not known free: the claim reads
    loop = asyncio.get_running_loop()
    store._known._writing[place] = 1  # a write of the place under way, for 0.2 s
    loop.call_later(0.2, store._known._writing.pop, place)
    ended: asyncio.Future[list[_Held]] = loop.create_future()
    ended.set_result([_Held(None, 0)])
    store._reading[(store._known.landed, (place,))] = ended
    asked = 0
    under_way = store._known.under_way

    def counted(k: str) -> bool:
        nonlocal asked
        asked += 1
        if asked > 10_000:
            raise AssertionError("the claim spins without yielding")
        return under_way(k)

    monkeypatch.setattr(store._known, "under_way", counted)
    claim = await store.claim(key, 1, b"me", TTL)
    assert claim is not None
    assert claim.key == place
