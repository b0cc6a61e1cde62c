"""Calls of one Lua script made in the same pass of the event loop, sent as one pipeline.

A worker acks many jobs at once; each ack still waits for its own reply (the job
counts as done only once Redis has it), but they share one round trip and one
connection instead of taking one each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

_Call = tuple[list[Any], list[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """``await call(keys, args)`` runs ``script`` with those keys and arguments; calls
    made before the loop gets back to it go in one pipeline."""

    def __init__(self, client: Callable[[], Any], script: Any) -> None:
        self._client = client  # the connected redis client, read at each flush
        self._script = script
        self._calls: list[_Call] = []
        self._flush: asyncio.Task[None] | None = None

    async def call(self, keys: list[Any], args: list[Any]) -> Any:
        """The script's reply; raises its error (a ``redis`` exception) when it failed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls.append((keys, args, future))
        if self._flush is None:
            self._flush = asyncio.create_task(self._send())
        return await future

    async def _send(self) -> None:
        await asyncio.sleep(0)  # the calls of this pass join the batch
        calls, self._calls, self._flush = self._calls, [], None
        try:
            pipe = self._client().pipeline(transaction=False)
            for keys, args, _ in calls:
                await self._script(keys=keys, args=args, client=pipe)
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection, or cancelled: every caller learns it
            for *_, future in calls:
                if not future.done():
                    future.set_exception(
                        exc if isinstance(exc, Exception) else ConnectionError("cancelled")
                    )
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(calls, replies, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
