"""What framework-m puts in AMQP messages and headers, and what it reads back from them."""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from framework_m_core.ports import DeadLetter, Delivery, JobMessage
from framework_m_core.ports.messages import SNOOZES, derived_job_id

DEDUP_HEADER = "x-deduplication-header"
ATTEMPTS_HEADER = "x-fm-attempts"  # attempts before this copy (retries republish)
NOT_AFTER_HEADER = "x-fm-not-after"  # unix ms: the exchange stores it no later
NOT_BEFORE_HEADER = "x-fm-not-before"  # unix ms: a delayed job waits until then
REASON_HEADER = "x-fm-reason"
DEAD_AT_HEADER = "x-fm-dead-at"
# Longest reason header, in bytes: a header frame must fit in frame_max (>= 4 KiB).
REASON_BYTES = 2048

#: The job id of a job enqueued with a deduplication id (the same on every replica).
dedup_job_id = derived_job_id


def with_derived_id(message: JobMessage) -> JobMessage:
    """``message`` with the job id its deduplication id gives (RabbitMQ does not say which
    message it kept, so every replica must name the job alike); a snoozed job's copy
    keeps the id it has."""
    if message.deduplication_id is None or SNOOZES in message.meta:
        return message
    return dataclasses.replace(message, id=dedup_job_id(message.deduplication_id))


def job(message: JobMessage, body: bytes) -> aio_pika.Message:
    """A persistent job message; the exchange drops it when its dedup header was seen,
    or when it arrives after its ``not_after``."""
    headers: dict[str, Any] = {}
    if message.deduplication_id is not None:
        headers[DEDUP_HEADER] = message.deduplication_id
    if message.not_after is not None:
        headers[NOT_AFTER_HEADER] = int(message.not_after * 1000)
    if message.due_ms is not None:
        headers[NOT_BEFORE_HEADER] = message.due_ms
    return aio_pika.Message(
        body,
        headers=headers,
        message_id=message.id,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        content_type="application/json",
    )


def retry_copy(delivery: Delivery, message_id: str | None) -> aio_pika.Message:
    """The copy a retry waits in a retry queue as, counting the attempts so far."""
    return aio_pika.Message(
        delivery.body,
        headers={ATTEMPTS_HEADER: delivery.attempt},
        message_id=message_id,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


def released_copy(delivery: Delivery) -> aio_pika.Message:
    """The copy a released delivery goes back as: the same attempt when delivered again."""
    return aio_pika.Message(
        delivery.body,
        headers={ATTEMPTS_HEADER: delivery.attempt - 1},
        message_id=uuid.uuid4().hex,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


def dead_copy(delivery: Delivery, reason: str) -> aio_pika.Message:
    return aio_pika.Message(
        delivery.body,
        headers={
            REASON_HEADER: bounded_reason(reason),
            ATTEMPTS_HEADER: delivery.attempt,
            DEAD_AT_HEADER: f"{time.time():.3f}",
        },
        message_id=uuid.uuid4().hex,  # names it for removal
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


def attempt(headers: Mapping[str, object]) -> int:
    """Attempts before the copy (a retry's header) plus the quorum queue's redeliveries,
    from a delivery's headers.

    A count that is not a whole number from 0 to a billion (a publisher wrote it) is
    taken as 0, so hostile headers neither break a batch nor grant extra attempts.
    """
    return _count(headers.get(ATTEMPTS_HEADER)) + _count(headers.get("x-delivery-count")) + 1


def dead_letter(msg: AbstractIncomingMessage, delivery_limit: int) -> DeadLetter:
    """A message of the dead queue: put there by a worker, or by the queue's delivery limit
    (after ``delivery_limit`` returns, so one delivery more than that)."""
    headers = msg.headers or {}
    if REASON_HEADER in headers:
        return DeadLetter(
            body=msg.body,
            reason=str(headers[REASON_HEADER]),
            attempts=_count(headers.get(ATTEMPTS_HEADER)),
            dead_lettered_at=_float(headers.get(DEAD_AT_HEADER)),
            ref=msg.message_id,
        )
    deaths = headers.get("x-death")
    death: dict[str, Any] = deaths[0] if isinstance(deaths, list) and deaths else {}  # type: ignore[assignment]
    why = str(death.get("reason", "unknown"))
    before = _count(headers.get(ATTEMPTS_HEADER))
    if why == "delivery_limit":
        reason = (
            "RabbitMQ dead-lettered it: returned to the queue more often than its "
            "delivery-limit without an outcome (did the job kill its worker?)"
        )
        attempts = before + delivery_limit + 1
    else:
        reason, attempts = f"RabbitMQ dead-lettered it: {why}", before
    at = death.get("time")
    return DeadLetter(
        body=msg.body,
        reason=reason,
        attempts=attempts,
        dead_lettered_at=at.timestamp() if isinstance(at, datetime) else 0.0,
        ref=msg.message_id,
    )


def _count(value: object) -> int:
    """A count header: a whole number from 0 to a billion, else 0."""
    if isinstance(value, bytes | str) and 0 < len(value) <= 9 and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9:
        return value
    return 0


def _float(value: object) -> float:
    try:
        number = float(value) if isinstance(value, int | float | str | bytes) else 0.0
    except (ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def bounded_reason(reason: str) -> str:
    """``reason`` cut to REASON_BYTES of UTF-8: AMQP headers must fit in one frame."""
    if len(reason) * 4 <= REASON_BYTES:
        return reason
    return reason.encode()[:REASON_BYTES].decode(errors="ignore")
