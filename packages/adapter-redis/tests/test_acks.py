"""AckBatch on its own: which acks share a call, and what each caller gets back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from framework_m_redis.acks import MOST, AckBatch

pytestmark = pytest.mark.anyio


class Script:
    """Stands in for the ACK script: code 1 for even entries, -1 for odd ones."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[list[int]] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()
        self.sent = asyncio.Event()

    async def made(self, n: int) -> None:
        """Wait until ``n`` calls have been made."""
        while len(self.calls) < n:
            self.sent.clear()
            await self.sent.wait()

    async def send(self, entries: Sequence[int]) -> list[int]:
        self.calls.append(list(entries))
        self.sent.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [1 if e % 2 == 0 else -1 for e in entries]


async def test_acks_of_one_pass_share_a_call_and_get_their_own_codes() -> None:
    script = Script()
    batch = AckBatch(script.send)
    assert await asyncio.gather(*(batch.ack(e) for e in range(5))) == [1, -1, 1, -1, 1]
    assert script.calls == [[0, 1, 2, 3, 4]]
    assert await batch.ack(8) == 1  # a later pass: a call of its own
    assert script.calls[1:] == [[8]]


async def test_acks_made_while_a_call_is_out_go_in_the_next_one() -> None:
    script = Script()
    script.gate.clear()
    batch = AckBatch(script.send)
    first = asyncio.ensure_future(batch.ack(0))
    await script.made(1)
    second = asyncio.ensure_future(asyncio.gather(batch.ack(2), batch.ack(3)))
    await script.made(2)
    script.gate.set()
    assert (await first, await second) == (1, [1, -1])
    assert script.calls == [[0], [2, 3]]


async def test_a_failed_call_fails_every_ack_it_carried() -> None:
    script = Script(fail=ConnectionError("redis went away"))
    batch = AckBatch(script.send)
    got = await asyncio.gather(*(batch.ack(e) for e in range(3)), return_exceptions=True)
    assert [str(e) for e in got] == ["redis went away"] * 3
    script.fail = None
    assert await batch.ack(4) == 1  # the batch goes on working


async def test_a_cancelled_caller_leaves_the_others_their_answers() -> None:
    script = Script()
    script.gate.clear()
    batch = AckBatch(script.send)
    acks = [asyncio.ensure_future(batch.ack(e)) for e in range(3)]
    await script.made(1)
    acks[1].cancel()
    script.gate.set()
    assert await acks[0] == 1
    assert await acks[2] == 1
    assert acks[1].cancelled()
    assert script.calls == [[0, 1, 2]]  # sent all the same: the job did run


async def test_more_acks_than_a_call_carries_are_split_in_order() -> None:
    script = Script()
    batch = AckBatch(script.send)
    n = MOST * 2 + 3
    codes = await asyncio.gather(*(batch.ack(e) for e in range(n)))
    assert codes == [1 if e % 2 == 0 else -1 for e in range(n)]
    assert [len(c) for c in script.calls] == [MOST, MOST, 3]
    assert [e for c in script.calls for e in c] == list(range(n))
