"""Enqueue framework-m jobs in the application's own database transaction.

``Outbox(session_or_connection)`` is a job queue that writes each job as a row in the
caller's transaction (:mod:`.outbox`); every ``m worker --outbox-url URL`` replica runs
an :class:`OutboxRelay` that publishes committed rows with the broker's deduplication
and deletes them (:mod:`.relay`). The table's layout is in :mod:`.table`.
"""

try:
    import framework_m_core.about  # noqa: F401  (framework-m's core has it)
except ImportError as exc:  # none, or the package index's framework-m-core: another project
    raise ImportError(
        f"{__name__} needs framework-m's framework-m-core (>=0.1,<0.2), and the "
        "framework_m_core found is another distribution's (the package index's "
        "framework-m-core belongs to another project): install core from a checkout "
        "of framework-m's repository, as its README says: pip install ./packages/framework-m-core"
    ) from exc

from .database import sync_schema
from .outbox import Outbox, outbox_deduplication_id
from .relay import OutboxRelay
from .table import TABLE_NAME, ddl

__version__ = "0.1.0"

__all__ = [
    "TABLE_NAME",
    "Outbox",
    "OutboxRelay",
    "ddl",
    "outbox_deduplication_id",
    "sync_schema",
]
