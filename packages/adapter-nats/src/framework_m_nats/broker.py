"""``nats://``: framework-m on NATS JetStream.

Every publish carries a ``Nats-Msg-Id`` (the deduplication id, or ``job:<id>``
for jobs without one), so JetStream drops duplicates inside the stream's
``duplicate_window`` and a publish retried after a timeout is always safe.

Settle calls first check that the delivery is still reserved (:mod:`.reservations`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from framework_m_core.ports import (
    BaseBroker,
    BrokerError,
    DeadLetter,
    Delivery,
    JobMessage,
    PublishResult,
    QueueStats,
    SchemaPlan,
    Waiting,
)
from framework_m_core.ports import Capability as C
from framework_m_core.ports.store import StoreProtocol

from . import (
    confirms,
    deadletters,
    delays,
    events,
    greeting,
    publishing,
    pulling,
    schema,
    stats,
    store,
    trimming,
    waiting,
    wire,
)
from .errors import describe, server_errors
from .reservations import Reservation, reserved_until
from .settings import NatsSettings, parse_url

log = logging.getLogger("framework_m.nats")

_INITIAL_CONNECT_ROUNDS = 3


class NatsBroker(BaseBroker[NatsSettings]):
    """JetStream adapter; see the module docstring and the README's NATS section."""

    capabilities = frozenset(
        {
            C.DEAD_LETTER_INSPECTION,
            C.DEAD_LETTER_REMOVAL,
            C.CROSS_PROCESS,
            C.NEW_ID_AFTER_WINDOW,
            C.QUEUE_STATS,
            C.DELAYED_ENQUEUE,
            C.REDELIVER_ON_CLOSE,
            C.STORE_DEADLINE,
            C.STORED_DEDUP_WINDOW,
            C.STORE,
            C.WAITING_INSPECTION,
        }
    )
    parse_url = staticmethod(parse_url)

    def __init__(self, settings: NatsSettings) -> None:
        super().__init__(settings)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._puller: pulling.PullConsumer | None = None
        self._confirms: confirms.Confirms | None = None
        self._window: float | None = None  # read from the server
        self._ack_wait: float | None = None
        self._held: dict[int, Reservation] = {}
        self._mover = delays.DelayMover(settings, lambda: self.js, self._publish_once)
        self._trimmer = trimming.StreamTrimmer(settings, lambda: self.js, lambda: self.dedup_window)
        self._records, self._expiring = (
            store.NatsStore(
                settings,
                lambda: self.js,
                self._link,
                lambda: self._connected(self._confirms),
                kind=kind,
            )
            for kind in ("store", "memos")
        )

    @property
    def dedup_window(self) -> float:
        return self._window if self._window is not None else self.settings.dedup_window

    @property
    def visibility_timeout(self) -> float:
        return self._ack_wait if self._ack_wait is not None else self.settings.ack_wait

    @property
    def js(self) -> JetStreamContext:
        return self._connected(self._js)

    @property
    def store(self) -> StoreProtocol:
        return self._records

    @property
    def expiring_store(self) -> StoreProtocol:
        """The bucket ``{stream}_memos``, whose ``max_age`` (seven days) drops a record
        at the latest then: JetStream 2.9 keeps no ttl per key, and a record of
        :attr:`store` stays in its bucket after its expiry until written again."""
        return self._expiring

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def max_body_size(self) -> int | None:
        return None if self._nc is None else self._nc.max_payload - wire.HEADROOM

    async def connect(self) -> None:
        if self._nc is None:
            await self._open()

    async def _open(self) -> None:
        """Connect a new client (replacing any closed one) and read the server's settings."""
        # Give up on a first connection after a few rounds (a clear error beats a silent
        # loop); once connected, reconnect forever (set below).
        options = self.settings.connect_options(_INITIAL_CONNECT_ROUNDS)
        options |= events.callbacks(lambda: self._nc, self.display_url)
        if not self.settings.use_tls:  # a server may want TLS before it greets
            await greeting.check(
                self.settings.servers, min(greeting.WAIT, options["connect_timeout"])
            )
        try:
            nc = await nats.connect(**options)
        except Exception as exc:  # nats-py raises several unrelated types here
            raise BrokerError(f"cannot connect to {self.display_url}: {describe(exc)}") from None
        nc.options["max_reconnect_attempts"] = -1
        self._nc, self._js = nc, nc.jetstream(timeout=publishing.TIMEOUT)
        self._confirms = confirms.Confirms(nc, publishing.TIMEOUT)
        self._records.reset()
        self._expiring.reset()
        self._puller, self._held = None, {}
        with server_errors("reading the stream settings"):
            await self._read_server_settings()

    async def close(self) -> None:
        await self._mover.stop()
        await self._trimmer.stop()
        self._records.reset()
        nc, puller, held = self._nc, self._puller, list(self._held.values())
        confirmed, self._confirms = self._confirms, None
        self._nc, self._js, self._puller, self._held = None, None, None, {}
        if nc is None or nc.is_closed:
            return
        try:
            if confirmed is not None:
                await confirmed.close()
            if puller is not None:
                await puller.stop()
                for msg in puller.take_all():  # received, never handed over
                    await msg.nak()
            now = time.monotonic()
            for res in held:  # release what this consumer still holds
                if not res.settled and res.until > now:
                    await res.msg.nak()
            await nc.flush(timeout=2)  # acks and naks already sent reach the server
        except Exception as exc:
            log.debug("hand-back on close failed: %s", exc)
        await nc.close()

    async def _link(self) -> Client:
        """The client, connected anew if the server closed the last one for good.

        nats-py reconnects after network faults by itself, but a protocol error
        (a message over ``max_payload``, say) closes the client for good.
        """
        nc = self._connected(self._nc)
        if nc.is_closed:
            why = describe(nc.last_error) if nc.last_error else "closed"
            log.warning("nats: the server closed the connection (%s); connecting again", why)
            await self._open()
            nc = self._connected(self._nc)
        return nc

    async def server_time(self) -> float | None:
        """The ``ts`` JetStream puts in API replies (servers >= 2.10); None before that."""
        nc = await self._link()
        with server_errors("reading the server's clock"):
            reply = await nc.request(
                f"$JS.API.STREAM.INFO.{self.settings.stream}", b"", timeout=publishing.TIMEOUT
            )
        return wire.server_time(reply.data)

    async def _read_server_settings(self) -> None:
        s = self.settings
        try:
            self._window = (await self.js.stream_info(s.stream)).config.duplicate_window
        except NotFoundError:
            self._window = None
        try:
            self._ack_wait = (await self.js.consumer_info(s.stream, s.consumer)).config.ack_wait
        except NotFoundError:
            self._ack_wait = None

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        with server_errors("schema inspection"):
            return await schema.plan(self.js, self.settings)

    async def _apply_schema(self, plan: SchemaPlan) -> None:
        with server_errors("schema sync"):
            await schema.apply(self.js, self.settings, plan)
            await self._read_server_settings()

    # -- publishing --------------------------------------------------------------------

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        msg_id = wire.job_msg_id(message.deduplication_id, message.id)
        headers, subject = {wire.MSG_ID: msg_id}, self.settings.jobs_subject
        if message.not_before is not None:  # waits on the delayed subject (delays.py)
            headers[wire.NOT_BEFORE], subject = (
                str(message.due_ms),
                self.settings.delayed_subject,
            )
        ack = await self._publish_once(subject, body, headers)
        if not ack.duplicate:
            return PublishResult(message.id)
        original = await publishing.job_id_at(self.js, self.settings.stream, ack.seq, msg_id)
        return PublishResult(original, duplicate=True)

    async def _publish_once(
        self, subject: str, body: bytes, headers: dict[str, str]
    ) -> confirms.PubAck:
        nc = await self._link()
        return await publishing.publish_once(
            nc, self._connected(self._confirms), subject, body, headers
        )

    async def requeue(self, body: bytes) -> None:
        await self._publish_once(self.settings.jobs_subject, body, {})

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        nc = await self._link()
        self._mover.ensure_running()  # a consumer moves the delayed jobs that fall due
        self._trimmer.ensure_running()  # and trims acked jobs outside the window
        if self._puller is None:
            s = self.settings
            self._puller = pulling.PullConsumer(nc, s.stream, s.consumer, s.ack_wait)
        if not nc.is_connected:
            raise BrokerError(f"{self.display_url} is unreachable: reconnecting")
        with server_errors("fetch"):
            msgs = await self._puller.receive(max_messages, timeout)
        out = []
        for m, since in msgs:
            res = Reservation(m, reserved_until(self.visibility_timeout, since), nc)
            self._held[id(res)] = res
            meta = m.metadata
            stored = meta.timestamp.timestamp() if meta.timestamp else None
            out.append(Delivery(m.data, meta.num_delivered or 1, res, stored, None, since))
        return out

    def _reserved(self, delivery: Delivery) -> Reservation | None:
        """The delivery's live reservation; None once settled; DeliveryLostError once expired."""
        res = delivery.handle
        if not isinstance(res, Reservation):
            raise BrokerError("delivery was not received from this NATS broker")
        if res.expired():
            self._held.pop(id(res), None)
        return res.live(self.visibility_timeout)

    def _settled(self, res: Reservation) -> None:
        res.settled = True
        self._held.pop(id(res), None)

    async def ack(self, delivery: Delivery) -> None:
        if (res := self._reserved(delivery)) is not None:
            with server_errors("ack"):
                await res.msg.ack()
            self._settled(res)

    async def retry(self, delivery: Delivery, delay: float) -> None:
        if (res := self._reserved(delivery)) is not None:
            with server_errors("nak"):
                await res.msg.nak(delay=max(0.0, delay))
            self._settled(res)

    async def release(self, delivery: Delivery) -> None:
        if (res := self._reserved(delivery)) is not None:
            with server_errors("nak"):
                await res.msg.nak()
            self._settled(res)

    async def extend(self, delivery: Delivery) -> None:
        if (res := self._reserved(delivery)) is not None:
            until = reserved_until(self.visibility_timeout)
            with server_errors("in_progress"):
                await res.msg.in_progress()
            res.until = until

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        if (res := self._reserved(delivery)) is None:
            return
        seq = res.msg.metadata.sequence.stream if res.msg.metadata.sequence else 0
        body, headers = wire.dead_letter_copy(
            self.settings.stream, seq, delivery, reason, res.client.max_payload
        )
        await self._publish_once(self.settings.dead_subject, body, headers)
        with server_errors("term"):
            await res.msg.term()
        self._settled(res)

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        return await deadletters.latest(self.js, self.settings.dead_letter_stream, limit)

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        return await deadletters.remove(self.js, self.settings.dead_letter_stream, letters)

    async def waiting(self, limit: int = 100) -> Sequence[Waiting]:
        """Read in place, a request a message (:mod:`.waiting`): the jobs subject's
        messages past the consumer's delivered sequence, then the delayed jobs not yet
        due. Retries waiting out a ``nak(delay=...)`` are held by the consumer, which
        lists none of them: they are not among these."""
        await self._link()
        return await waiting.read(self.js, self.settings, limit)

    async def queue_stats(self) -> QueueStats:
        """Counts of the durable consumers and the dead-letter stream, in three JetStream
        requests (:mod:`.stats`): ``ready`` num_pending; ``reserved`` num_ack_pending, with
        retries waiting out their delay and deliveries released or past ack_wait until
        redelivered (``retries`` None); ``scheduled`` and ``delayed`` the delayed jobs
        waiting to be moved; ``dead_letters`` the dead-letter stream's messages;
        ``consumers`` None (pull consumers count no clients).
        """
        await self._link()
        return await stats.read(self.js, self.settings)
