"""framework-m as a backend of Django's tasks (``django.tasks``): tasks enqueued with
``.enqueue()`` run on ``m worker`` replicas over NATS, Redis or RabbitMQ, and
``@periodic`` tasks run once per slot, leaderless.

Settings::

    TASKS = {
        "default": {
            "BACKEND": "framework_m_django.TaskBackend",
            "OPTIONS": {"broker_url": "redis://127.0.0.1:6379/0"},
        }
    }

Workers: ``DJANGO_SETTINGS_MODULE=mysite.settings m worker --broker ...`` (no ``--app``).
"""

from .backend import TaskBackend
from .periodic import periodic
from .registry import FrameworkMTask

__version__ = "0.1.0"

__all__ = ["FrameworkMTask", "TaskBackend", "__version__", "periodic"]
