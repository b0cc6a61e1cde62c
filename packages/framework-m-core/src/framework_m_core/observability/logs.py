"""Logging that fits an application: job fields on records, JSON lines, the app's own setup.

Records about a job carry ``job``, ``job_id``, ``attempt`` and, for ticked jobs,
``slot`` (unix seconds) as attributes: :class:`JsonFormatter` writes them as keys,
and any formatter or filter of the application can read them.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
JOB_FIELDS = ("job", "job_id", "attempt", "slot")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JobLogAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger whose records carry one job's fields (``ctx.log``)."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def job_logger(
    logger: logging.Logger, job: str, job_id: str, attempt: int, slot: int | None
) -> JobLogAdapter:
    fields: Mapping[str, object] = {"job": job, "job_id": job_id, "attempt": attempt}
    if slot is not None:
        fields = {**fields, "slot": slot}
    return JobLogAdapter(logger, fields)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job fields where the
    record has them, and ``exc`` with the traceback of ``exc_info``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in JOB_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


REPEATS_EVERY = 5.0  # seconds between two records of one template, while it repeats


class Quiet:
    """The level of a repeated warning: WARNING at most once every ``every`` seconds,
    DEBUG between, so a broker that stays unreachable is said once a minute, not per job."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._warned_at = -every

    def level(self) -> int:
        now = time.monotonic()
        if now - self._warned_at < self.every:
            return logging.DEBUG
        self._warned_at = now
        return logging.WARNING


class Repeats(logging.Filter):
    """Lets one WARNING or ERROR record of a template through every ``every`` seconds
    from framework-m's loggers, job outcomes (``framework_m.job``) aside: an outage
    makes the ticker, the consumer and the adapters say the same thing many times a
    second. The next record let through says how many were held back."""

    def __init__(
        self, every: float = REPEATS_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.every = every
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # first let through, held

    def filter(self, record: logging.LogRecord) -> bool:
        if not logging.WARNING <= record.levelno < logging.CRITICAL:
            return True
        if not record.name.startswith("framework_m.") or record.name == "framework_m.job":
            return True
        key, now = (record.name, str(record.msg)), self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.every:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        self._seen[key] = (now, 0)
        if seen is not None and seen[1]:
            record.msg = (
                f"{record.msg} ({seen[1]} more like it in the last {now - seen[0]:.0f}s not logged)"
            )
        return True


class OthersFrom(logging.Filter):
    """Lets a record of a logger outside framework-m's through from ``level`` up only: a
    one-shot command prints its answer, not a client library's INFO about its calls."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name == "framework_m" or record.name.startswith("framework_m.")
        return own or record.levelno >= self.level


def level_name(text: str) -> str:
    """A log level in any case; ConfigurationError naming the choices otherwise."""
    name = text.strip().upper()
    if name not in LEVELS:
        raise ConfigurationError(
            f"log level must be one of {', '.join(LEVELS)} (any case), got {text!r}"
        )
    return name


def configure(
    level: str, fmt: str = "text", config_file: str | None = None, *, others: str | None = None
) -> None:
    """Set up logging for ``m``, after the app was imported.

    With ``config_file`` (JSON for :func:`logging.config.dictConfig`) that is all. When
    the app configured logging itself (the root logger has handlers) its setup stays
    and only framework-m's loggers get ``level``. Otherwise one stderr handler in
    ``fmt`` (``text`` or ``json``), which holds back repeated warnings (:class:`Repeats`)
    and, with ``others`` (a level name), lets other loggers' records through from
    ``others`` or ``level``, whichever is higher (:class:`OthersFrom`).
    """
    if fmt not in FORMATS:
        raise ConfigurationError(f"log format must be text or json, got {fmt!r}")
    if config_file:
        try:
            config = json.loads(Path(config_file).read_text())
            if isinstance(config, dict):  # framework-m's loggers exist by now: keep them
                config.setdefault("disable_existing_loggers", False)
            logging.config.dictConfig(config)
        except (OSError, ValueError, TypeError, AttributeError, ImportError) as exc:
            raise ConfigurationError(f"cannot use --log-config {config_file}: {exc}") from None
        return
    root = logging.getLogger()
    if root.handlers:
        logging.getLogger("framework_m").setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(Repeats())
    if others is not None:
        levels = logging.getLevelNamesMapping()
        handler.addFilter(OthersFrom(max(levels[others], levels[level])))
    root.addHandler(handler)
    root.setLevel(level)
