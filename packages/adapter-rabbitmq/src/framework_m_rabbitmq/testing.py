"""``amqp://`` namespaces for tests and benchmarks: an exchange, queues and policy of their own."""

from __future__ import annotations

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
        if self.management is not None:
            await ManagementAPI(self.management, self.server).delete_policy(
                f"framework-m.{self.name}"
            )
        connection = await aio_pika.connect(self.server)
        try:
            channel = await connection.channel()
            names = [f"{self.name}.jobs", f"{self.name}.dead"]
            names += [f"{self.name}.retry.{ms}" for ms in RETRY_BUCKETS_MS]
            for name in names:
                await channel.queue_delete(name)
            await channel.exchange_delete(f"{self.name}.dedup")
        except aio_pika.exceptions.AMQPException as exc:
            raise BrokerError(f"cannot drop namespace {self.name}: {exc}") from None
        finally:
            await connection.close()
