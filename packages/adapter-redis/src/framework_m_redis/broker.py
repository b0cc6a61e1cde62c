"""``redis://``: framework-m on Redis Streams.

Enqueue is one Lua script: ``SET <dedup key> <job id> NX PX <window> GET`` and
the ``XADD`` run as one atomic step, so no crash or failover leaves a dedup key
without its job or a job without its key. Workers read through one consumer
group; an ack is ``XACK`` + ``XDEL`` in one step (the acks of one event-loop pass
share one script call); a crashed consumer's entries
are reclaimed with ``XAUTOCLAIM`` after the visibility timeout, which running
jobs extend; retries wait in a sorted set that any replica moves back when due.
Every settle script first checks that the entry is still pending for this
consumer and delivery, so a late settle never touches a reclaimed job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.exceptions import NoScriptError, RedisError, ResponseError

from framework_m_core.ports import (
    BaseBroker,
    BrokerError,
    Calls,
    DeadLetter,
    Delivery,
    DeliveryLostError,
    FrameworkMError,
    JobMessage,
    PassBatch,
    PublishResult,
    QueueStats,
    SchemaMissingError,
    SchemaPlan,
    Waiting,
    answer,
)
from framework_m_core.ports import Capability as C
from framework_m_core.ports.store import StoreProtocol

from . import connection, deadletters, publishing, schema, scripts, stats
from .schema import text
from .settings import RedisSettings, parse_url
from .store import RedisStore

log = logging.getLogger("framework_m.redis")

_PROMOTE_BATCH = 500
# The scripts whose loss in a failover would lose a job or run one again: with
# wait_replicas they count as done only once a replica has them (WAIT).
_REPLICATED = frozenset({"ENQUEUE", "ACK", "RETRY", "RELEASE", "DEAD_LETTER", "PROMOTE"})
# Longest a blocked read waits before looking for due retries and silent consumers' jobs.
_RECLAIM_SCAN = 1.0


@dataclass(frozen=True, slots=True)
class _Entry:
    """A delivery's handle: the stream entry and how often the group had delivered it."""

    id: str
    times: int


