"""Enqueueing on Redis: one ENQUEUE script a job (dedup key and stream entry together);
a batch goes through a pipeline, one round trip per 500 jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis.exceptions import RedisError, ResponseError

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
        if "FRAMEWORK_M_FULL" in str(exc):
            raise BrokerError(
                f"queue {s.queue!r} holds max_len={s.max_len} "
                "jobs: refusing to enqueue more (workers are behind)"
            ) from None
        raise BrokerError(f"redis refused {name.lower()}: {exc}") from None
    except (RedisError, OSError) as exc:
        raise BrokerError(f"redis {name.lower()} failed: {exc}") from None


def enqueue_call(
    s: RedisSettings, message: JobMessage, body: bytes, memos: Sequence[EnqueueMemo] = ()
) -> dict[str, list[Any]]:
    """The ENQUEUE script's keys and arguments for ``message``, creating ``memos`` with it."""
    dedup = message.deduplication_id
    deadline = "" if message.not_after is None else int(message.not_after * 1000)
    due = "" if message.due_ms is None else message.due_ms
    keys = [s.stream, s.dedup_key(dedup) if dedup is not None else s.stream, s.delayed]
    args = [message.id, body, int(s.dedup_window * 1000), s.max_len,
            "1" if dedup else "0", deadline, due]  # fmt: skip
    for memo in memos:
        keys.append(s.memo_key(memo.key))
        args += (memo.value, max(1, round(memo.ttl * 1000)))
    return {"keys": keys, "args": args}


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
            pipe = client.pipeline(transaction=False)
            for i in chunk:
                call = enqueue_call(s, messages[i], bodies[i], memos(messages[i]))
                await script(**call, client=pipe)
            replies = await pipe.execute()
        out += [result(messages[i], reply) for i, reply in zip(chunk, replies, strict=True)]
    return out
