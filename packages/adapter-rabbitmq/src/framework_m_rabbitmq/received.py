"""A job delivery as aiormq hands it over, kept without aio-pika's ``IncomingMessage``.

aio-pika wraps every delivery in an ``IncomingMessage`` (about thirty guarded
attribute writes) and runs the consumer callback in a task of its own, on top of
the task aiormq already makes. The jobs queue is consumed on aiormq's channel
directly; :class:`Received` keeps what the adapter reads of a delivery and acks
it on the channel it came on.
"""

from __future__ import annotations

import time
from typing import Any

from aiormq.abc import AbstractChannel, DeliveredMessage


class Received:
    """One delivery of the jobs queue: its body, the properties the adapter reads, and
    its delivery tag on ``channel``."""

    __slots__ = ("arrived", "body", "channel", "content_type", "delivery_tag", "headers",
                 "message_id", "settled")  # fmt: skip

    def __init__(self, delivered: DeliveredMessage) -> None:
        properties = delivered.header.properties
        self.body: bytes = delivered.body
        self.headers: dict[str, Any] = properties.headers or {}
        self.message_id: str | None = properties.message_id
        self.content_type: str | None = properties.content_type
        self.delivery_tag: int | None = delivered.delivery_tag
        self.channel: AbstractChannel = delivered.channel
        self.settled = False  # acked on its own (a multiple ack is counted by ChannelAcks)
        self.arrived = time.time()  # RabbitMQ had stored it by then (no store time is told)

    @property
    def closed(self) -> bool:
        """Whether the channel it arrived on is closed: it can no longer be acked there."""
        return bool(self.channel.is_closed)

    async def ack(self, multiple: bool = False) -> None:
        """``basic.ack`` of this delivery (with ``multiple``: of every outstanding one up
        to it) on its channel; raises what writing it raised."""
        if self.delivery_tag is None:
            raise ValueError("a delivery without a delivery tag cannot be acked")
        await self.channel.basic_ack(delivery_tag=self.delivery_tag, multiple=multiple)
        self.settled = True
