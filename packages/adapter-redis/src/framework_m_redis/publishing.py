"""Enqueueing on Redis: one ENQUEUE script a job (dedup key and stream entry together);
a batch goes through a pipeline, one round trip per 500 jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis.exceptions import RedisError, ResponseError

from framework_m_core.control import keys as control_keys
from framework_m_core.ports import BrokerError, EnqueueMemo, JobMessage, PublishResult

from .schema import text
from .settings import RedisSettings

_PIPELINE_BATCH = 500


@contextlib.contextmanager
def redis_errors(name: str, s: RedisSettings) -> Iterator[None]:
    """Redis's errors as BrokerError, naming the call (and a full queue as such)."""
    try:
        yield
    except ResponseError as exc:
        raise refused(name, exc, s) from None
    except (RedisError, OSError) as exc:
        raise BrokerError(f"redis {name.lower()} failed: {exc}") from None


def refused(name: str, error: Exception, s: RedisSettings) -> BrokerError:
    """Redis's refusal of the call ``name`` (a full queue said as such)."""
    if "FRAMEWORK_M_FULL" in str(error):
        return BrokerError(
            f"queue {s.queue!r} holds max_len={s.max_len} "
            "jobs: refusing to enqueue more (workers are behind)"
        )
    return BrokerError(f"redis refused {name.lower()}: {error}")


def enqueue_call(
    s: RedisSettings, message: JobMessage, body: bytes, memos: Sequence[EnqueueMemo] = ()
) -> dict[str, list[Any]]:
    """The ENQUEUE script's keys and arguments for ``message``, creating ``memos`` with it."""
    dedup = message.deduplication_id
    deadline = "" if message.not_after is None else int(message.not_after * 1000)
    due = "" if message.due_ms is None else message.due_ms
    keys = [s.stream, s.dedup_key(dedup) if dedup is not None else s.stream, s.delayed, s.later]
    # "2": a duplicate touches its dedup key, so that a WAIT after it covers the original
    deduplicated = ("2" if s.replicas_to_wait_for else "1") if dedup else "0"
    args = [message.id, body, int(s.dedup_window * 1000), s.max_len,
            deduplicated, deadline, due]  # fmt: skip
    keys.append(s.versions)
    args.append(s.changes)
    for memo in memos:
        keys.append(s.record_key(control_keys.memo(memo.key)))
        args += (memo.value, max(1, round(memo.ttl * 1000)))
    return {"keys": keys, "args": args}


async def replicated(
    pipe: Any, s: RedisSettings, *, raise_on_error: bool = True, **route: Any
) -> list[Any]:
    """Run ``pipe`` with a ``WAIT`` for ``s``'s replicas after it, on its one
    connection (``route``: a cluster pipeline's ``target_nodes``): its replies, then how
    many replicas have every write made so far."""
    wait_ms = max(1, round(s.wait_timeout * 1000))
    pipe.execute_command("WAIT", s.replicas_to_wait_for, wait_ms, **route)
    return list(await pipe.execute(raise_on_error=raise_on_error))


def check_copies(name: str, copies: Any, s: RedisSettings) -> None:
    """Raise when fewer replicas than ``wait_replicas`` acknowledged a write in time: the
    primary has it, but a failover now could lose it, so it does not count as done."""
    if isinstance(copies, Exception):
        raise BrokerError(f"redis {name.lower()}: its WAIT failed: {copies}")
    if int(copies) < s.replicas_to_wait_for:
        raise BrokerError(
            f"redis {name.lower()}: written on the primary but copied to {int(copies)} of "
            f"{s.replicas_to_wait_for} replica(s) within wait_timeout={s.wait_timeout:g}s "
            "(are that many replicas in sync?); a failover could lose it, so it is not "
            "counted as done"
        )


def result(message: JobMessage, reply: Sequence[Any]) -> PublishResult:
    """What the ENQUEUE script answered: stored (1), a duplicate (0), or past the deadline."""
    stored, job_id = reply
    if stored == 2:
        raise BrokerError(
            f"{message.job_name}: Redis refused it, past its not_after deadline "
            f"({message.not_after:.3f})"
        )
    return PublishResult(text(job_id), duplicate=not stored)


async def publish_many(
    client: Any,
    script: Any,
    s: RedisSettings,
    messages: Sequence[JobMessage],
    bodies: Sequence[bytes],
    memos: Callable[[JobMessage], Sequence[EnqueueMemo]],
) -> list[PublishResult]:
    """ENQUEUE each message through pipelines, in order (a duplicate of an earlier job of
    the batch sees it stored)."""
    out: list[PublishResult] = []
    for start in range(0, len(messages), _PIPELINE_BATCH):
        chunk = range(start, min(start + _PIPELINE_BATCH, len(messages)))
        with redis_errors("ENQUEUE", s):
            async with client.pipeline(transaction=False) as pipe:
                for i in chunk:
                    call = enqueue_call(s, messages[i], bodies[i], memos(messages[i]))
                    await script(**call, client=pipe)
                if s.replicas_to_wait_for:
                    *replies, copies = await replicated(pipe, s)
                else:
                    replies = await pipe.execute()
            if s.replicas_to_wait_for:
                check_copies("ENQUEUE", copies, s)
        out += [result(messages[i], reply) for i, reply in zip(chunk, replies, strict=True)]
    return out