class RedisBroker(BaseBroker[RedisSettings]):
    """Redis Streams adapter; see the module docstring and the README's Redis section."""

    capabilities = frozenset(
        {
            C.DEAD_LETTER_INSPECTION,
            C.DEAD_LETTER_REMOVAL,
            C.CROSS_PROCESS,
            C.NEW_ID_AFTER_WINDOW,
            C.REDELIVER_ON_CLOSE,
            C.UNCOUNTED_RELEASE,
            C.STORE_DEADLINE,
            C.QUEUE_STATS,
            C.DELAYED_ENQUEUE,
            C.WAITING_INSPECTION,
            C.RETRY_INSPECTION,
            C.STORE,  # and so leases, state and memos, built on it in core
        }
    )
    parse_url = staticmethod(parse_url)

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings)
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._held: dict[_Entry, Delivery] = {}  # unsettled, released on close
        # Each job still waits for its own entry's code; a failed call fails them all.
        self._acks: PassBatch[_Entry, int] = PassBatch(self._ack_many, most=scripts.ACK_MOST)
        self._pipelined_calls: PassBatch[_Call, Any] = PassBatch(
            self._run_pipelined, most=scripts.PIPELINED_MOST
        )
        self._replicated_calls: PassBatch[_Call, Any] = PassBatch(
            self._run_replicated, most=scripts.PIPELINED_MOST
        )
        self._enqueue_calls: PassBatch[_Call, Any] = PassBatch(
            self._run_pipelined, most=scripts.PIPELINED_MOST
        )
        self._store = RedisStore(settings, self._run, self._in_pass, lambda: self.client)

    max_body_size_option = "max_job_size"

    @property
    def max_body_size(self) -> int:
        return self.settings.max_job_size

    @property
    def visibility_timeout(self) -> float:
        return self.settings.visibility_timeout

    @property
    def client(self) -> Any:
        return self._connected(self._client)

    @property
    def store(self) -> StoreProtocol:
        return self._store

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        if self._client is not None:
            return
        client = await connection.open_client(self.settings)
        self._client = client
        self._scripts = {
            name: client.register_script(getattr(scripts, name)) for name in scripts.NAMES
        }
        try:
            await connection.check_permissions(client, self.settings)
        except FrameworkMError:
            self._client = None
            await connection.close_client(client)
            raise
        await connection.warn_on_eviction(client)

    async def close(self) -> None:
        if self._client is None:
            return
        for delivery in list(self._held.values()):  # release what this consumer holds
            try:
                await self.release(delivery)
            except BrokerError as exc:
                log.debug("could not release %s on close: %s", delivery.handle, exc)
        await self._store.close()
        await connection.forget_consumer(self._client, self.settings, self.consumer)
        client, self._client = self._client, None
        await connection.close_client(client)

    async def server_time(self) -> float | None:
        try:
            seconds, micros = await self.client.time()
        except (RedisError, OSError) as exc:
            raise BrokerError(f"redis TIME failed: {exc}") from None
        return int(seconds) + int(micros) / 1e6

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        self._connected(self._client)
        if self.settings.replicas_to_wait_for and name in _REPLICATED:
            return await self._replicated_calls.submit(_Call(name, keys, args))
        if name == "ENQUEUE" and not self.settings.cluster:  # the pass's enqueues: one pipeline
            return await self._enqueue_calls.submit(_Call(name, keys, args))
        return await self._direct(name, keys, args)

    async def _direct(self, name: str, keys: list[str], args: list[Any]) -> Any:
        with publishing.redis_errors(name, self.settings):
            return await self._scripts[name](keys=keys, args=args)

    async def _run_replicated(self, calls: Calls[_Call, Any]) -> None:
        """The writes of one pass in one pipeline with one ``WAIT`` after them: each
        caller gets its own reply (or refusal) once ``wait_replicas`` replicas have them
        all, and an error when they do not in time."""
        await self._pipelined(calls, replicated=True)

    async def _pipelined(self, calls: Calls[_Call, Any], *, replicated: bool = False) -> None:
        """``calls`` in one pipeline (a ``WAIT`` after them if ``replicated``); each
        caller gets its own reply, or its own error."""
        s = self.settings
        with publishing.redis_errors(calls[0][0].name, s):
            if s.cluster:
                *replies, copies = await self._cluster_replicated(calls)
            else:
                async with self.client.pipeline(transaction=False) as pipe:
                    for call, _ in calls:
                        script = self._scripts[call.name]
                        await script(keys=call.keys, args=call.args, client=pipe)
                    if replicated:
                        *replies, copies = await publishing.replicated(
                            pipe, s, raise_on_error=False
                        )
                    else:
                        replies = await pipe.execute(raise_on_error=False)
        if replicated:
            publishing.check_copies(calls[0][0].name, copies, s)
        for (call, future), reply in zip(calls, replies, strict=True):
            refused = isinstance(reply, Exception)
            answer(future, publishing.refused(call.name, reply, s) if refused else reply)

    async def _cluster_replicated(self, calls: Calls[_Call, Any]) -> list[Any]:
        """On Redis Cluster: ``calls`` (all in the queue's slot) and a ``WAIT`` sent to the
        slot's primary in one pipeline, which gives them one connection; scripts the node
        does not know yet (a replica promoted since) are loaded and the calls sent again."""
        replies = await self._cluster_send(calls)
        unknown = {
            call.name
            for (call, _), reply in zip(calls, replies[:-1], strict=True)
            if isinstance(reply, NoScriptError)
        }
        if not unknown:
            return replies
        for name in unknown:
            await self.client.script_load(getattr(scripts, name))  # on every primary
        return await self._cluster_send(calls)

    async def _cluster_send(self, calls: Calls[_Call, Any]) -> list[Any]:
        s = self.settings
        node = self.client.get_node_from_key(s.stream)
        try:
            async with self.client.pipeline() as pipe:
                for call, _ in calls:
                    sha = self._scripts[call.name].sha
                    pipe.execute_command("EVALSHA", sha, len(call.keys), *call.keys, *call.args)
                return await publishing.replicated(pipe, s, raise_on_error=False, target_nodes=node)
        except (RedisError, OSError):
            # The slot's primary may have moved: a command routed by the key makes the
            # client learn where, which a pipeline sent to a fixed node does not.
            with contextlib.suppress(RedisError, OSError):
                await self.client.exists(s.stream)
            raise

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        return await schema.plan(self.client, self.settings)

    async def _apply_schema(self, plan: SchemaPlan) -> None:
        await schema.apply(self.client, self.settings)

    # -- publishing --------------------------------------------------------------------

    memos_in_publish = True  # the ENQUEUE script creates them with the job

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        memos = self.enqueue_memos(message, message.id)
        call = publishing.enqueue_call(self.settings, message, body, memos)
        return publishing.result(message, await self._run("ENQUEUE", **call))

    async def _publish_many(
        self, messages: Sequence[JobMessage], bodies: Sequence[bytes]
    ) -> list[PublishResult]:
        if self.settings.cluster:  # a cluster pipeline may split: one by one, 100 in flight
            return await super()._publish_many(messages, bodies)
        self._connected(self._client)
        script = self._scripts["ENQUEUE"]
        return await publishing.publish_many(
            self.client,
            script,
            self.settings,
            messages,
            bodies,
            lambda message: self.enqueue_memos(message, message.id),
        )

    async def requeue(self, body: bytes) -> None:
        try:
            await self.client.xadd(self.settings.stream, {"b": body, "a": "0"})
        except RedisError as exc:
            raise BrokerError(f"redis xadd failed: {exc}") from None

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        s = self.settings
        deadline = time.monotonic() + timeout
        try:
            while True:
                await self._run(
                    "PROMOTE", [s.delayed, s.stream, s.later], [_now_ms(), _PROMOTE_BATCH]
                )
                out = await self._reclaim(max_messages)
                if len(out) < max_messages:
                    block = 1 if out else await self._block_ms(deadline - time.monotonic())
                    asked = time.monotonic()  # the entries' idle time starts after this
                    reply = await self.client.xreadgroup(
                        s.group,
                        self.consumer,
                        {s.stream: ">"},
                        count=max_messages - len(out),
                        block=block,
                    )
                    for _, entries in reply or []:
                        out.extend(self._hold(eid, f, 1, asked) for eid, f in entries if f)
                if out or time.monotonic() >= deadline:
                    return out
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                raise SchemaMissingError(
                    f"consumer group {s.group} of {s.stream} does not exist (Redis restarted "
                    "without persistence?): run schema sync (m sync-schema)"
                ) from None
            raise BrokerError(f"redis receive failed: {exc}") from None
        except (RedisError, OSError) as exc:
            raise BrokerError(f"redis receive failed: {exc}") from None

    def _hold(self, eid: Any, fields: dict[bytes, bytes], times: int, asked: float) -> Delivery:
        """A delivery of entry ``eid`` of the group, read by a command sent at ``asked``."""
        before = deadletters.count(fields.get(b"a"))
        if before is None:  # not written by this adapter: count its deliveries alone
            log.warning("entry %s has an invalid attempts field; counting deliveries", text(eid))
            before = 0
        entry = _Entry(text(eid), times)
        delivery = Delivery(fields.get(b"b", b""), before + times, entry, reserved_since=asked)
        self._held[entry] = delivery
        return delivery

    async def _block_ms(self, left: float) -> int:
        """How long to block: until the deadline, the next due retry, or the next reclaim scan."""
        block = int(min(left, _RECLAIM_SCAN, self.settings.visibility_timeout / 2) * 1000)
        head = await self.client.zrange(self.settings.delayed, 0, 0, withscores=True)
        if head:
            block = min(block, int(head[0][1]) - _now_ms())
        return max(1, block)

    async def _reclaim(self, limit: int) -> list[Delivery]:
        """Entries whose consumer went silent for longer than the visibility timeout."""
        s = self.settings
        idle = int(s.visibility_timeout * 1000)
        asked = time.monotonic()
        reply = await self.client.xautoclaim(
            s.stream, s.group, self.consumer, min_idle_time=idle, start_id="0-0", count=limit
        )
        out = []
        for eid, fields in reply[1]:
            if not fields:
                continue
            pending = await self.client.xpending_range(s.stream, s.group, min=eid, max=eid, count=1)
            times = pending[0]["times_delivered"] if pending else 1
            out.append(self._hold(eid, fields, times, asked))
        if out:
            log.info("reclaimed %d job(s) from silent consumers", len(out))
        return out

    async def _settle(self, name: str, delivery: Delivery, keys: list[str], *args: Any) -> None:
        """Run a guarded settle script; see ``scripts._HELD``."""
        entry = _entry(delivery)
        s = self.settings
        code = await self._run(
            name, [s.stream, *keys], [s.group, entry.id, self.consumer, entry.times, *args]
        )
        if name == "EXTEND" and code == 0:  # not pending: another consumer settled it
            self._held.pop(entry, None)
            raise DeliveryLostError(
                f"its visibility timeout of {self.settings.visibility_timeout:g}s ran out and "
                "another consumer reclaimed and settled it"
            )
        self._after_settle(entry, code, keep=name == "EXTEND")

    def _after_settle(self, entry: _Entry, code: int, keep: bool = False) -> None:
        """Forget a settled entry; ``code`` -1 (reclaimed since) raises DeliveryLostError."""
        if code == -1:
            self._held.pop(entry, None)
            raise DeliveryLostError(
                f"its visibility timeout of {self.settings.visibility_timeout:g}s ran out and "
                "another consumer reclaimed it"
            )
        if not keep:
            self._held.pop(entry, None)

    async def ack(self, delivery: Delivery) -> None:
        entry = _entry(delivery)
        self._after_settle(entry, await self._acks.submit(entry))

    async def _ack_many(self, calls: Calls[_Entry, int]) -> None:
        """The acks of one pass in one call of the ACK script, each answered its code."""
        s = self.settings
        args: list[Any] = [s.group, self.consumer]
        for entry, _ in calls:
            args += (entry.id, entry.times)
        codes = await self._run("ACK", [s.stream], args)
        for (_, future), code in zip(calls, codes, strict=True):
            answer(future, int(code))

    async def retry(self, delivery: Delivery, delay: float) -> None:
        due = _now_ms() + int(max(0.0, delay) * 1000)
        await self._settle(
            "RETRY", delivery, [self.settings.delayed], due, delivery.attempt, delivery.body
        )

    async def release(self, delivery: Delivery) -> None:
        await self._settle("RELEASE", delivery, [], delivery.attempt - 1, delivery.body)

    async def extend(self, delivery: Delivery) -> None:
        await self._settle("EXTEND", delivery, [])

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        s = self.settings
        await self._settle(
            "DEAD_LETTER",
            delivery,
            [s.dead],
            delivery.body,
            reason,
            delivery.attempt,
            f"{time.time():.3f}",
            s.dead_letter_max_len,
        )

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        return await deadletters.latest(self.client, self.settings.dead, limit)

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        return await deadletters.remove(self.client, self.settings.dead, letters)

    async def queue_stats(self) -> QueueStats:
        """One read-only script, one round trip (``stats.py``). ``ready``: stream entries
        no consumer holds (XLEN - XPENDING, exact: settles XDEL) plus retries already due;
        ``reserved``: the group's pending entries; ``scheduled``: retries and delayed jobs
        not yet due in the delayed set, ``delayed`` of them jobs enqueued for later (their
        due times are kept apart), the rest ``retries``; ``dead_letters``: XLEN of the
        dead stream; ``consumers``: those
        seen within twice the visibility timeout, None before Redis 7.2 (cannot tell)."""
        return await stats.read(self._run, self.settings)

    async def waiting(self, limit: int = 100) -> Sequence[Waiting]:
        """One read-only script: the stream's entries after the group's last delivered
        one, then the delayed set's first members (jobs enqueued for later and retries,
        ``{attempts}\\n{body}`` by due time in ms)."""
        if limit < 1:
            return []
        s = self.settings
        entries, delayed = await self._run("WAITING", [s.stream, s.delayed], [s.group, limit])
        out = []
        for _, flat in entries:
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            attempts = int(fields.get(b"a", b"0"))
            out.append(Waiting(bytes(fields.get(b"b", b"")), attempts + 1, None))
        for member, due_ms in zip(delayed[::2], delayed[1::2], strict=True):
            held, _, body = bytes(member).partition(b"\n")
            out.append(Waiting(body, int(held) + 1, float(due_ms) / 1000))
        return out[:limit]

    # -- the store -------------------------------------------------------------------

    async def _in_pass(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """A script call sent in one pipeline with the others of this pass (one at a
        time on a cluster, whose pipelines split by slot)."""
        if self.settings.cluster:
            return await self._run(name, keys, args)
        self._connected(self._client)
        return await self._pipelined_calls.submit(_Call(name, keys, args))

    async def _run_pipelined(self, calls: Calls[_Call, Any]) -> None:
        """The script calls of one pass in one pipeline; each caller gets its own reply,
        or its own error."""
        if len(calls) == 1:
            ((call, future),) = calls
            answer(future, await self._direct(*call))
            return
        await self._pipelined(calls)


class _Call(NamedTuple):
    name: str  # the script's
    keys: list[str]
    args: list[Any]


def _entry(delivery: Delivery) -> _Entry:
    if not isinstance(delivery.handle, _Entry):
        raise BrokerError("delivery was not received from this Redis broker")
    return delivery.handle


def _now_ms() -> int:
    return int(time.time() * 1000)
