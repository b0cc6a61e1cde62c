"""RabbitMQ broker adapter of framework-m (``amqp://`` and ``amqps://``)."""

try:
    import framework_m_core.about  # noqa: F401  (framework-m's core has it)
except ImportError as exc:  # none, or the package index's framework-m-core: another project
    raise ImportError(
        f"{__name__} needs framework-m's framework-m-core (>=0.1,<0.2), and the "
        "framework_m_core found is another distribution's (the package index's "
        "framework-m-core belongs to another project): install core from a checkout "
        "of framework-m's repository, as its README says: pip install ./packages/framework-m-core"
    ) from exc

from .broker import RabbitBroker
from .settings import RabbitSettings, parse_url
from .wire import dedup_job_id

__version__ = "0.1.0"

__all__ = ["RabbitBroker", "RabbitSettings", "dedup_job_id", "parse_url"]
