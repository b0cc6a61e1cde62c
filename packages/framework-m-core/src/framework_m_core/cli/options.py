"""What the commands of ``m`` share: argument types, the ``--app``, ``--broker`` and
logging options, exit codes, and the checks of a job and its kwargs."""

from __future__ import annotations

import argparse
import math
import os
import sys
from datetime import UTC, datetime
from typing import Any, TypeAlias

from ..adapters.registry import open_broker
from ..app import App
from ..errors import ConfigurationError
from ..observability import logs
from ..ports.capabilities import Capability
from ..ports.messages import loads_strict
from ..ports.protocols import BrokerProtocol

DEFAULT_BROKER = "memory://"
# Exit codes: 1 a schema conflict, 2 a usage or configuration error, 3 the broker.
EXIT_BROKER = 3

#: What ``add_subparsers()`` returns, to which each command adds its parser.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def env_seconds(name: str) -> float | None:
    """Environment variable ``name`` as seconds; None when it is not set."""
    text = os.environ.get(name)
    if not text:
        return None
    try:
        return seconds(text)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"m: error: {name}: {exc}") from None


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "" or "0"."""
    return os.environ.get(name, "") not in ("", "0")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {text}")
    return value


def instant(text: str) -> datetime:
    """``--at``: an ISO 8601 time with its offset (or Z)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-24T18:00+01:00)"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset or Z: {text!r}")
    return when


def aware_time(text: str) -> float:
    """``--until``, ``--from``, ``--to``: :func:`instant` in unix seconds."""
    return instant(text).timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def app_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--app",
        default=os.environ.get("M_APP"),
        help="the App as module[:attr] (env M_APP; attr defaults to 'app')",
    )


def broker_arg(p: argparse.ArgumentParser, shared: bool = False) -> None:
    if shared:  # memory:// would be gone with this command: no default
        p.add_argument(
            "--broker",
            default=os.environ.get("M_BROKER_URL"),
            help="URL of the shared broker (env M_BROKER_URL; memory:// lives in one "
            "process and cannot be used here)",
        )
        return
    p.add_argument(
        "--broker",
        default=os.environ.get("M_BROKER_URL", DEFAULT_BROKER),
        help=f"broker URL (env M_BROKER_URL; default {DEFAULT_BROKER})",
    )


def logging_args(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Logging options, before or after the subcommand (there they override)."""

    def default(value: str | None) -> str | None:
        return value if top else argparse.SUPPRESS

    p.add_argument(
        "--log-level",
        default=default(os.environ.get("M_LOG_LEVEL", "INFO")),
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL, any case (env M_LOG_LEVEL; default INFO)",
    )
    p.add_argument(
        "--log-format",
        default=default(os.environ.get("M_LOG_FORMAT", "text")),
        help="text, or json: one object per line (env M_LOG_FORMAT; default text)",
    )
    p.add_argument(
        "--log-config",
        default=default(os.environ.get("M_LOG_CONFIG")),
        help="a JSON logging.config.dictConfig file; then nothing else is set up "
        "(env M_LOG_CONFIG)",
    )


# Commands that serve until stopped; the others answer once, and other libraries' records
# below WARNING (a client's INFO about each call) would only clutter the answer.
_SERVING = ("worker", "console")


def configure_logging(args: argparse.Namespace) -> None:
    """After the app is imported: its own logging setup, if it has one, stays. A one-shot
    command shows other libraries' records from WARNING up, unless the level is DEBUG."""
    level = logs.level_name(args.log_level)
    quiet = getattr(args, "command", None) not in _SERVING and level != "DEBUG"
    others = "WARNING" if quiet else None
    logs.configure(level, args.log_format, args.log_config, others=others)


def check_job(app: App, where: str, job: str, kwargs: dict[str, Any]) -> None:
    """Refuse a job ``app`` does not have, or kwargs its handler cannot take."""
    spec = app.jobs.get(job)
    if spec is None:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise ConfigurationError(f"unknown job {job!r} (jobs in {where}: {known})")
    if (problem := spec.kwargs_problem(kwargs)) is not None:
        raise ConfigurationError(f"--kwargs do not fit job {job!r}: {problem}")


def kwargs_of(text: str) -> dict[str, Any]:
    """``--kwargs``: a JSON object."""
    try:
        kwargs = loads_strict(text)
    except ValueError as exc:
        raise ConfigurationError(f"--kwargs is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigurationError("--kwargs is nested too deeply") from None
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    return kwargs


def shared_broker(url: str | None, command: str = "m enqueue") -> BrokerProtocol:
    """The broker of ``url``, which other processes must reach (not memory://)."""
    if not url:
        raise ConfigurationError(
            f"{command} needs a shared broker: pass --broker or set M_BROKER_URL"
        )
    broker = open_broker(url)
    if Capability.CROSS_PROCESS not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} lives inside one process: "
            + (
                "a job enqueued here would be lost when this command exits"
                if command == "m enqueue"
                else f"{command} would see nothing of the workers"
            )
            + "; use a shared broker URL"
        )
    return broker


def confirmed(question: str) -> bool:
    """The user's yes to ``question`` at the terminal; ConfigurationError without one."""
    if not sys.stdin.isatty():
        raise ConfigurationError(f"{question} Not asked without a terminal: add --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
