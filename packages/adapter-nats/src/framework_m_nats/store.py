"""The store in a JetStream key-value bucket, ``{stream}_store`` (and the expiring store
in ``{stream}_memos``, whose ``max_age`` drops every record seven days on).

One key per record (in URL-safe base64), history 1. A record's version is its key's
revision: the sequence of its last write in the bucket's one stream, so every write,
under any key, gives a greater one, a delete included. A value is stored behind its
expiry (eight bytes, unix milliseconds by the writer's clock; 0 for none): a record
whose expiry passed reads as none, and a write over it is a compare-and-set on its
revision, as over any record.

A send is one publish to the key's subject without a reply subject (the stream
answers nothing), in order on the broker's connection before its later acks. Every
write is one publish to the key's subject through the broker's publish
confirmations: ``ANY`` with no condition, a create expecting no entry
(``Nats-Expected-Last-Subject-Sequence: 0``), the others expecting a revision. A
write whose condition names a record this store wrote itself expects that revision
at once (:mod:`.known`); other conditional writes, and a create over an entry, read
the key first (an expired record must not match). A claim first takes the place this
store knows it holds for the value, else a place it freed or read free, each by one
compare-and-set; only then does it read every place at once and take the first free
one the same way, the next one read free when it lost a race, reading again only
when it lost them all.

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
from nats.js.kv import KV_DEL, KV_OP, KeyValue

from framework_m_core.ports.store import ANY, MAX_TTL, Claim, Record, Write, place_key
from framework_m_core.ports.store_base import BaseStore

from .buckets import (
    EXPECTED_LAST,
    EXPIRY,
    WRONG_LAST_SEQUENCE,
    LazyBucket,
    answered,
    kv_key,
    now_ms,
)
from .confirms import Confirms
from .errors import server_errors
from .known import TRIES, Known
from .settings import NatsSettings

log = logging.getLogger("framework_m.nats")

# A watch reads its key again this often even without a message, within the port's
# WATCH_DELAY: on a cluster a write reaching another server before it learned of the
# subscription, or one made while the connection was being made again, sends none.
_REREAD = 1.5
_DELETE = {KV_OP: KV_DEL}


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
        self._known = Known(remember=kind == "store")
        self._reading: dict[tuple[int, tuple[str, ...]], asyncio.Future[list[_Held]]] = {}

    def reset(self) -> None:
        """Forget the bucket (the connection that had it is gone)."""
        if self._lazy is not None:
            self._lazy.reset()
        self._known = Known(remember=self._kind == "store")

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
        stored = None if value is None else _stored(value, ttl)
        if stored is not None and (version is ANY or version is None):
            landed = await self._cas(key, stored, None if version is ANY else 0)
            if landed is not None:
                return landed
            # an entry is there: a live record refuses the create, an expired one not
        elif isinstance(version, int) and (own := self._known.mine(key, version)):
            if own.expires <= now_ms():
                return None  # it expired: the key has no record
            landed = await self._cas(key, stored, version)
            return landed if stored is not None or landed is None else version
        while True:
            held = await self._held(kv, key)
            current = None if held.record is None else held.record.version
            if version is not ANY and version != current:
                return None
            if stored is None and current is None:
                return None
            landed = await self._cas(key, stored, held.revision)
            if landed is not None:
                return landed if stored is not None else current
            if version is not ANY:
                return None  # another write came between: the condition no longer holds
            # ANY always lands: read again and write over what is there now

    async def _send(self, writes: list[Write]) -> None:
        await self._kv(create=True)  # a publish to no bucket would be dropped unseen
        nc = await self._link()
        with server_errors("sending records"):
            for key, value, _, ttl in writes:
                stored = None if value is None else _stored(value, ttl)
                self._known.unknown(key, value, _expiry(stored))
                subject = f"$KV.{self._name}.{kv_key(key)}"
                await nc.publish(
                    subject, stored or b"", headers=_DELETE if stored is None else None
                )

    async def _cas(self, key: str, stored: bytes | None, last: int | None) -> int | None:
        """Put ``stored`` under ``key`` (None: delete it) in one publish, where the key's
        last revision is ``last`` (0: it has no entry; None: whatever it is); the new
        entry's revision, or None when the key had another."""
        subject = f"$KV.{self._name}.{kv_key(key)}"
        headers = {} if last is None else {EXPECTED_LAST: str(last)}
        if stored is None:
            headers[KV_OP] = KV_DEL
        publish = partial(self._confirms().publish, subject, stored or b"", headers or None)
        value = None if stored is None else stored[EXPIRY.size :]
        with self._known.writing(key, value, _expiry(stored)):
            try:
                ack = await answered(publish)
            except (KeyWrongLastSequenceError, APIError) as exc:
                if not _lost_race(exc):
                    raise
                self._known.missed(key)
                return None
            if value is None:
                self._known.deleted(key, ack.seq)
            else:
                self._known.wrote(key, value, _expiry(stored), ack.seq)
        return int(ack.seq)

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        kv = await self._kv(create=True)
        assert kv is not None
        keys = [place_key(key, n) for n in range(places)]
        stored = _stored(value, ttl)
        with server_errors("claiming a place"):
            known = await self._claim_known(keys, value, stored)
            return known if known is not None else await self._claim_read(kv, keys, stored)

    async def _claim_known(self, keys: list[str], value: bytes, stored: bytes) -> Claim | None:
        """The claim without reading: the place this store knows it holds for
        ``value``, else a place it knows to be free (:mod:`.known`); None: read."""
        if not self._known.sure(keys):
            return None
        held = self._known.held(keys, value)
        if held is None and not self._known.has_free(keys):
            await self._known.deletes_landed(keys)  # a place freed here is free then
        if held is not None:
            landed = await self._cas(held[0], stored, held[1])
            return None if landed is None else Claim(held[0], landed)
        for _ in range(TRIES):
            free = self._known.take_free(keys)
            if free is None:
                break
            place, revision = free
            landed = await self._cas(place, stored, revision)
            if landed is not None:
                return Claim(place, landed)
        return None

    async def _claim_read(self, kv: KeyValue, keys: list[str], stored: bytes) -> Claim | None:
        """The claim after reading every place (a read under way for the same places
        is shared, unless this store wrote since it began)."""
        value = stored[EXPIRY.size :]
        while True:
            held = await self._read_places(kv, keys)
            mine = [i for i, h in enumerate(held) if h.record and h.record.value == value]
            for n, h in enumerate(held):
                if h.record is not None:
                    self._known.taken(keys[n])
                elif not self._known.under_way(keys[n]):  # a claim here may be taking it
                    self._known.free(keys[n], h.revision)
            if mine:
                n = mine[0]
                landed = await self._cas(keys[n], stored, held[n].revision)
                if landed is not None:
                    return Claim(keys[n], landed)
                continue
            if all(h.record is not None for h in held):
                return None
            while free := self._known.take_free(keys):
                place, revision = free  # a place taken meanwhile: the next one free
                landed = await self._cas(place, stored, revision)
                if landed is not None:
                    return Claim(place, landed)
            # every place read free was taken meanwhile: read them again

    async def _read_places(self, kv: KeyValue, keys: list[str]) -> list[_Held]:
        shape = (self._known.landed, tuple(keys))
        reading = self._reading.get(shape)
        # A read that ended is not shared: its result is what a claim that must read
        # again has seen, and awaiting it would not yield (its callback not yet run).
        if reading is None or reading.done():
            reading = asyncio.ensure_future(asyncio.gather(*(self._held(kv, k) for k in keys)))
            self._reading[shape] = reading
            reading.add_done_callback(partial(_done_reading, self._reading, shape))
        return await asyncio.shield(reading)

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


def _done_reading(
    reading: dict[tuple[int, tuple[str, ...]], asyncio.Future[list[_Held]]],
    shape: tuple[int, tuple[str, ...]],
    future: asyncio.Future[list[_Held]],
) -> None:
    if reading.get(shape) is future:
        del reading[shape]
    if not future.cancelled():
        future.exception()  # retrieved: every claim waiting on it raised it already


def _expiry(stored: bytes | None) -> int:
    """The expiry stored before a value (unix ms; 0: none)."""
    return 0 if stored is None else int(EXPIRY.unpack_from(stored)[0])


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
