"""``m sync-schema``: sync the broker's schema with what the code needs."""

from __future__ import annotations

import argparse
import asyncio

from ..adapters.registry import connected, open_broker
from ..errors import ConfigurationError
from ..ports.capabilities import Capability
from .options import Subparsers, broker_arg, configure_logging
from .outbox import outbox_arg, sync_table


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    g = sub.add_parser("sync-schema", help="sync the broker's schema with what the code needs")
    broker_arg(g)
    g.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    outbox_arg(g, "also create the outbox table in this database")
    return g


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_sync_schema(args))


async def _sync_schema(args: argparse.Namespace) -> int:
    configure_logging(args)
    # the outbox's table alone when no broker is named (memory:// has nothing to sync)
    alone = args.outbox_url and args.broker.startswith("memory:")
    code = 0 if alone else await _sync_broker(args)
    if args.outbox_url:
        changes = await sync_table(args.outbox_url, dry_run=args.dry_run)
        for change in changes:
            print(f"outbox: {change}{' (dry run)' if args.dry_run else ''}")
        if not changes:
            print("outbox: the table is in sync")
    return code


async def _sync_broker(args: argparse.Namespace) -> int:
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
