"""``memory://`` URL parsing: the queue's name, its dedup window and visibility timeout."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ...ports import (
    DEFAULT_MAX_JOB_SIZE,
    ConfigurationError,
    max_job_size,
    query_params,
    redact_url,
)

DEFAULT_DEDUP_WINDOW = 120.0
DEFAULT_VISIBILITY_TIMEOUT = 30.0
MOST_JOB_SIZE = 512 << 20  # as much as Redis takes: code tried here runs there next

_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Everything a ``memory://[name][?dedup_window=S&visibility_timeout=S&max_job_size=B]``
    URL says."""

    name: str = "default"
    dedup_window: float = DEFAULT_DEDUP_WINDOW
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    max_job_size: int = DEFAULT_MAX_JOB_SIZE

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"memory:// queue name must be 1-200 letters, digits, '_', '.', ':', '/' or '-', "
                f"got {self.name!r}"
            )
        for label in ("dedup_window", "visibility_timeout"):
            value = getattr(self, label)
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"memory:// {label} must be > 0 seconds, got {value!r}")
        max_job_size(self.max_job_size, MOST_JOB_SIZE, self.display_url)

    @property
    def display_url(self) -> str:
        return f"memory://{self.name}"


def parse_url(url: str) -> MemorySettings:
    """Parse and validate; raise :class:`ConfigurationError` naming the problem."""
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise ConfigurationError(f"not a memory:// URL: {redact_url(url)!r}")
    name = (parts.netloc + parts.path).strip("/") or "default"
    kinds = {"dedup_window": float, "visibility_timeout": float, "max_job_size": int}
    opts = query_params(url, kinds)
    return MemorySettings(name, **opts)  # type: ignore[arg-type]
