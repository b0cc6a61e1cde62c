"""JetStream publishes confirmed through one inbox subscription.

nats-py's ``js.publish`` is a request: a token, a future, a task-free but timed
``wait_for`` and a JSON parse into a ``PubAck`` per publish. Here the publishes made
in one pass of the event loop go out together, each with its own reply subject
(``{inbox}.{n}``) on one wildcard subscription, and one timer bounds the wait for all
their acks. Each caller gets its own ack (or error) as nats-py would raise it, so
callers keep their handling of ``APIError`` codes, timeouts and no responders.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, NamedTuple

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import APIError

from framework_m_core.ports import Calls, PassBatch, answer


class PubAck(NamedTuple):
    """What the stream answered a publish: where it stored it, and whether the
    message was a duplicate of one inside its window."""

    stream: str
    seq: int
    duplicate: bool


class _Publish(NamedTuple):
    subject: str
    payload: bytes
    headers: dict[str, str] | None


class Confirms:
    """The confirmed publishes of one connection."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self._nc = nc
        self._timeout = timeout
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._waiting: dict[str, asyncio.Future[PubAck]] = {}
        self._count = 0
        self._batch: PassBatch[_Publish, PubAck] = PassBatch(self._send)

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> PubAck:
        """Publish and wait for the stream's ack; raises nats-py's ``APIError`` when the
        stream refused, ``TimeoutError`` or ``NoRespondersError`` as ``js.publish`` does."""
        return await self._batch.submit(_Publish(subject, payload, headers))

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        for future in self._waiting.values():
            answer(future, nats.errors.ConnectionClosedError())
        self._waiting.clear()
        if sub is not None and not self._nc.is_closed:
            await sub.unsubscribe()

    async def _send(self, calls: Calls[_Publish, PubAck]) -> None:
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_ack)
        replies = []
        for call, future in calls:
            self._count += 1
            reply = f"{self._inbox}.{self._count}"
            self._waiting[reply] = future
            replies.append(reply)
            await self._nc.publish(call.subject, call.payload, reply=reply, headers=call.headers)
        futures = [future for _, future in calls]
        try:
            await asyncio.wait(futures, timeout=self._timeout)
        finally:
            for reply in replies:
                late = self._waiting.pop(reply, None)
                if late is not None:
                    answer(late, nats.errors.TimeoutError())

    async def _on_ack(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject, None)
        if future is None:  # its publish timed out meanwhile
            return
        answer(future, _ack(msg))


def _ack(msg: Msg) -> PubAck | Exception:
    if msg.headers and msg.headers.get("Status") == "503":
        return nats.errors.NoRespondersError()
    try:
        reply: dict[str, Any] = json.loads(msg.data)
    except ValueError:
        return APIError(description=f"an ack that is not JSON: {msg.data[:100]!r}")
    if "error" in reply:
        try:
            APIError.from_error(reply["error"])  # raises the type nats-py would
        except APIError as exc:
            return exc
        except (TypeError, KeyError):  # not an error object as JetStream sends them
            return APIError(description=f"an ack with a malformed error: {msg.data[:100]!r}")
    return PubAck(
        str(reply.get("stream", "")), int(reply.get("seq", 0)), bool(reply.get("duplicate"))
    )
