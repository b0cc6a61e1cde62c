"""Memos in a JetStream key-value bucket, ``{stream}_memos``.

One key per memo key (in URL-safe base64), history 1. A memo's value is stored
behind its expiry (eight bytes, unix milliseconds by the writer's clock): a get
that finds it expired answers None, and a create over an expired memo replaces it
by compare-and-set on its revision. The bucket's ``max_age`` is the longest ttl
(seven days), so the server drops every memo at the latest then. The bucket is made
by the first put; getting before that finds nothing.
"""

from __future__ import annotations

import re
from functools import partial

from nats.js import JetStreamContext
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from framework_m_core.ports import MAX_MEMO_TTL

from .buckets import (
    EXPIRY,
    NO_ENTRY,
    WRONG_LAST_SEQUENCE,
    LazyBucket,
    answered,
    kv_key,
    now_ms,
)
from .confirms import Confirms
from .errors import server_errors
from .settings import NatsSettings


def bucket_name(s: NatsSettings) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{s.stream}_memos")


class Memos:
    """The memo calls of one broker, on the bucket of its stream."""

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self._bucket = LazyBucket(
            bucket_name(settings), "memo", history=1, ttl=MAX_MEMO_TTL, replicas=settings.replicas
        )

    def reset(self) -> None:
        self._bucket.reset()

    async def _entry(self, kv: KeyValue, key: str) -> tuple[bytes | None, int | None]:
        """The unexpired value under ``key`` and the key's revision (None: no entry)."""
        try:
            entry = await kv.get(kv_key(key))
        except KeyNotFoundError:
            return None, None
        raw = entry.value or b""
        revision = int(entry.revision or 0) or None
        if len(raw) < EXPIRY.size or EXPIRY.unpack_from(raw)[0] <= now_ms():
            return None, revision
        return raw[EXPIRY.size :], revision

    async def put(
        self,
        js: JetStreamContext,
        confirms: Confirms,
        key: str,
        value: bytes,
        ttl: float,
        create: bool,
    ) -> bool:
        kv = await self._bucket.get(js, create=True)
        assert kv is not None
        stored = EXPIRY.pack(now_ms() + max(1, round(ttl * 1000))) + value
        k = kv_key(key)
        subject = f"$KV.{self._bucket.name}.{k}"
        with server_errors(f"putting memo {key!r}"):
            if not create:
                await answered(partial(confirms.publish, subject, stored))
                return True
            try:
                await answered(partial(confirms.publish, subject, stored, NO_ENTRY))
                return True
            except APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
            held, revision = await self._entry(kv, key)
            if held is not None or revision is None:
                return False  # an unexpired memo (or one deleted meanwhile: a race lost)
            try:
                await answered(partial(kv.update, k, stored, last=revision))
                return True
            except KeyWrongLastSequenceError:
                return False

    async def get(self, js: JetStreamContext, key: str) -> bytes | None:
        kv = await self._bucket.get(js, create=False)
        if kv is None:
            return None
        with server_errors(f"getting memo {key!r}"):
            value, _ = await self._entry(kv, key)
        return value
