"""PassBatch: which calls share a flush, and what each caller gets back."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core.ports.batching import Calls, PassBatch, answer

MOST = 500

pytestmark = pytest.mark.anyio


class Flush:
    """A flush that answers 1 for even items and -1 for odd ones, or fails."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.flushes: list[list[int]] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()
        self.sent = asyncio.Event()

    async def made(self, n: int) -> None:
        """Wait until ``n`` flushes have started."""
        while len(self.flushes) < n:
            self.sent.clear()
            await self.sent.wait()

    async def run(self, calls: Calls[int, int]) -> None:
        self.flushes.append([item for item, _ in calls])
        self.sent.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        for item, future in calls:
            answer(future, 1 if item % 2 == 0 else -1)


async def test_calls_of_one_pass_share_a_flush_and_get_their_own_answers() -> None:
    flush = Flush()
    batch = PassBatch(flush.run, most=MOST)
    assert await asyncio.gather(*(batch.submit(e) for e in range(5))) == [1, -1, 1, -1, 1]
    assert flush.flushes == [[0, 1, 2, 3, 4]]
    assert await batch.submit(8) == 1  # a later pass: a flush of its own
    assert flush.flushes[1:] == [[8]]


async def test_calls_made_while_a_flush_is_out_go_in_the_next_one() -> None:
    flush = Flush()
    flush.gate.clear()
    batch = PassBatch(flush.run, most=MOST)
    first = asyncio.ensure_future(batch.submit(0))
    await flush.made(1)
    second = asyncio.ensure_future(asyncio.gather(batch.submit(2), batch.submit(3)))
    await flush.made(2)
    flush.gate.set()
    assert (await first, await second) == (1, [1, -1])
    assert flush.flushes == [[0], [2, 3]]


async def test_a_failed_flush_fails_every_call_it_carried() -> None:
    flush = Flush(fail=ConnectionError("the broker went away"))
    batch = PassBatch(flush.run, most=MOST)
    got = await asyncio.gather(*(batch.submit(e) for e in range(3)), return_exceptions=True)
    assert [str(e) for e in got] == ["the broker went away"] * 3
    flush.fail = None
    assert await batch.submit(4) == 1  # the batch goes on working


async def test_a_cancelled_caller_leaves_the_others_their_answers() -> None:
    flush = Flush()
    flush.gate.clear()
    batch = PassBatch(flush.run, most=MOST)
    acks = [asyncio.ensure_future(batch.submit(e)) for e in range(3)]
    await flush.made(1)
    acks[1].cancel()
    flush.gate.set()
    assert await acks[0] == 1
    assert await acks[2] == 1
    assert acks[1].cancelled()
    assert flush.flushes == [[0, 1, 2]]  # flushed all the same


async def test_more_calls_than_a_flush_takes_are_split_in_order() -> None:
    flush = Flush()
    batch = PassBatch(flush.run, most=MOST)
    n = MOST * 2 + 3
    codes = await asyncio.gather(*(batch.submit(e) for e in range(n)))
    assert codes == [1 if e % 2 == 0 else -1 for e in range(n)]
    assert [len(c) for c in flush.flushes] == [MOST, MOST, 3]
    assert [e for c in flush.flushes for e in c] == list(range(n))
