"""Helpers for tests that run framework-m against a real RabbitMQ."""

from __future__ import annotations

import aio_pika

from framework_m_core.errors import BrokerError

from .broker import _RETRY_BUCKETS_MS
from .management import ManagementAPI


def isolated_url(server: str, tag: str, **options: object) -> str:
    """A URL whose exchange and queues belong to one test (``tag``)."""
    opts = {"queue": f"fmtest_{tag}", **options}
    return server + "?" + "&".join(f"{k}={v}" for k, v in opts.items())


async def delete_topology(server: str, tag: str, management: str | None = None) -> None:
    """Delete the exchange, every queue and the policy of :func:`isolated_url`'s ``tag``."""
    queue = f"fmtest_{tag}"
    api = ManagementAPI(management or ManagementAPI.default_url(server), server)
    try:
        await api.delete_policy(f"framework-m.{queue}")
    except BrokerError:
        if management is not None:
            raise  # a broker without the management API has no policies to delete
    connection = await aio_pika.connect(server)
    try:
        channel = await connection.channel()
        names = [f"{queue}.jobs", f"{queue}.dead"]
        names += [f"{queue}.retry.{ms}" for ms in _RETRY_BUCKETS_MS]
        for name in names:
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dedup")
    finally:
        await connection.close()
