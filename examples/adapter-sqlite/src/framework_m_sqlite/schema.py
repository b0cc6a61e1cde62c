"""SQLite schema sync: the tables every queue shares, and each queue's two windows."""

from __future__ import annotations

import sqlite3

from framework_m_core.ports import SchemaChange, SchemaPlan

from .settings import SqliteSettings

LAYOUT = 1
TABLES = {
    "fm_meta": "queue TEXT NOT NULL, key TEXT NOT NULL, value REAL NOT NULL, "
    "PRIMARY KEY (queue, key)",
    "fm_jobs": "id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body BLOB NOT NULL, "
    "deliveries INTEGER NOT NULL DEFAULT 0, due REAL NOT NULL, token TEXT, until REAL",
    # The UNIQUE constraint that deduplicates: one row per (queue, dedup id) at a time.
    "fm_dedup": "queue TEXT NOT NULL, dedup_id TEXT NOT NULL, job_id TEXT NOT NULL, "
    "expires REAL NOT NULL, UNIQUE (queue, dedup_id)",
    "fm_dead": "id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body BLOB NOT NULL, "
    "reason TEXT NOT NULL, attempts INTEGER NOT NULL, dead_at REAL NOT NULL",
    # The store: a row per record (expires NULL: none), versions drawn from fm_versions.
    "fm_records": "queue TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "version INTEGER NOT NULL, expires REAL, PRIMARY KEY (queue, key)",
    "fm_versions": "queue TEXT NOT NULL PRIMARY KEY, last INTEGER NOT NULL",
}
_SETTINGS = ("layout", "dedup_window", "visibility_timeout")


def stored(db: sqlite3.Connection, queue: str) -> dict[str, float]:
    """The queue's settings as stored (empty before the first sync)."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'fm_meta'").fetchone():
        return {}
    rows = db.execute("SELECT key, value FROM fm_meta WHERE queue = ?", (queue,))
    return {key: float(value) for key, value in rows}


def plan(db: sqlite3.Connection, s: SqliteSettings) -> SchemaPlan:
    have = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    changes = [
        SchemaChange("create", f"table {name}", columns)
        for name, columns in TABLES.items()
        if name not in have
    ]
    meta = stored(db, s.queue)
    target = f"queue {s.queue}"
    if meta.get("layout", LAYOUT) > LAYOUT:
        detail = f"layout {meta['layout']:g} was written by a newer framework-m-sqlite"
        return SchemaPlan((SchemaChange("refuse", target, detail),))
    want = {
        "layout": LAYOUT,
        "dedup_window": s.dedup_window,
        "visibility_timeout": s.visibility_timeout,
    }
    if not meta:
        changes.append(SchemaChange("create", target, f"dedup_window {s.dedup_window:g}s"))
    else:
        changes += [
            SchemaChange("update", target, f"{key} {meta.get(key, 0):g} -> {want[key]:g}")
            for key in _SETTINGS
            if meta.get(key) != want[key]
        ]
    return SchemaPlan(tuple(changes))


def apply(db: sqlite3.Connection, s: SqliteSettings) -> None:
    """Create the tables and write the queue's settings, in one transaction."""
    with db:
        db.execute("BEGIN IMMEDIATE")
        for name, columns in TABLES.items():
            db.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
        db.execute("CREATE INDEX IF NOT EXISTS fm_jobs_ready ON fm_jobs (queue, due, id)")
        want = (LAYOUT, s.dedup_window, s.visibility_timeout)
        db.executemany(
            "INSERT INTO fm_meta (queue, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (queue, key) DO UPDATE SET value = excluded.value",
            [(s.queue, key, value) for key, value in zip(_SETTINGS, want, strict=True)],
        )
