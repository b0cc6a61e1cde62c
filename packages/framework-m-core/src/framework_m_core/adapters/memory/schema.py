"""``memory://`` schema sync: the named queue, with its dedup window and visibility timeout."""

from __future__ import annotations

from ...ports import SchemaChange, SchemaPlan
from . import server
from .settings import MemorySettings


def plan(s: MemorySettings) -> SchemaPlan:
    """What differs between the in-process queue and ``s``; both settings change in place."""
    target = f"queue {s.display_url}"
    queue = server.find(s.name)
    if queue is None:
        detail = (
            f"in-process queue, dedup_window {s.dedup_window:g}s, "
            f"visibility_timeout {s.visibility_timeout:g}s"
        )
        return SchemaPlan((SchemaChange("create", target, detail),))
    have = {"dedup_window": queue.dedup_window, "visibility_timeout": queue.visibility_timeout}
    want = {"dedup_window": s.dedup_window, "visibility_timeout": s.visibility_timeout}
    return SchemaPlan(
        tuple(
            SchemaChange("update", target, f"{key} {have[key]:g}s -> {want[key]:g}s")
            for key in want
            if have[key] != want[key]
        )
    )


def apply(s: MemorySettings) -> None:
    server.create(s.name, s.dedup_window, s.visibility_timeout)
