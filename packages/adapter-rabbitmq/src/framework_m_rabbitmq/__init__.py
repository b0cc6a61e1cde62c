"""RabbitMQ broker adapter of framework-m (``amqp://`` and ``amqps://``)."""

from .broker import RabbitBroker, dedup_job_id

__all__ = ["RabbitBroker", "dedup_job_id"]
