"""``m sync-schema``: sync the broker's schema with what the code needs."""

from __future__ import annotations

import argparse
import asyncio

from ..adapters.registry import connected, open_broker
from ..errors import ConfigurationError
from ..ports.capabilities import Capability
from .options import Subparsers, broker_arg, configure_logging


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    g = sub.add_parser("sync-schema", help="sync the broker's schema with what the code needs")
    broker_arg(g)
    g.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    return g


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_sync_schema(args))


async def _sync_schema(args: argparse.Namespace) -> int:
    configure_logging(args)
    broker = open_broker(args.broker)
    async with connected(broker):
        plan = await broker.plan_schema()
        print(plan.describe())
        if args.dry_run or plan.in_sync:
            return 1 if plan.refused else 0
        if Capability.CROSS_PROCESS not in broker.capabilities:
            raise ConfigurationError(
                f"{broker.display_url} lives inside one process: what this command syncs is "
                "gone when it exits (a worker syncs its own queue at start)"
            )
        await broker.sync_schema()
        print("applied")
    return 0
