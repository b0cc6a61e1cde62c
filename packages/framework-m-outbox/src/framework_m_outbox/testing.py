"""For tests of code that writes to the outbox: a scratch database of its own, dropped
after, on a PostgreSQL or MariaDB/MySQL server (or an SQLite file)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

#: The servers the project's own tests use, unless the environment names others.
POSTGRESQL_URL = os.environ.get("M_TEST_POSTGRESQL_URL", "postgresql://postgres@127.0.0.1/test")
MARIADB_URL = os.environ.get("M_TEST_MARIADB_URL", "mysql://root@127.0.0.1/test")


@contextmanager
def scratch_database(kind: str, directory: Path | None = None) -> Iterator[str]:
    """A new, empty database (``kind``: ``postgresql``, ``mariadb`` or ``sqlite``) as a
    SQLAlchemy URL with a sync driver; dropped on exit."""
    name = f"fm_outbox_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        if directory is None:
            raise ValueError("an SQLite scratch database needs a directory")
        path = directory / f"{name}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            path.unlink(missing_ok=True)
        return
    if kind == "postgresql":
        server = sa.make_url(POSTGRESQL_URL).set(drivername="postgresql+psycopg")
        create, drop = f"CREATE DATABASE {name}", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        wait = "SET lock_timeout = '30s'"
    elif kind == "mariadb":
        server = sa.make_url(MARIADB_URL).set(drivername="mysql+pymysql")
        create, drop = f"CREATE DATABASE {name}", f"DROP DATABASE IF EXISTS {name}"
        wait = "SET SESSION lock_wait_timeout = 30"  # a process left holding a lock
    else:
        raise ValueError(f"no scratch database of kind {kind!r}")
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(create))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(wait))
                conn.execute(sa.text(drop))
    finally:
        admin.dispose()
