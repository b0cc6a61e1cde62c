"""``nats://``: framework-m on NATS JetStream.

Every publish carries a ``Nats-Msg-Id`` (the deduplication id, or ``job:<id>``
for jobs without one), so JetStream drops duplicates inside the stream's
``duplicate_window`` and a publish retried after a timeout is always safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any, Self

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import (
    APIError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)

from framework_m_core.broker import BaseBroker, Capability, DeadLetter, Delivery, PublishResult
from framework_m_core.errors import BrokerError, MessageDecodeError, SchemaConflictError
from framework_m_core.messages import JobMessage, decode_message
from framework_m_core.schema import SchemaPlan

from . import schema
from .settings import NatsSettings, parse_url

log = logging.getLogger("framework_m.nats")

MSG_ID = "Nats-Msg-Id"
REASON = "Framework-M-Reason"
ATTEMPTS = "Framework-M-Attempts"
ORIGIN_SEQ = "Framework-M-Stream-Seq"
DEAD_AT = "Framework-M-Dead-At"
# "duplicate message id is in process": a clustered stream is still storing the
# first publish of this id (servers >= 2.11). Ask again until it answers duplicate.
_ERR_DUPLICATE_IN_PROCESS = 10158
_PUBLISH_TRIES = 4
_INITIAL_CONNECT_ROUNDS = 3
_PUBLISH_TIMEOUT = 5.0
_TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    NoStreamResponseError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
)


class NatsBroker(BaseBroker):
    """JetStream adapter; see the module docstring and the README's NATS section."""

    capabilities = frozenset(
        {
            Capability.DEAD_LETTER_INSPECTION,
            Capability.RAW_PUBLISH,
            Capability.CROSS_PROCESS,
            Capability.NEW_ID_AFTER_WINDOW,
        }
    )

    def __init__(self, settings: NatsSettings) -> None:
        super().__init__(settings.display_url)
        self.settings = settings
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._psub: JetStreamContext.PullSubscription | None = None
        self._window: float | None = None  # read from the server
        self._ack_wait: float | None = None

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(parse_url(url))

    @property
    def dedup_window(self) -> float:
        return self._window if self._window is not None else self.settings.dedup_window

    @property
    def visibility_timeout(self) -> float:
        return self._ack_wait if self._ack_wait is not None else self.settings.ack_wait

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise BrokerError(f"{self.display_url} is not connected")
        return self._js

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        if self._nc is not None:
            return
        s = self.settings
        options: dict[str, Any] = {
            "servers": s.servers,
            "name": s.name,
            "connect_timeout": s.connect_timeout,
            # Give up on a first connection after a few rounds (a clear error beats a
            # silent loop); once connected, reconnect forever (set below).
            "max_reconnect_attempts": _INITIAL_CONNECT_ROUNDS,
            "reconnect_time_wait": 0.5,
            "allow_reconnect": True,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
        }
        if s.user is not None:
            options.update(user=s.user, password=s.password)
        if s.token is not None:
            options["token"] = s.token
        if s.creds:
            options["user_credentials"] = s.creds
        if s.nkey:
            options["nkeys_seed"] = s.nkey
        tls = s.ssl_context()
        if tls is not None:
            options["tls"] = tls
        try:
            self._nc = await nats.connect(**options)
        except Exception as exc:  # nats-py raises several unrelated types here
            raise BrokerError(f"cannot connect to {self.display_url}: {_describe(exc)}") from None
        self._nc.options["max_reconnect_attempts"] = -1
        self._js = self._nc.jetstream(timeout=_PUBLISH_TIMEOUT)
        with _server_errors("reading the stream settings"):
            await self._read_server_settings()

    async def close(self) -> None:
        nc, psub = self._nc, self._psub
        self._nc, self._js, self._psub = None, None, None
        if nc is None or nc.is_closed:
            return
        try:
            if psub is not None:
                await psub.unsubscribe()
            await nc.flush(timeout=2)  # acks and naks already sent reach the server
        except Exception as exc:
            log.debug("flush on close failed: %s", exc)
        await nc.close()

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats: %s", _describe(exc))

    async def _on_disconnected(self) -> None:
        if self._nc is None:  # closing
            return
        log.warning("nats: disconnected from %s; reconnecting", self.display_url)

    async def _on_reconnected(self) -> None:
        log.info("nats: reconnected to %s", self._connected_url())

    def _connected_url(self) -> str:
        url = self._nc.connected_url if self._nc is not None else None
        return f"{url.hostname}:{url.port}" if url is not None else "?"

    async def _read_server_settings(self) -> None:
        try:
            info = await self.js.stream_info(self.settings.stream)
            self._window = info.config.duplicate_window
        except NotFoundError:
            self._window = None
        try:
            cinfo = await self.js.consumer_info(self.settings.stream, self.settings.consumer)
            self._ack_wait = cinfo.config.ack_wait
        except NotFoundError:
            self._ack_wait = None

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        with _server_errors("schema inspection"):
            return schema.as_plan(await schema.plan(self.js, self.settings))

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        with _server_errors("schema sync"):
            result = await schema.sync(self.js, self.settings, dry_run=dry_run)
            if not dry_run:
                await self._read_server_settings()
                self._psub = None
        return result

    # -- publishing --------------------------------------------------------------------

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        msg_id = message.deduplication_id or f"job:{message.id}"
        ack = await self._publish_once(self.settings.jobs_subject, body, {MSG_ID: msg_id})
        if not ack.duplicate:
            return PublishResult(message.id)
        return PublishResult(await self._job_id_at(ack.seq, msg_id), duplicate=True)

    async def _publish_once(self, subject: str, body: bytes, headers: dict[str, str]) -> Any:
        """Publish with retries; the Nats-Msg-Id makes every retry idempotent."""
        delay = 0.05
        for attempt in range(1, _PUBLISH_TRIES + 1):
            try:
                return await self.js.publish(
                    subject, body, headers=headers, timeout=_PUBLISH_TIMEOUT
                )
            except APIError as exc:
                if exc.err_code == _ERR_DUPLICATE_IN_PROCESS and attempt < _PUBLISH_TRIES:
                    await asyncio.sleep(delay)
                    delay *= 2
                    continue
                raise BrokerError(f"publish to {subject} refused: {_describe(exc)}") from None
            except _TRANSIENT as exc:
                if attempt == _PUBLISH_TRIES:
                    raise BrokerError(
                        f"publish to {subject} failed after {attempt} tries: {_describe(exc)}"
                    ) from None
                log.debug("publish to %s failed (%s); retrying", subject, _describe(exc))
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    async def _job_id_at(self, seq: int, msg_id: str) -> str:
        """The id of the job stored at ``seq`` (the original of a duplicate)."""
        try:
            raw = await self.js.get_msg(self.settings.stream, seq)
            return decode_message(raw.data or b"").id
        except (NotFoundError, MessageDecodeError) as exc:
            log.warning("original of duplicate %s (seq %d) unreadable: %s", msg_id, seq, exc)
            return f"{self.settings.stream}:{seq}"

    async def publish_raw(self, body: bytes) -> None:
        await self._publish_once(self.settings.jobs_subject, body, {})

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        if self._psub is None:
            try:
                self._psub = await self.js.pull_subscribe_bind(
                    self.settings.consumer, self.settings.stream
                )
            except Exception as exc:
                raise BrokerError(f"cannot bind to the consumer: {_describe(exc)}") from None
        try:
            msgs = await self._psub.fetch(max_messages, timeout=max(timeout, 0.01))
        except nats.errors.TimeoutError:
            return []
        except APIError as exc:
            raise BrokerError(f"fetch failed: {_describe(exc)}") from None
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError):
            raise BrokerError("fetch failed: connection lost") from None
        return [Delivery(m.data, m.metadata.num_delivered or 1, m) for m in msgs]

    async def ack(self, delivery: Delivery) -> None:
        await _msg(delivery).ack()

    async def retry(self, delivery: Delivery, delay: float) -> None:
        await _msg(delivery).nak(delay=max(0.0, delay))

    async def release(self, delivery: Delivery) -> None:
        await _msg(delivery).nak()

    async def extend(self, delivery: Delivery) -> None:
        await _msg(delivery).in_progress()

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        msg = _msg(delivery)
        seq = msg.metadata.sequence.stream if msg.metadata.sequence else 0
        headers = {
            MSG_ID: f"dead:{self.settings.stream}:{seq}",
            REASON: _header_value(reason),
            ATTEMPTS: str(delivery.attempt),
            ORIGIN_SEQ: str(seq),
            DEAD_AT: f"{time.time():.3f}",
        }
        await self._publish_once(self.settings.dead_subject, delivery.body, headers)
        await msg.term()

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        with _server_errors("reading dead letters"):
            return await self._dead_letters(limit)

    async def _dead_letters(self, limit: int) -> Sequence[DeadLetter]:
        name = self.settings.dead_letter_stream
        info = await self.js.stream_info(name)
        out: list[DeadLetter] = []
        seq = info.state.last_seq
        while seq >= max(1, info.state.first_seq) and len(out) < limit:
            try:
                raw = await self.js.get_msg(name, seq)
            except NotFoundError:
                seq -= 1
                continue
            headers = raw.headers or {}
            out.append(
                DeadLetter(
                    body=raw.data or b"",
                    reason=headers.get(REASON, ""),
                    attempts=int(headers.get(ATTEMPTS, "0") or 0),
                    dead_lettered_at=float(headers.get(DEAD_AT, "0") or 0),
                )
            )
            seq -= 1
        out.reverse()
        return out


@contextlib.contextmanager
def _server_errors(what: str) -> Iterator[None]:
    """Turn nats-py's errors into one-line :class:`BrokerError`s."""
    try:
        yield
    except (BrokerError, SchemaConflictError):
        raise
    except (TimeoutError, nats.errors.Error) as exc:
        hint = ""
        if isinstance(exc, nats.errors.NoRespondersError | NoStreamResponseError):
            hint = " (is JetStream enabled on the server? start nats-server with -js)"
        raise BrokerError(f"{what} failed: {_describe(exc)}{hint}") from None


def _msg(delivery: Delivery) -> Msg:
    handle = delivery.handle
    if not isinstance(handle, Msg):
        raise BrokerError("delivery was not received from this NATS broker")
    return handle


def _header_value(text: str) -> str:
    """Header values may not hold line breaks; keep them bounded."""
    return " ".join(text.split())[:2000]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, APIError):
        if exc.code == 503 or isinstance(exc, ServiceUnavailableError):
            return "JetStream is not available on the server (start nats-server with -js)"
        text = exc.description or type(exc).__name__
        return f"{text} (code {exc.code}, err_code {exc.err_code})"
    text = str(exc) or type(exc).__name__
    return text
