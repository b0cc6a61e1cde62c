"""RabbitMQ broker adapter of framework-m (``amqp://`` and ``amqps://``)."""

from .broker import RabbitBroker, dedup_job_id
from .settings import RabbitSettings

__all__ = ["RabbitBroker", "RabbitSettings", "dedup_job_id"]
