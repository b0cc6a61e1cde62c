"""``sqlite://`` URL parsing: the database file, the queue's name, its two windows."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from framework_m_core.ports import ConfigurationError, query_params, redact_url

_QUEUE = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


@dataclass(frozen=True, slots=True)
class SqliteSettings:
    """Everything a ``sqlite:///path/jobs.db?queue=...`` URL says."""

    path: Path
    display_url: str
    queue: str = "framework_m"
    dedup_window: float = 120.0
    visibility_timeout: float = 30.0


def parse_url(url: str) -> SqliteSettings:
    """Parse and validate; raise :class:`ConfigurationError` naming the problem."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigurationError(f"not a sqlite:// URL: {shown!r}")
    if parts.netloc:
        raise ConfigurationError(f"sqlite:// URLs name a local file: sqlite:///path, got {shown!r}")
    path = Path(unquote(parts.path))
    if not path.is_absolute() or not path.parent.is_dir():
        raise ConfigurationError(f"the database's folder must exist, in {shown!r}")
    opts = query_params(url, {"queue": str, "dedup_window": float, "visibility_timeout": float})
    settings = SqliteSettings(path, shown, **opts)  # type: ignore[arg-type]
    if not _QUEUE.fullmatch(settings.queue):
        raise ConfigurationError(f"queue must be letters, digits, '_', '.', ':' or '-' ({shown!r})")
    for label in ("dedup_window", "visibility_timeout"):
        value = getattr(settings, label)
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"{label} must be > 0 seconds, got {value!r} ({shown!r})")
    return settings
