"""Key-value buckets made on first use, by whichever connection gets there first."""

from __future__ import annotations

import asyncio
import base64
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, NoStreamResponseError
from nats.js.kv import KeyValue

from .errors import server_errors

log = logging.getLogger("framework_m.nats")
T = TypeVar("T")

#: How long a write into a bucket is asked again while no stream answers it.
SETTLE = 2.0
#: How long opening a bucket is tried again while the server's answer times out.
OPEN_PATIENCE = 20.0
#: What stands before a value in the memo and store buckets: its expiry, unix ms by the
#: writer's clock (0: none).
EXPIRY = struct.Struct(">Q")
#: JetStream's error code for a write whose expected last sequence did not hold.
WRONG_LAST_SEQUENCE = 10071
#: The header of a write that lands only where the key's last revision is its value
#: (0: where the key has no entry).
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"


def kv_key(key: str) -> str:
    """``key`` as a bucket key: URL-safe base64, unpadded (any text fits)."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def now_ms() -> int:
    """This clock in unix milliseconds, the unit of :data:`EXPIRY`."""
    return int(time.time() * 1000)


async def open_bucket(
    js: JetStreamContext, name: str, *, patience: float = OPEN_PATIENCE, **config: Any
) -> KeyValue:
    """Bucket ``name``, made with ``config`` when it does not exist. Connections that
    make it at once race: the loser's create fails ("subjects overlap") while the
    winner's bucket is there, so a failed create looks the bucket up again. On a
    cluster under load making a replicated bucket can outlast one request's timeout:
    a timed-out attempt is made again for up to ``patience`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        try:
            return await _open_once(js, name, config)
        except nats.errors.TimeoutError:
            if loop.time() >= deadline:
                raise
            log.info("nats: opening bucket %s timed out; asking again", name)


async def _open_once(js: JetStreamContext, name: str, config: dict[str, Any]) -> KeyValue:
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(bucket=name, **config)
    except Exception:
        try:
            return await js.key_value(name)
        except BucketNotFoundError:
            pass
        raise


async def answered(write: Callable[[], Awaitable[T]], settle: float = SETTLE) -> T:
    """``write()``, asked again while no stream answers it, for up to ``settle`` seconds.

    A bucket another connection is making can be found before its stream takes
    writes: the server lists a new stream before it subscribes it to its subjects.
    A write nobody answered was stored nowhere, so asking again is safe."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + settle, 0.01
    while True:
        try:
            return await write()
        except (nats.errors.NoRespondersError, NoStreamResponseError):
            if loop.time() + delay > deadline:
                raise
            log.debug("nats: no stream answered a bucket write yet; asking again")
        await asyncio.sleep(delay)
        delay = min(2 * delay, 0.25)


class LazyBucket:
    """One connection's handle on bucket ``name``: looked up on first use, made by the
    first call that may make it (``create``), forgotten with the connection."""

    def __init__(self, name: str, what: str, **config: Any) -> None:
        self.name, self._what, self._config = name, what, config
        self._kv: KeyValue | None = None

    def reset(self) -> None:
        self._kv = None

    async def get(self, js: JetStreamContext, *, create: bool) -> KeyValue | None:
        """The bucket; None when it does not exist and ``create`` is False."""
        if self._kv is None:
            with server_errors(f"opening the {self._what} bucket {self.name}"):
                if create:
                    self._kv = await open_bucket(js, self.name, **self._config)
                else:
                    try:
                        self._kv = await js.key_value(self.name)
                    except BucketNotFoundError:
                        return None
        return self._kv
