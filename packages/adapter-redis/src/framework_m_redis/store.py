"""The store on Redis: a hash per record and one Lua script per call (``scripts.py``);
watches woken by the key each change publishes on the namespace's channel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from framework_m_core.errors import BrokerError
from framework_m_core.ports.store import ANY, Claim, Record, Write
from framework_m_core.ports.store_base import BaseStore

from .settings import RedisSettings

log = logging.getLogger("framework_m.redis")

Run = Callable[[str, list[str], list[Any]], Awaitable[Any]]
# A watch reads its key again this often even when no change was published (a message
# lost with a connection the listener has not noticed yet).
_REREAD = 10.0
_RESUBSCRIBE = 0.5


class RedisStore(BaseStore):
    """The records of one namespace; ``run`` calls a script, ``client`` is the broker's."""

    def __init__(self, settings: RedisSettings, run: Run, client: Callable[[], Any]) -> None:
        self._s = settings
        self._run = run
        self._changes = _Changes(client, settings.changes)

    async def close(self) -> None:
        """Stop listening for changes (the broker is closing)."""
        await self._changes.stop()

    async def _read(self, keys: list[str]) -> list[Record | None]:
        found = await self._run("STORE_READ", [self._s.record_key(k) for k in keys], [])
        return [None if not got else Record(bytes(got[1]), int(got[0])) for got in found]

    async def _write(self, writes: list[Write]) -> list[int | None]:
        keys, args = [self._s.versions], list[str | bytes]([self._s.changes])
        for key, value, version, ttl in writes:
            keys.append(self._s.record_key(key))
            condition = "*" if version is ANY else "" if version is None else str(version)
            ms = "" if ttl is None else str(max(1, round(ttl * 1000)))
            args += ["d" if value is None else "s", condition, value or b"", ms]
        done = await self._run("STORE_WRITE", keys, args)
        return [int(v) or None for v in done]

    async def _claim(self, keys: list[str], value: bytes, ttl: float) -> Claim | None:
        found = await self._run(
            "STORE_CLAIM",
            [self._s.versions, *(self._s.record_key(k) for k in keys)],
            [self._s.changes, value, max(1, round(ttl * 1000))],
        )
        if not found:
            return None
        index, version = found
        return Claim(keys[int(index)], int(version))

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        deadline = time.monotonic() + timeout
        changed = self._changes.subscribe(self._s.record_key(key))
        try:
            await self._changes.ready(deadline)
            while True:
                changed.clear()
                (record,) = await self._read([key])
                left = deadline - time.monotonic()
                if (None if record is None else record.version) != version or left <= 0:
                    return record
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(left, _REREAD))
        finally:
            self._changes.unsubscribe(self._s.record_key(key), changed)


class _Changes:
    """One subscription to the store's channel, shared by every watch of the store: an
    event per watch, set when its key is published (or when messages may have been
    missed, after a reconnect)."""

    def __init__(self, client: Callable[[], Any], channel: str) -> None:
        self._client = client
        self._channel = channel
        self._events: dict[str, set[asyncio.Event]] = {}
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, key: str) -> asyncio.Event:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._listen())
        event = asyncio.Event()
        self._events.setdefault(key, set()).add(event)
        return event

    def unsubscribe(self, key: str, event: asyncio.Event) -> None:
        events = self._events.get(key)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[key]

    async def ready(self, deadline: float) -> None:
        """Until the channel is subscribed (a change before that would be missed), or
        the deadline."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), max(0.0, deadline - time.monotonic()))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._subscribed.clear()

    def _wake(self, key: str | None) -> None:
        if key is None:
            for events in self._events.values():
                for event in events:
                    event.set()
            return
        for event in self._events.get(key, ()):
            event.set()

    async def _listen(self) -> None:
        while True:
            pubsub = None
            try:
                client = self._client()
            except BrokerError:  # closed meanwhile
                return
            try:
                pubsub = client.pubsub()
                await pubsub.subscribe(self._channel)
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind == "subscribe":
                        self._subscribed.set()
                        self._wake(None)  # changes while unsubscribed went unheard
                    elif kind == "message":
                        data = message.get("data")
                        key = data.decode() if isinstance(data, bytes) else str(data)
                        self._wake(key)
            except (RedisError, OSError) as exc:
                log.debug("store change listener lost its connection (%s); subscribing again", exc)
            finally:
                self._subscribed.clear()
                if pubsub is not None:
                    with contextlib.suppress(RedisError, OSError):
                        await pubsub.aclose()
            self._wake(None)
            await asyncio.sleep(_RESUBSCRIBE)
