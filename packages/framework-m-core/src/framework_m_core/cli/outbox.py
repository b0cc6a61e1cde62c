"""``--outbox-url``: the outbox relay of ``m worker`` and the table of ``m sync-schema``,
from the framework-m-outbox package (core keeps no database driver)."""

from __future__ import annotations

import argparse
import importlib
import os
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError
from ..ports.protocols import BrokerProtocol, RelayProtocol


def outbox_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--outbox-url",
        default=os.environ.get("M_OUTBOX_URL") or None,
        metavar="URL",
        help=f"{what} (a SQLAlchemy URL: postgresql://, mysql://, sqlite:///; env "
        "M_OUTBOX_URL; needs framework-m-outbox)",
    )


def _package() -> ModuleType:
    try:
        return importlib.import_module("framework_m_outbox")
    except ImportError as exc:
        raise ConfigurationError(
            "--outbox-url needs the framework-m-outbox package: pip install "
            f"'./packages/framework-m-outbox[postgresql]' (or [mysql], [sqlite]) ({exc})"
        ) from None


def relay(url: str, broker: BrokerProtocol, **options: Any) -> RelayProtocol:
    """The outbox relay of the table at ``url`` into ``broker``."""
    found: RelayProtocol = _package().OutboxRelay(url, broker, **options)
    return found


async def sync_table(url: str, *, dry_run: bool) -> list[str]:
    """Create the outbox table at ``url`` where it is missing (nothing with ``dry_run``);
    what was (or would be) created."""
    changes: list[str] = await _package().sync_schema(url, dry_run=dry_run)
    return changes
