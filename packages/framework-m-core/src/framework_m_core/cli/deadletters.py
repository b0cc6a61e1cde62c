"""``m dead-letters list|requeue|purge``: the latest dead letters, and putting their jobs
back or deleting them."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from datetime import UTC, datetime

from ..adapters.registry import connected, open_broker
from ..errors import ConfigurationError
from ..ports.capabilities import Capability
from ..tracking.deadletters import Described, described, fresh
from .options import Subparsers, broker_arg, configure_logging, confirmed, positive_int

log = logging.getLogger("framework_m.cli")


def add_parser(sub: Subparsers) -> list[argparse.ArgumentParser]:
    """The parsers of ``m dead-letters``' actions."""
    d = sub.add_parser("dead-letters", help="inspect dead letters")
    d_sub = d.add_subparsers(dest="action", required=True, metavar="ACTION")
    d_actions = [
        d_sub.add_parser("list", help="the latest dead letters, oldest first"),
        d_sub.add_parser(
            "requeue", help="put the latest dead letters' jobs back, with a fresh attempt count"
        ),
        d_sub.add_parser("purge", help="delete the latest dead letters"),
    ]
    for action in d_actions:
        broker_arg(action)
        action.add_argument("--job", default=None, help="only this job's")
        action.add_argument(
            "--limit", type=positive_int, default=20, help="at most this many, latest (20)"
        )
        if action is not d_actions[0]:
            action.add_argument("--yes", action="store_true", help="do not ask")
    d_actions[0].add_argument("--json", action="store_true", help="print one JSON document")
    return d_actions


def run(args: argparse.Namespace) -> int:
    configure_logging(args)
    return asyncio.run(dead_letters(args))


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
        if getattr(args, "json", False):
            listing = {"queue": broker.display_url, "job": args.job, "count": len(rows)}
            print(json.dumps(listing | {"dead_letters": [_as_dict(r) for r in rows]}, indent=2))
            return 0
        for letter, job, job_id in ((r.letter, r.job, r.job_id) for r in rows):
            reason = letter.reason.splitlines()[0][:300] if letter.reason else ""
            print(
                f"{_when(letter.dead_lettered_at)}  {job}  {job_id}  "
                f"attempts={letter.attempts}  {len(letter.body)} bytes"
            )
            print(f"    {reason}")
        which = f" of job {args.job}" if args.job else ""
        if args.action == "list" or not rows:
            print(f"{len(rows)} dead letter(s){which}")
            return 0
        if not args.yes and not confirmed(f"{args.action} these {len(rows)} dead letter(s)?"):
            print("nothing done")
            return 1
        for letter, job, job_id in ((r.letter, r.job, r.job_id) for r in rows):
            if args.action == "requeue":
                await broker.requeue(fresh(letter.body))
                log.info("requeued %s[%s]; it was dead-lettered: %s", job, job_id, letter.reason)
            await broker.remove_dead_letters([letter])
        print(f"{args.action}d {len(rows)} dead letter(s){which}")
    return 0


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _as_dict(row: Described) -> dict[str, object]:
    """A dead letter in ``list --json``: the text listing's fields, the whole reason, the
    time in unix seconds too, and the key ``m console`` knows it by."""
    letter = row.letter
    return {
        "when": _when(letter.dead_lettered_at),
        "dead_lettered_at": letter.dead_lettered_at,
        "job": row.job,
        "job_id": row.job_id,
        "attempts": letter.attempts,
        "size": len(letter.body),
        "reason": letter.reason,
        "key": row.key,
    }
