"""RabbitMQ broker adapter of framework-m (not implemented yet)."""
