"""The operator's commands: ``m status`` and ``m dead-letters list|requeue|purge``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ..adapters.registry import connected, open_broker
from ..app import App, load_app
from ..errors import BrokerError, ConfigurationError
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from ..ports.records import QueueStats
from ..runtime import leases
from ..tracking.deadletters import described, fresh

log = logging.getLogger("framework_m.cli")

_UNKNOWN = "-"  # a count the broker does not tell


async def status(args: argparse.Namespace) -> int:
    """``m status``: per queue, its counts, windows and whether its schema is in sync."""
    app = load_app(args.app) if getattr(args, "app", None) else None
    reports = []
    for url in args.broker:
        broker = open_broker(url)
        async with connected(broker):
            plan = await broker.plan_schema()
            try:
                stats = await broker.queue_stats()
            except BrokerError:
                if plan.in_sync:
                    raise
                stats = QueueStats()  # what is missing holds nothing to count
            reports.append(
                {
                    "queue": broker.display_url,
                    "node": getattr(broker, "node", None),
                    **dataclasses.asdict(stats),
                    "dedup_window": broker.dedup_window,
                    "visibility_timeout": broker.visibility_timeout,
                    "schema_in_sync": plan.in_sync,
                    "schema_changes": [str(change) for change in plan.changes],
                    **({} if app is None else {"running": await _running(app, broker)}),
                }
            )
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
        return 0
    for report in reports:
        _print_status(report)
    return 0


async def _running(app: App, broker: BrokerProtocol) -> dict[str, list[str]]:
    """Per job with an overlap policy or a limit, the holders of its leases: the runs
    going on now, ``job id@host:pid`` (a limit per key value is not listed)."""
    if Capability.LEASES not in broker.capabilities:
        return {}
    out: dict[str, list[str]] = {}
    for spec in app.jobs.values():
        found: list[str] = []
        if spec.schedule is not None and spec.overlap != "allow":
            found += await broker.lease_holders(leases.overlap_key(spec.name))
        if spec.concurrency is not None and spec.concurrency_key is None:
            key = leases.concurrency_key(spec, {})
            found += await broker.lease_holders(key, limit=spec.concurrency)
        if spec.leased:
            out[spec.name] = sorted(set(found))
    return out


def _print_status(r: dict[str, Any]) -> None:
    def count(key: str) -> str:
        return _UNKNOWN if r[key] is None else f"{r[key]:,}"

    changes = r["schema_changes"]
    schema = (
        "in sync"
        if r["schema_in_sync"]
        else f"differs: run m sync-schema ({len(changes)} change(s))"
    )
    rows = [
        ("queue", r["queue"]),
        *([("node", r["node"])] if r["node"] else []),
        ("ready", count("ready")),
        ("reserved", count("reserved") + ("" if r["scheduled"] is not None else " (with retries)")),
        ("retry-scheduled", count("scheduled")),
        ("dead letters", count("dead_letters")),
        ("consumers", count("consumers")),
        ("dedup window", f"{r['dedup_window']:g}s"),
        ("visibility", f"{r['visibility_timeout']:g}s"),
        ("schema", schema),
    ]
    for job, holders in r.get("running", {}).items():
        rows.append((f"running {job}", ", ".join(holders) or "-"))
    for label, text in rows:
        print(f"{label:<16}{text}")
    for change in changes:
        print(f"  {change}")
    if all(r[k] is None for k in ("ready", "reserved", "scheduled", "dead_letters")):
        print(f"({_UNKNOWN}: this broker's adapter does not report queue counts)")
    print()


async def dead_letters(args: argparse.Namespace) -> int:
    """``m dead-letters list|requeue|purge``: the latest dead letters, of one job or all."""
    broker = open_broker(args.broker)
    needs = {Capability.DEAD_LETTER_INSPECTION}
    if args.action != "list":
        needs.add(Capability.DEAD_LETTER_REMOVAL)
    if missing := needs - broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} cannot {args.action} dead letters "
            f"(no {', '.join(sorted(missing))})"
        )
    async with connected(broker):
        letters = await broker.dead_letters(10_000 if args.job else args.limit)
        rows = [row for row in map(described, letters) if args.job in (None, row.job)]
        rows = rows[-args.limit :]
        for letter, job, job_id in ((r.letter, r.job, r.job_id) for r in rows):
            when = datetime.fromtimestamp(letter.dead_lettered_at, UTC).isoformat(
                timespec="seconds"
            )
            reason = letter.reason.splitlines()[0][:300] if letter.reason else ""
            print(f"{when}  {job}  {job_id}  attempts={letter.attempts}  {len(letter.body)} bytes")
            print(f"    {reason}")
        which = f" of job {args.job}" if args.job else ""
        if args.action == "list" or not rows:
            print(f"{len(rows)} dead letter(s){which}")
            return 0
        if not args.yes and not _confirmed(f"{args.action} these {len(rows)} dead letter(s)?"):
            print("nothing done")
            return 1
        for letter, job, job_id in ((r.letter, r.job, r.job_id) for r in rows):
            if args.action == "requeue":
                await broker.requeue(fresh(letter.body))
                log.info("requeued %s[%s]; it was dead-lettered: %s", job, job_id, letter.reason)
            await broker.remove_dead_letters([letter])
        print(f"{args.action}d {len(rows)} dead letter(s){which}")
    return 0


def _confirmed(question: str) -> bool:
    if not sys.stdin.isatty():
        raise ConfigurationError(f"{question} Not asked without a terminal: add --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
