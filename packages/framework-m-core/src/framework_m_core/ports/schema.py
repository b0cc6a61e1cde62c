"""Schema plans: what schema sync found and what it would change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["create", "update", "refuse"]


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One difference between the broker and the desired layout."""

    action: Action
    target: str  # e.g. "stream framework_m_jobs"
    detail: str  # e.g. "duplicate_window 30s -> 120s", or the reason and manual steps
    #: What the adapter needs to carry the change out (its own type); not shown.
    step: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.action} {self.target}: {self.detail}"


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """Every difference found; empty when the broker already matches."""

    changes: tuple[SchemaChange, ...] = ()
    #: Settings found on the broker that schema sync leaves alone but an operator must
    #: know of (a cap that can drop jobs); they do not make the plan out of sync.
    warnings: tuple[str, ...] = ()

    @property
    def in_sync(self) -> bool:
        return not self.changes

    @property
    def refused(self) -> tuple[SchemaChange, ...]:
        return tuple(c for c in self.changes if c.action == "refuse")

    def describe(self) -> str:
        lines = [str(c) for c in self.changes] or ["schema in sync: nothing to do"]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


class SchemaRaceError(Exception):
    """Raised by an adapter's schema step when another replica changed the schema at the
    same moment (e.g. created the stream first): schema sync plans again."""
