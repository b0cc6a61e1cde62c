"""The store in a JetStream key-value bucket, ``{stream}_store`` (and the expiring store
in ``{stream}_memos``, whose ``max_age`` drops every record seven days on).

One key per record (in URL-safe base64), history 1. A record's version is its key's
revision: the sequence of its last write in the bucket's one stream, so every write,
under any key, gives a greater one, a delete included. A value is stored behind its
expiry (eight bytes, unix milliseconds by the writer's clock; 0 for none): a record
whose expiry passed reads as none, and a write over it is a compare-and-set on its
revision, as over any record. A write of ``ANY`` is one publish to the key's subject,
a create (condition None) one publish expecting no entry
(``Nats-Expected-Last-Subject-Sequence: 0``), both through the broker's publish
confirmations; a create over an entry, and a write with a version, read the key first
(an expired record must not match), then write expecting the revision they read; a
claim reads its places at once, then takes the first free one the same way, the next
one read free when it lost a race, reading again only when it lost them all.

On a cluster the buckets have the stream's replicas. Servers before 2.10 check the
revision a write expects before the write is replicated, so two writes expecting one
revision at once can both land on a replicated bucket (nats-server#4320): the adapter
warns when it opens one there.

A watch subscribes to the key's subject (``$KV.{bucket}.{key}``, where every write and
delete is published), reads, and reads again at each message and every 1.5 s (a
message can be lost); the bucket is made by the first write, and reading before that
finds no record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import (
    APIError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from framework_m_core.ports.store import ANY, MAX_TTL, Claim, Record, Write, place_key
from framework_m_core.ports.store_base import BaseStore

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

log = logging.getLogger("framework_m.nats")

# A watch reads its key again this often even without a message, within the port's
# WATCH_DELAY: on a cluster a write reaching another server before it learned of the
# subscription, or one made while the connection was being made again, sends none.
_REREAD = 1.5


def bucket_name(s: NatsSettings, kind: str = "store") -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{s.stream}_{kind}")


def _lost_race(exc: Exception) -> bool:
    """Whether ``exc`` says the key moved past the revision a write expected."""
    return isinstance(exc, KeyWrongLastSequenceError) or (
        isinstance(exc, APIError) and exc.err_code == WRONG_LAST_SEQUENCE
    )


class _Held:
    """A key as read: its live record (None: none, or expired) and the revision to
    expect when writing it (0: the key has no entry)."""

    __slots__ = ("record", "revision")

    def __init__(self, record: Record | None, revision: int) -> None:
        self.record, self.revision = record, revision


class NatsStore(BaseStore):
    """The records of one broker's stream; ``js`` and ``nc`` raise while not connected."""

    def __init__(
        self,
        settings: NatsSettings,
        js: Callable[[], JetStreamContext],
        link: Callable[[], Awaitable[Client]],
        confirms: Callable[[], Confirms],
        *,
        kind: str = "store",
    ) -> None:
        """``link`` is the broker's client, connected anew when the server closed the
        last one for good; ``js`` and ``confirms`` are its JetStream context and
        publish confirmations. ``kind`` ``memos`` is the expiring store: its bucket
        drops every record :data:`~framework_m_core.ports.store.MAX_TTL` after its
        write."""
        self._js, self._link, self._confirms = js, link, confirms
        self._name, self._kind, self._replicas = (
            bucket_name(settings, kind),
            kind,
            settings.replicas,
        )
        self._config = {"ttl": MAX_TTL} if kind == "memos" else {}
        self._lazy: LazyBucket | None = None

    def reset(self) -> None:
        """Forget the bucket (the connection that had it is gone)."""
        if self._lazy is not None:
            self._lazy.reset()

    async def _kv(self, *, create: bool) -> KeyValue | None:
        nc = await self._link()
        return await self._bucket(nc).get(self._js(), create=create)

    def _bucket(self, nc: Client) -> LazyBucket:
        if self._lazy is None:
            if self._replicas > 1 and not serializes_replicated_writes(nc):
                log.warning(
                    "nats: the %s bucket %s has %d replicas on a server before 2.10 (%s), "
                    "which can let two compare-and-set writes land at once "
                    "(nats-server#4320): under contention a concurrency limit or an "
                    "overlap lease can be exceeded; use NATS 2.10 or later on a cluster",
                    self._kind,
                    self._name,
                    self._replicas,
                    nc.connected_server_version,
                )
            self._lazy = LazyBucket(
                self._name, self._kind, history=1, replicas=self._replicas, **self._config
            )
        return self._lazy

    async def _held(self, kv: KeyValue, key: str) -> _Held:
        try:
            entry = await kv.get(kv_key(key))
        except (KeyNotFoundError, KeyDeletedError) as exc:  # a delete marker has a revision
            marker = getattr(exc, "entry", None)
            return _Held(None, int(getattr(marker, "revision", 0) or 0))
        revision = int(entry.revision or 0)
        raw = entry.value or b""
        if len(raw) < EXPIRY.size:
            return _Held(None, revision)
        (expires,) = EXPIRY.unpack_from(raw)
        if expires and expires <= now_ms():
            return _Held(None, revision)
        return _Held(Record(raw[EXPIRY.size :], revision), revision)

    async def _read(self, keys: list[str]) -> list[Record | None]:
        kv = await self._kv(create=False)
        if kv is None:
            return [None] * len(keys)
        with server_errors("reading records"):
            held = await asyncio.gather(*(self._held(kv, key) for key in keys))
        return [h.record for h in held]

    async def _write(self, writes: list[Write]) -> list[int | None]:
        kv = await self._kv(create=True)
        assert kv is not None
        out: list[int | None] = []
        with server_errors("writing records"):
            for write in writes:
                out.append(await self._write_one(kv, write))
        return out

    async def _write_one(self, kv: KeyValue, write: Write) -> int | None:
        key, value, version, ttl = write
        if value is not None and (version is ANY or version is None):
            published = await self._publish(key, _stored(value, ttl), version is None)
            if published is not None:
                return published
            # an entry is there: a live record refuses the create, an expired one not
        while True:
            held = await self._held(kv, key)
            current = None if held.record is None else held.record.version
            if version is not ANY and version != current:
                return None
            try:
                if value is None:
                    if current is None:
                        return None
                    await answered(partial(kv.delete, kv_key(key), last=held.revision))
                    return current
                stored = _stored(value, ttl)
                return int(
                    await answered(partial(kv.update, kv_key(key), stored, last=held.revision))
                )
            except (KeyWrongLastSequenceError, APIError) as exc:
                if not _lost_race(exc):
                    raise
                if version is not ANY:
                    return None  # another write came between: the condition no longer holds
                # ANY always lands: read again and write over what is there now

    async def _publish(self, key: str, stored: bytes, create: bool) -> int | None:
        """Put ``stored`` under ``key`` in one publish (a create: only where the key has
        no entry); its revision, or None when a create found an entry."""
        subject = f"$KV.{self._name}.{kv_key(key)}"
        headers = NO_ENTRY if create else None
        try:
            ack = await answered(partial(self._confirms().publish, subject, stored, headers))
        except (KeyWrongLastSequenceError, APIError) as exc:
            if not _lost_race(exc):
                raise
            return None
        return int(ack.seq)

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        kv = await self._kv(create=True)
        assert kv is not None
        keys = [place_key(key, n) for n in range(places)]
        with server_errors("claiming a place"):
            while True:
                held = await asyncio.gather(*(self._held(kv, k) for k in keys))
                mine = [i for i, h in enumerate(held) if h.record and h.record.value == value]
                free = [i for i, h in enumerate(held) if h.record is None]
                if not mine and not free:
                    return None
                stored = _stored(value, ttl)
                for n in mine[:1] or free:  # a place taken meanwhile: the next one read free
                    update = partial(kv.update, kv_key(keys[n]), stored, last=held[n].revision)
                    try:
                        version = await answered(update)
                    except (KeyWrongLastSequenceError, APIError) as exc:
                        if not _lost_race(exc):
                            raise
                        continue
                    return Claim(keys[n], int(version))
                # every place read free was taken meanwhile: read them again

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        deadline = time.monotonic() + timeout
        changed = asyncio.Event()

        async def saw(_msg: object) -> None:
            changed.set()

        nc = await self._link()
        subject = f"$KV.{self._name}.{kv_key(key)}"
        with server_errors(f"watching record {key!r}"):
            sub = await nc.subscribe(subject, cb=saw)
            await nc.flush(timeout=5)  # subscribed before the first read
        try:
            return await self._watch_by(key, version, deadline, changed, _REREAD)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def _stored(value: bytes, ttl: float | None) -> bytes:
    """``value`` behind its expiry (unix ms by this clock; 0 for none)."""
    expires = 0 if ttl is None else now_ms() + max(1, round(ttl * 1000))
    return EXPIRY.pack(expires) + value


def serializes_replicated_writes(nc: Client) -> bool:
    """Whether the server checks a write's expected revision in order with the writes
    being replicated (2.10 and later)."""
    version = nc.connected_server_version
    try:
        return (version.major, version.minor) >= (2, 10)
    except ValueError:  # a version that is no semver: assume a current server
        return True
