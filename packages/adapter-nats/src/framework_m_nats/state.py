"""Shared state in a JetStream key-value bucket, ``{stream}_state``.

One key per state key (in URL-safe base64), history 1, kept until overwritten; the
version of a record is the revision of its key (the stream sequence of its last
write), so every write gives a greater one. A write with a version is an update
expecting that revision (``Nats-Expected-Last-Subject-Sequence``); a write without
one is a create, which fails when the key holds a record. The bucket is made by the
first write; reading before that finds no record.

A wait on a key watches it with a plain subscription to the key's subject
(``$KV.{bucket}.{key}``, where every write is published; no consumer, no timers),
made by the first wait on the key and kept until the connection closes. A message
there wakes the waits, which read the key and return when its version moved; every
wait reads the key at its timeout too, so a message lost (while reconnecting) makes
that wait a poll, never a wrong answer. The version a wait last read stands for the
key's until the next message, so a wait on an unchanged key costs one read, at its
end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
from functools import partial

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from framework_m_core.ports import StateEntry, version_of

from .buckets import LazyBucket, answered
from .errors import server_errors
from .settings import NatsSettings

log = logging.getLogger("framework_m.nats")

#: Keys watched at once per connection; waits on further keys poll.
MAX_WATCHES = 64


def bucket_name(s: NatsSettings) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{s.stream}_state")


def _kv_key(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


class _Watch:
    """The messages seen on one key's subject, and the version read after the latest."""

    def __init__(self) -> None:
        self.seen = 0
        self.read: tuple[int, int | None] | None = None  # (seen then, version read)
        self._moved = asyncio.Event()
        self.sub: Subscription | None = None

    async def saw(self, msg: Msg) -> None:
        self.seen += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def moved_from(self, seen: int) -> None:
        """Return once a message came after the ``seen``-th."""
        while self.seen == seen:
            await self._moved.wait()


class State:
    """The state calls of one broker, on the bucket of its stream."""

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self._bucket = LazyBucket(
            bucket_name(settings), "state", history=1, replicas=settings.replicas
        )
        self._watches: dict[str, _Watch] = {}

    def reset(self) -> None:
        """Forget the bucket and the watches (the connection that had them is gone)."""
        self._bucket.reset()
        self._watches = {}

    async def read(self, js: JetStreamContext, key: str) -> StateEntry | None:
        kv = await self._bucket.get(js, create=False)
        if kv is None:
            return None
        with server_errors(f"reading state {key!r}"):
            try:
                entry = await kv.get(_kv_key(key))
            except KeyNotFoundError:
                return None
        return StateEntry(entry.value or b"", int(entry.revision or 0))

    async def write(
        self, js: JetStreamContext, key: str, value: bytes, version: int | None
    ) -> int | None:
        kv = await self._bucket.get(js, create=True)
        assert kv is not None
        with server_errors(f"writing state {key!r}"):
            try:
                if version is None:
                    return int(await answered(partial(kv.create, _kv_key(key), value)))
                return int(await answered(partial(kv.update, _kv_key(key), value, last=version)))
            except KeyWrongLastSequenceError:
                return None

    async def wait(
        self, nc: Client, js: JetStreamContext, key: str, version: int | None, timeout: float
    ) -> StateEntry | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        watch = await self._watch(nc, key)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while True:
                    seen = 0 if watch is None else watch.seen
                    if watch is None or watch.read != (seen, version):  # not known unchanged
                        entry = await self._read_watched(js, key, watch, seen)
                        if version_of(entry) != version:
                            return entry
                    if watch is None:  # no watch to be had: poll
                        await asyncio.sleep(deadline - loop.time())
                    else:
                        await watch.moved_from(seen)
        return await self._read_watched(js, key, watch, 0 if watch is None else watch.seen)

    async def _read_watched(
        self, js: JetStreamContext, key: str, watch: _Watch | None, seen: int
    ) -> StateEntry | None:
        entry = await self.read(js, key)
        if watch is not None:
            watch.read = (seen, version_of(entry))
        return entry

    async def _watch(self, nc: Client, key: str) -> _Watch | None:
        """The key's watch, subscribed when there is none; None when subscribing
        fails or enough keys are watched (waits then poll)."""
        watch = self._watches.get(key)
        if watch is None:
            if len(self._watches) >= MAX_WATCHES:
                return None
            watch = _Watch()
            subject = f"$KV.{bucket_name(self.settings)}.{_kv_key(key)}"
            try:
                with server_errors(f"watching state {key!r}"):
                    watch.sub = await nc.subscribe(subject, cb=watch.saw)
                    await nc.flush(timeout=5)  # subscribed before the first read
            except Exception as exc:
                log.debug("nats: cannot watch state %r (%s): polling", key, exc)
                return None
            self._watches[key] = watch
        return watch
