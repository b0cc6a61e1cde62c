"""Leases in a JetStream key-value bucket, changed by compare-and-set on the revision.

One key per lease (the lease key in URL-safe base64), its value a JSON object of the
places held: ``{holder: [expires_at, ttl]}`` in unix seconds by the callers' clocks. Every
change reads the entry and writes it back only if its revision is still the one read
(``Nats-Expected-Last-Subject-Sequence``), so of the processes changing a lease at once
one wins each round and the others read again; within a process, the changes of a key
asked for while one of its rounds is under way go together in the next. Nothing
relies on per-message TTLs (servers from 2.11): expiry is a time in the value, and the
bucket's ``max_age`` drops keys nobody wrote for longer than any lease lives.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import time
from collections.abc import Callable
from functools import partial

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from framework_m_core.ports import BrokerError, answer, failing_all

from .buckets import answered, open_bucket
from .errors import server_errors
from .settings import NatsSettings

# A day, the longest lease, twice: a key unwritten for longer holds only expired places.
_BUCKET_MAX_AGE = 2 * 86_400.0
_ROUNDS = 200  # compare-and-set rounds before a call gives up

Places = dict[str, list[float]]
#: A change of one lease: ``step(places, now) -> (result, places to write or None)``.
Step = Callable[[Places, float], tuple[bool, Places | None]]


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
        # Per key: the changes waiting for its next round, and the task running rounds.
        self._waiting: dict[str, list[tuple[Step, asyncio.Future[bool]]]] = {}
        self._rounds: dict[str, asyncio.Task[None]] = {}

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

    async def change(self, js: JetStreamContext, key: str, step: Step) -> bool:
        """Apply ``step(places, now) -> (result, places to write or None)`` by
        compare-and-set until one write lands (or nothing is to be written).

        The changes of one key asked for while a round of it is under way wait for the
        next round, which applies them all in order to one read and writes once: racing
        each other they would only lose compare-and-set rounds, and in turn they would
        cost two round trips each."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((step, future))
        if key not in self._rounds:
            task = asyncio.create_task(self._run_rounds(js, key))
            self._rounds[key] = task
        return await future

    async def _run_rounds(self, js: JetStreamContext, key: str) -> None:
        try:
            while (waiting := self._waiting.pop(key, None)) is not None:
                calls = [(step, future) for step, future in waiting if not future.done()]
                with failing_all(calls):
                    results = await self._change(js, key, [step for step, _ in calls])
                    for (_, future), result in zip(calls, results, strict=True):
                        answer(future, result)
        finally:
            del self._rounds[key]

    async def _change(self, js: JetStreamContext, key: str, steps: list[Step]) -> list[bool]:
        """Each step's result, applied in order to one read of ``key`` and written once."""
        kv, k = await self._bucket(js), _kv_key(key)
        with server_errors(f"lease {key!r}"):
            for _ in range(_ROUNDS):
                stored, revision = await self._read(kv, k)
                now = time.time()
                places = {h: p for h, p in stored.items() if p[0] > now}
                results, changed = [], False
                for step in steps:
                    result, after = step(places, now)
                    results.append(bool(result))
                    if after is not None:
                        places, changed = after, True
                if not changed:
                    return results
                try:
                    value = json.dumps(places).encode()
                    await answered(partial(kv.update, k, value, last=revision))
                except KeyWrongLastSequenceError:
                    await asyncio.sleep(random.uniform(0, 0.005))
                    continue
                return results
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
