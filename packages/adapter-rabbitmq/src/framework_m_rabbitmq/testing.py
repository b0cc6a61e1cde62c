"""``amqp://`` namespaces for tests and benchmarks: an exchange, queues and policy of their own."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika

from framework_m_core.ports import BrokerError
from framework_m_core.testing.namespaces import Namespace, with_options

from .management import ManagementAPI
from .settings import RETRY_BUCKETS_MS


class RabbitNamespace(Namespace):
    """The topology of queue ``fmtest_<tag>`` on ``server`` (a plain amqp:// URL).

    ``management`` is the API the namespace's URLs name (none: the policy is left out).
    """

    def __init__(self, server: str, tag: str | None = None, management: str | None = None):
        super().__init__(server, tag)
        self.management = management

    def url(self, **options: Any) -> str:
        options.setdefault("management", self.management or "off")
        return with_options(self.server, queue=self.name, **options)

    async def drop(self) -> None:
        """Delete everything of the namespace. Deletions are idempotent, so a drop the
        broker broke off is tried again: RabbitMQ 3.10 can close the connection with
        INTERNAL_ERROR when a quorum queue is deleted while its dead-letter worker is
        still starting, right after a node restart."""
        if self.management is not None:
            await ManagementAPI(self.management, self.server).delete_policy(
                f"framework-m.{self.name}"
            )
        failure: Exception | None = None
        for attempt in range(3):
            if attempt:
                await asyncio.sleep(1.0)
            try:
                await self._drop_once()
                return
            except aio_pika.exceptions.AMQPException as exc:
                failure = exc
        raise BrokerError(f"cannot drop namespace {self.name}: {failure}")

    async def _drop_once(self) -> None:
        connection = await aio_pika.connect(self.server)
        try:
            channel = await connection.channel()
            names = [f"{self.name}.jobs", f"{self.name}.dead"]
            names += [f"{self.name}.retry.{ms}" for ms in RETRY_BUCKETS_MS]
            for name in names:
                await channel.queue_delete(name)
            await channel.exchange_delete(f"{self.name}.dedup")
            await channel.exchange_delete(f"{self.name}.store")  # its records go with it
        finally:
            await connection.close()
