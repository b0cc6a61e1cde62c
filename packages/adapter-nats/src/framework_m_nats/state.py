"""Shared state in a JetStream key-value bucket, ``{stream}_state``.

One key per state key (in URL-safe base64), history 1, kept until overwritten; the
version of a record is the revision of its key (the stream sequence of its last
write), so every write gives a greater one. A write with a version is an update
expecting that revision (``Nats-Expected-Last-Subject-Sequence``); a write without
one is a create, which fails when the key holds a record. The bucket is made by the
first write; reading before that finds no record.
"""

from __future__ import annotations

import base64
import re

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from framework_m_core.ports import StateEntry

from .buckets import open_bucket
from .errors import server_errors
from .settings import NatsSettings


def bucket_name(s: NatsSettings) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{s.stream}_state")


def _kv_key(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


class State:
    """The state calls of one broker, on the bucket of its stream."""

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self._kv: KeyValue | None = None

    def reset(self) -> None:
        self._kv = None

    async def _bucket(self, js: JetStreamContext, *, create: bool) -> KeyValue | None:
        if self._kv is None:
            name = bucket_name(self.settings)
            with server_errors(f"opening the state bucket {name}"):
                if create:
                    self._kv = await open_bucket(
                        js, name, history=1, replicas=self.settings.replicas
                    )
                else:
                    try:
                        self._kv = await js.key_value(name)
                    except BucketNotFoundError:
                        return None
        return self._kv

    async def read(self, js: JetStreamContext, key: str) -> StateEntry | None:
        kv = await self._bucket(js, create=False)
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
        kv = await self._bucket(js, create=True)
        assert kv is not None
        with server_errors(f"writing state {key!r}"):
            try:
                if version is None:
                    return int(await kv.create(_kv_key(key), value))
                return int(await kv.update(_kv_key(key), value, last=version))
            except KeyWrongLastSequenceError:
                return None
