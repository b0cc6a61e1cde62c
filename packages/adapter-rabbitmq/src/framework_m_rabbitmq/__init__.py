"""RabbitMQ broker adapter of framework-m (``amqp://`` and ``amqps://``)."""

from .broker import RabbitBroker
from .settings import RabbitSettings, parse_url
from .wire import dedup_job_id

__all__ = ["RabbitBroker", "RabbitSettings", "dedup_job_id", "parse_url"]
