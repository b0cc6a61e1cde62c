"""The relay's database: its URL read and shown without credentials, and its engine."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from framework_m_core.errors import ConfigurationError

# The relay runs on asyncio: each database's async driver, and the extra that installs it.
_ASYNC_DRIVERS = {
    "postgresql": ("psycopg", ("psycopg", "asyncpg"), "postgresql"),
    "mysql": ("aiomysql", ("aiomysql", "asyncmy"), "mysql"),
    "mariadb": ("aiomysql", ("aiomysql", "asyncmy"), "mysql"),
    "sqlite": ("aiosqlite", ("aiosqlite",), "sqlite"),
}


def parse(url: str) -> sa.URL:
    """``url`` (a SQLAlchemy database URL) with an async driver the relay can use:
    ``postgresql://`` is read as ``postgresql+psycopg://``, ``mysql://`` and
    ``mariadb://`` as ``+aiomysql``, ``sqlite://`` as ``+aiosqlite``; an async driver
    given stays. :class:`~framework_m_core.errors.ConfigurationError` for anything else."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigurationError(
            "--outbox-url is not a database URL (e.g. postgresql://user@host/db, "
            "mysql://user@host/db, sqlite:///path.db)"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigurationError(
            "--outbox-url: an in-memory SQLite database is one process's alone; give a "
            "file (sqlite:///path/app.db)"
        )
    if backend not in _ASYNC_DRIVERS:
        raise ConfigurationError(
            f"--outbox-url: the outbox keeps its table in PostgreSQL, MariaDB/MySQL or "
            f"SQLite, not {backend!r}"
        )
    default, async_drivers, _ = _ASYNC_DRIVERS[backend]
    driver = parsed.get_driver_name()
    if driver not in async_drivers:
        driver = default
    return parsed.set(drivername=f"{backend}+{driver}")


def display(url: sa.URL) -> str:
    """``url`` without its password, for logs and pages."""
    return url.render_as_string(hide_password=True)


def engine(url: sa.URL) -> AsyncEngine:
    """An engine for the relay: a few connections, checked before use (a database that
    restarted costs one failed pass, not one per pooled connection)."""
    backend = url.get_backend_name()
    options: dict[str, Any] = {}
    if backend != "sqlite":
        options = {"pool_size": 2, "max_overflow": 2, "pool_pre_ping": True, "pool_recycle": 1800}
    if backend in ("mysql", "mariadb"):
        # InnoDB's default REPEATABLE READ locks the gaps a locking read scans: the
        # application's inserts into the table would wait on, or deadlock with, a claim.
        options["isolation_level"] = "READ COMMITTED"
    try:
        return create_async_engine(url, **options)
    except ImportError as exc:
        extra = _ASYNC_DRIVERS[backend][2]
        raise ConfigurationError(
            f"--outbox-url {display(url)} needs the {url.get_driver_name()} driver: "
            f"pip install './packages/framework-m-outbox[{extra}]' ({exc})"
        ) from None


async def sync_schema(url: str, *, dry_run: bool = False) -> list[str]:
    """Create the outbox table in the database at ``url`` where it is missing (``m
    sync-schema --outbox-url``); what was created, or with ``dry_run`` what would be."""
    from . import table

    parsed = parse(url)
    db = engine(parsed)
    try:
        async with db.connect() as conn:
            if dry_run:
                return [f"create {what}" for what in await table.missing(conn)]
            return await table.sync(conn)
    finally:
        await db.dispose()
