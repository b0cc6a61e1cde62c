"""The outbox table: its layout, and creating or checking it in a database.

One row is one job waiting to be published::

    id              the row's id: 32 random hex digits
    job_id          the id the job has on the broker (from its deduplication id)
    job_name        the job's name, for operators reading the table
    body            the job message, JSON, exactly as the relay publishes it
    created_at      unix seconds, by the writer's clock
    next_try_at     unix seconds, by a relay's clock: not published before (0 when
                    written: due at once, whatever the writer's clock says)
    claimed_until   unix seconds: a relay publishes it until then; 0 when unclaimed
    first_tried_at  unix seconds of the first publish, by the relay's clock (or NULL)
    attempts        publishes that failed
    last_error      why the latest one failed

Rows are deleted once the broker answered their publish. On PostgreSQL a statement
trigger notifies channel ``framework_m_outbox`` on insert, so relays listening wake at
the commit.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.asyncio import AsyncConnection

from framework_m_core.errors import SchemaMissingError

log = logging.getLogger("framework_m.outbox")

TABLE_NAME = "framework_m_outbox"
NOTIFY_CHANNEL = "framework_m_outbox"
#: The longest ``last_error`` kept, in characters.
ERROR_LENGTH = 1000

metadata = sa.MetaData()

outbox = sa.Table(
    TABLE_NAME,
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("job_id", sa.String(32), nullable=False),
    sa.Column("job_name", sa.String(200), nullable=False),
    # MariaDB's TEXT holds 64 KiB; a job may be 1 MiB.
    sa.Column(
        "body", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=False
    ),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("next_try_at", sa.Double(), nullable=False),
    sa.Column("claimed_until", sa.Double(), nullable=False, server_default="0"),
    sa.Column("first_tried_at", sa.Double(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_error", sa.String(ERROR_LENGTH), nullable=True),
    sa.Index(f"{TABLE_NAME}_due", "next_try_at", "created_at"),
)

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TABLE_NAME}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{NOTIFY_CHANNEL}', '');
    RETURN NULL;
END $$
"""
_PG_TRIGGER = f"""
CREATE OR REPLACE TRIGGER {TABLE_NAME}_notify AFTER INSERT ON {TABLE_NAME}
FOR EACH STATEMENT EXECUTE FUNCTION {TABLE_NAME}_notify()
"""


def ddl(dialect: sa.Dialect) -> list[str]:
    """The statements that create the table (and on PostgreSQL its trigger), for a
    migration of one's own."""
    out = [
        str(sa.schema.CreateTable(outbox, if_not_exists=True).compile(dialect=dialect)).strip(),
        *(
            str(sa.schema.CreateIndex(index, if_not_exists=True).compile(dialect=dialect))
            for index in sorted(outbox.indexes, key=lambda i: str(i.name))
        ),
    ]
    if dialect.name == "postgresql":
        out += [_PG_FUNCTION.strip(), _PG_TRIGGER.strip()]
    return out


async def missing(conn: AsyncConnection) -> list[str]:
    """What of the table is not in the database: ``[]`` when it is there as needed."""
    columns = await conn.run_sync(_columns)
    if columns is None:
        return [f"table {TABLE_NAME}"]
    out = [f"column {TABLE_NAME}.{c.name}" for c in outbox.columns if c.name not in columns]
    if conn.dialect.name == "postgresql":
        found = await conn.execute(
            sa.text("SELECT 1 FROM pg_trigger WHERE tgname = :name"),
            {"name": f"{TABLE_NAME}_notify"},
        )
        if found.first() is None:
            out.append(f"trigger {TABLE_NAME}_notify")
    return out


def _columns(conn: sa.Connection) -> set[str] | None:
    inspector = sa.inspect(conn)
    if not inspector.has_table(TABLE_NAME):
        return None
    return {c["name"] for c in inspector.get_columns(TABLE_NAME)}


async def sync(conn: AsyncConnection) -> list[str]:
    """Create what is missing of the table in ``conn``'s database (committed); return
    what was created. Replicas syncing at once all succeed."""
    needed = await missing(conn)
    await conn.rollback()
    if not needed:
        return []
    columns = [n for n in needed if n.startswith("column ")]
    if columns:
        raise SchemaMissingError(
            f"{TABLE_NAME} lacks {', '.join(columns)}: it was made by another version; "
            "migrate it to the layout in the docs (framework_m_outbox.table)"
        )
    for attempt in range(3):
        try:
            for statement in ddl(conn.dialect):
                await conn.execute(sa.text(statement))
            await conn.commit()
            return [f"created {what}" for what in needed]
        except sa.exc.DBAPIError:
            await conn.rollback()
            if not await missing(conn):
                return []  # another replica created it in the same instant
            await conn.rollback()
            if attempt == 2:
                raise
    return []


async def check(conn: AsyncConnection) -> None:
    """Raise :class:`~framework_m_core.errors.SchemaMissingError` unless the table is
    there as needed."""
    needed = await missing(conn)
    await conn.rollback()
    if needed:
        raise SchemaMissingError(
            f"the outbox database lacks {', '.join(needed)}: run "
            "`m sync-schema --outbox-url URL` (or create it from the docs' layout)"
        )
