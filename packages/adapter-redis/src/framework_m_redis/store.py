"""The store on Redis: a hash per record and one Lua script per call (``scripts.py``);
watches woken by the key each change publishes on the namespace's channel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from framework_m_core.errors import BrokerError
from framework_m_core.ports.batching import Calls, PassBatch, answer
from framework_m_core.ports.store import ANY, Claim, Record, Write, place_key
from framework_m_core.ports.store_base import BaseStore

from .settings import RedisSettings

log = logging.getLogger("framework_m.redis")

Run = Callable[[str, list[str], list[Any]], Awaitable[Any]]
# A watch reads its key again this often even when no change was published (a message
# lost with a connection the listener has not noticed yet).
_REREAD = 10.0
_RESUBSCRIBE = 0.5
# Callers whose reads (or writes) go in one script call at most.
_PASS_MOST = 200


class RedisStore(BaseStore):
    """The records of one namespace. ``run`` calls a script, ``in_pass`` calls one in a
    pipeline with the others of the event loop's pass; ``client`` is the broker's. The
    reads of one pass go to Redis in one script call, and so do the writes."""

    def __init__(
        self, settings: RedisSettings, run: Run, in_pass: Run, client: Callable[[], Any]
    ) -> None:
        self._s = settings
        self._run = run
        self._in_pass = in_pass
        self._changes = _Changes(client, settings.changes)
        self._reads: PassBatch[list[str], list[Record | None]] = PassBatch(
            self._read_pass, most=_PASS_MOST
        )
        self._writes: PassBatch[list[Write], list[int | None]] = PassBatch(
            self._write_pass, most=_PASS_MOST
        )

    async def close(self) -> None:
        """Stop listening for changes (the broker is closing)."""
        await self._changes.stop()

    async def _read(self, keys: list[str]) -> list[Record | None]:
        return await self._reads.submit(keys)

    async def _read_pass(self, calls: Calls[list[str], list[Record | None]]) -> None:
        keys = [self._s.record_key(k) for wanted, _ in calls for k in wanted]
        found = iter(await self._run("STORE_READ", keys, []))
        for wanted, future in calls:
            got = [next(found) for _ in wanted]
            answer(future, [None if not g else Record(bytes(g[1]), int(g[0])) for g in got])

    async def _write(self, writes: list[Write]) -> list[int | None]:
        return await self._writes.submit(writes)

    async def _write_pass(self, calls: Calls[list[Write], list[int | None]]) -> None:
        keys, args = [self._s.versions], list[str | bytes]([self._s.changes])
        for writes, _ in calls:
            for key, value, version, ttl in writes:
                keys.append(self._s.record_key(key))
                condition = "*" if version is ANY else "" if version is None else str(version)
                ms = "" if ttl is None else str(max(1, round(ttl * 1000)))
                args += ["d" if value is None else "s", condition, value or b"", ms]
        done = iter(await self._run("STORE_WRITE", keys, args))
        for writes, future in calls:
            answer(future, [int(next(done)) or None for _ in writes])

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        found = await self._in_pass(
            "STORE_CLAIM",
            [self._s.versions, self._s.record_key(key)],
            [self._s.changes, value, max(1, round(ttl * 1000)), places],
        )
        if not found:
            return None
        place, version = found
        return Claim(place_key(key, int(place)), int(version))

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        deadline = time.monotonic() + timeout
        async with self._changes.watching(self._s.record_key(key), deadline) as changed:
            return await self._watch_by(key, version, deadline, changed, _REREAD)


class _Changes:
    """The store's change channels, one per watched key (``{prefix}{record key}``), on one
    subscription shared by every watch of the store. A write publishes on its key's
    channel, so writes nobody watches (job statuses) reach no client. Each watch has an
    event, set when its key's channel says so, or when messages may have been missed
    (the subscription was lost and made again)."""

    def __init__(self, client: Callable[[], Any], prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._events: dict[str, set[asyncio.Event]] = {}  # record key -> its watches
        self._confirmed: dict[str, asyncio.Event] = {}  # channel -> subscribed
        self._pubsub: Any = None
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def watching(self, key: str, deadline: float) -> AsyncIterator[asyncio.Event]:
        """An event set when ``key`` changes, once its channel is subscribed (a change
        before that would be missed) or ``deadline`` passed."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._listen())
        event = asyncio.Event()
        channel = self._prefix + key
        first = key not in self._events
        self._events.setdefault(key, set()).add(event)
        confirmed = self._confirmed.setdefault(channel, asyncio.Event())
        try:
            if first and self._connected.is_set():
                with contextlib.suppress(RedisError, OSError):  # the listener subscribes anew
                    await self._pubsub.subscribe(channel)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(confirmed.wait(), max(0.0, deadline - time.monotonic()))
            yield event
        finally:
            events = self._events.get(key, set())
            events.discard(event)
            if not events:
                self._events.pop(key, None)
                self._confirmed.pop(channel, None)
                if self._connected.is_set():
                    with contextlib.suppress(RedisError, OSError):
                        await self._pubsub.unsubscribe(channel)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _wake_all(self) -> None:
        for events in self._events.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        """Keep one subscription: the channels of the watched keys, and the prefix's own
        (so that it is never empty); made again when its connection is lost."""
        while True:
            try:
                client = self._client()
            except BrokerError:  # closed meanwhile
                return
            pubsub = client.pubsub()
            try:
                channels = [self._prefix, *(self._prefix + k for k in self._events)]
                await pubsub.subscribe(*channels)
                self._pubsub = pubsub
                self._connected.set()
                late = [self._prefix + k for k in self._events if self._prefix + k not in channels]
                if late:  # watches that began while the subscription was being made
                    await pubsub.subscribe(*late)
                async for message in pubsub.listen():
                    self._heard(message)
            except (RedisError, OSError) as exc:
                log.debug("store change listener lost its connection (%s); subscribing again", exc)
            finally:
                self._connected.clear()
                self._pubsub = None
                for confirmed in self._confirmed.values():
                    confirmed.clear()
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()
            self._wake_all()  # changes while unsubscribed went unheard
            await asyncio.sleep(_RESUBSCRIBE)

    def _heard(self, message: dict[str, Any]) -> None:
        channel = message.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str):
            return
        kind = message.get("type")
        if kind == "subscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None and not confirmed.is_set():
                confirmed.set()
                for event in self._events.get(channel.removeprefix(self._prefix), ()):
                    event.set()  # read again: a change may have come before
        elif kind == "message":
            for event in self._events.get(channel.removeprefix(self._prefix), ()):
                event.set()
