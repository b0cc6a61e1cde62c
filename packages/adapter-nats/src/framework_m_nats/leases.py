"""Leases in a JetStream key-value bucket, changed by compare-and-set on the revision.

One key per lease (the lease key in URL-safe base64), its value a JSON object of the
places held: ``{holder: [expires_at, ttl]}`` in unix seconds by the callers' clocks. Every
change reads the entry and writes it back only if its revision is still the one read
(``Nats-Expected-Last-Subject-Sequence``), so of the processes changing a lease at once
one wins each round and the others read again. Nothing relies on per-message TTLs
(servers from 2.11): expiry is a time in the value, and the bucket's ``max_age`` drops
keys nobody wrote for longer than any lease lives.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import time
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from framework_m_core.ports import BrokerError

from .buckets import open_bucket
from .errors import server_errors
from .settings import NatsSettings

# A day, the longest lease, twice: a key unwritten for longer holds only expired places.
_BUCKET_MAX_AGE = 2 * 86_400.0
_ROUNDS = 200  # compare-and-set rounds before a call gives up

Places = dict[str, list[float]]


def bucket_name(s: NatsSettings) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{s.stream}_leases")


def _kv_key(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def _decode(value: bytes | None) -> Places:
    """The places stored, ignoring anything malformed (it then holds nothing)."""
    try:
        raw = json.loads(value or b"{}")
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: Places = {}
    for holder, place in raw.items():
        if (
            isinstance(place, list)
            and len(place) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in place)
        ):
            out[holder] = [float(place[0]), float(place[1])]
    return out


class Leases:
    """The lease calls of one broker, on the bucket of its stream."""

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self._kv: KeyValue | None = None
        # Changes of one key from this process go one at a time: racing each other they
        # would only lose compare-and-set rounds. (lock, users) per key in use.
        self._turns: dict[str, tuple[asyncio.Lock, list[None]]] = {}

    def reset(self) -> None:
        self._kv = None

    async def _bucket(self, js: JetStreamContext) -> KeyValue:
        if self._kv is None:
            name = bucket_name(self.settings)
            with server_errors(f"opening the lease bucket {name}"):
                self._kv = await open_bucket(
                    js,
                    name,
                    history=1,
                    ttl=_BUCKET_MAX_AGE,
                    replicas=self.settings.replicas,
                )
        return self._kv

    async def _read(self, kv: KeyValue, key: str) -> tuple[Places, int]:
        try:
            entry = await kv.get(key)
        except KeyNotFoundError as exc:  # never written, or deleted (its revision then)
            marker = getattr(exc, "entry", None)
            return {}, int(marker.revision or 0) if marker is not None else 0
        return _decode(entry.value), int(entry.revision or 0)

    async def change(self, js: JetStreamContext, key: str, step: Any) -> bool:
        """Apply ``step(places, now) -> (result, places to write or None)`` by
        compare-and-set until one write lands (or nothing is to be written)."""
        lock, users = self._turns.setdefault(key, (asyncio.Lock(), []))
        users.append(None)
        try:
            async with lock:
                return await self._change(js, key, step)
        finally:
            users.pop()
            if not users:
                del self._turns[key]

    async def _change(self, js: JetStreamContext, key: str, step: Any) -> bool:
        kv, k = await self._bucket(js), _kv_key(key)
        with server_errors(f"lease {key!r}"):
            for _ in range(_ROUNDS):
                places, revision = await self._read(kv, k)
                now = time.time()
                result, changed = step({h: p for h, p in places.items() if p[0] > now}, now)
                if changed is None:
                    return bool(result)
                try:
                    await kv.update(k, json.dumps(changed).encode(), last=revision)
                except KeyWrongLastSequenceError:
                    await asyncio.sleep(random.uniform(0, 0.005))
                    continue
                return bool(result)
        raise BrokerError(f"lease {key!r} kept changing under {_ROUNDS} compare-and-set rounds")

    async def acquire(
        self, js: JetStreamContext, key: str, holder: str, ttl: float, limit: int
    ) -> bool:
        def step(places: Places, now: float) -> tuple[bool, Places | None]:
            if holder not in places and len(places) >= limit:
                return False, None
            return True, {**places, holder: [now + ttl, ttl]}

        return await self.change(js, key, step)

    async def extend(self, js: JetStreamContext, key: str, holder: str) -> bool:
        def step(places: Places, now: float) -> tuple[bool, Places | None]:
            place = places.get(holder)
            if place is None:
                return False, None
            return True, {**places, holder: [now + place[1], place[1]]}

        return await self.change(js, key, step)

    async def release(self, js: JetStreamContext, key: str, holder: str) -> bool:
        def step(places: Places, now: float) -> tuple[bool, Places | None]:
            if holder not in places:
                return False, None
            return True, {h: p for h, p in places.items() if h != holder}

        return await self.change(js, key, step)

    async def holders(self, js: JetStreamContext, key: str) -> list[str]:
        if self._kv is None:  # reading creates nothing: no bucket, no holders
            with server_errors("opening the lease bucket"):
                try:
                    await js.key_value(bucket_name(self.settings))
                except BucketNotFoundError:
                    return []
        kv = await self._bucket(js)
        with server_errors(f"reading lease {key!r}"):
            places, _ = await self._read(kv, _kv_key(key))
        now = time.time()
        return [h for h, (expires, _) in places.items() if expires > now]
