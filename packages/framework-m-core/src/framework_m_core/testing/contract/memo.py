"""Contract tests of memos: expiring values under keys, created at most once while they
last; one test or more for each sentence of
:meth:`~framework_m_core.control.shared.Shared.put_memo`."""

from __future__ import annotations

import asyncio
import functools
import uuid

import pytest

from ...control.checks import MAX_MEMO_TTL, MAX_MEMO_VALUE
from ...control.shared import shared
from ...errors import BrokerError, InvalidMemoError
from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ..helpers import BrokerFactory, many, wait_until
from .base import ContractBase
from .requirements import requires


def _key() -> str:
    return f"memo-{uuid.uuid4().hex[:8]}"


class MemoContract(ContractBase):
    """Memos: what was put is got everywhere until its ttl; a create stores once."""

    @requires(Capability.STORE)
    async def test_a_memo_put_on_one_connection_is_got_on_another(
        self, broker_factory: BrokerFactory
    ) -> None:
        key = _key()
        async with many(broker_factory, 2) as (writer, reader):
            assert await shared(reader).get_memo(key) is None
            assert await shared(writer).put_memo(key, b"one", ttl=60) is True
            assert await shared(reader).get_memo(key) == b"one"
            assert await shared(reader).get_memo(key) == b"one"  # getting changed nothing
            assert await shared(writer).put_memo(key, b"two", ttl=60) is True  # replaces
            assert await shared(reader).get_memo(key) == b"two"

    @requires(Capability.STORE)
    async def test_a_memo_is_gone_after_its_ttl_and_not_before(
        self, broker: BrokerProtocol
    ) -> None:
        short, long = _key(), _key()
        assert await shared(broker).put_memo(short, b"short", ttl=0.5)
        assert await shared(broker).put_memo(long, b"long", ttl=60)
        assert await shared(broker).get_memo(short) == b"short"
        await wait_until(
            lambda: _is_gone(broker, short), timeout=10, what="a memo gone after its ttl"
        )
        assert await shared(broker).get_memo(long) == b"long"

    @requires(Capability.STORE)
    async def test_a_put_replaces_the_ttl_too(self, broker: BrokerProtocol) -> None:
        longer, shorter = _key(), _key()
        assert await shared(broker).put_memo(longer, b"a", ttl=0.5)
        assert await shared(broker).put_memo(longer, b"b", ttl=60)
        assert await shared(broker).put_memo(shorter, b"a", ttl=60)
        assert await shared(broker).put_memo(shorter, b"b", ttl=0.5)
        await wait_until(lambda: _is_gone(broker, shorter), timeout=10, what="the new ttl")
        assert await shared(broker).get_memo(longer) == b"b"

    @requires(Capability.STORE)
    async def test_a_create_stores_only_where_no_unexpired_memo_is(
        self, broker: BrokerProtocol
    ) -> None:
        key = _key()
        assert await shared(broker).put_memo(key, b"first", ttl=0.5, create=True) is True
        assert await shared(broker).put_memo(key, b"again", ttl=60, create=True) is False
        assert await shared(broker).get_memo(key) == b"first"  # the refused create changed nothing
        await wait_until(lambda: _is_gone(broker, key), timeout=10, what="expiry")
        assert await shared(broker).put_memo(key, b"after", ttl=60, create=True) is True
        assert await shared(broker).get_memo(key) == b"after"
        assert await shared(broker).put_memo(key, b"put", ttl=60) is True  # a put always stores
        assert await shared(broker).get_memo(key) == b"put"

    @requires(Capability.STORE)
    async def test_of_creates_at_once_exactly_one_stores(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 4) as brokers:
            for expired_before in (False, True):
                key = _key()
                if expired_before:  # a create over an expired memo races the same way
                    assert await shared(brokers[0]).put_memo(key, b"old", ttl=0.3)
                    await wait_until(functools.partial(_is_gone, brokers[0], key), timeout=10)
                results = await asyncio.gather(
                    *(
                        shared(brokers[i % 4]).put_memo(key, b"c%d" % i, ttl=60, create=True)
                        for i in range(16)
                    )
                )
                won = [i for i, stored in enumerate(results) if stored]
                assert len(won) == 1, results
                assert await shared(brokers[3]).get_memo(key) == b"c%d" % won[0]

    @requires(Capability.STORE)
    async def test_memo_values_come_back_byte_for_byte(self, broker: BrokerProtocol) -> None:
        for value in (b"", bytes(range(256)), b"\x00" * 7, b"\xff" * MAX_MEMO_VALUE):
            key = _key()
            assert await shared(broker).put_memo(key, value, ttl=60)
            assert await shared(broker).get_memo(key) == value

    @requires(Capability.STORE)
    async def test_memos_are_apart_from_each_other_and_from_state(
        self, broker: BrokerProtocol
    ) -> None:
        one, two = _key(), _key()
        assert await shared(broker).put_memo(one, b"one", ttl=60)
        assert await shared(broker).get_memo(two) is None
        assert await shared(broker).put_memo(two, b"two", ttl=60)
        assert await shared(broker).get_memo(one) == b"one"
        if Capability.STORE in broker.capabilities:
            assert await shared(broker).read_state(one) is None
            assert await shared(broker).write_state(two, b"state", version=None) is not None
            assert await shared(broker).get_memo(two) == b"two"

    async def test_invalid_memo_arguments_are_refused_before_sending(
        self, broker: BrokerProtocol
    ) -> None:
        for key in ("", " k", "k\n", "x" * 201, None, 5):
            with pytest.raises(InvalidMemoError):
                await shared(broker).get_memo(key)  # type: ignore[arg-type]
            with pytest.raises(InvalidMemoError):
                await shared(broker).put_memo(key, b"v", ttl=1)  # type: ignore[arg-type]
        for value in ("text", bytearray(b"v"), None, b"x" * (MAX_MEMO_VALUE + 1)):
            with pytest.raises(InvalidMemoError):
                await shared(broker).put_memo("k", value, ttl=1)  # type: ignore[arg-type]
        for ttl in (0, -1, float("nan"), float("inf"), MAX_MEMO_TTL + 1, True, "1", None):
            with pytest.raises(InvalidMemoError):
                await shared(broker).put_memo("k", b"v", ttl=ttl)  # type: ignore[arg-type]
        if Capability.STORE in broker.capabilities:
            assert await shared(broker).get_memo("k") is None  # nothing was stored

    async def test_a_broker_without_memos_says_so(self, broker: BrokerProtocol) -> None:
        if Capability.STORE in broker.capabilities:
            pytest.skip("the adapter declares the 'store' capability")
        with pytest.raises(BrokerError):
            await shared(broker).get_memo("k")
        with pytest.raises(BrokerError):
            await shared(broker).put_memo("k", b"v", ttl=1)


async def _is_gone(broker: BrokerProtocol, key: str) -> bool:
    return await shared(broker).get_memo(key) is None
