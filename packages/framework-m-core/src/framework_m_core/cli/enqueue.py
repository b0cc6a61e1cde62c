"""``m enqueue JOB``: enqueue one job on a shared broker."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ..adapters.registry import connected
from ..app import load_app
from .options import (
    Subparsers,
    broker_arg,
    check_job,
    configure_logging,
    instant,
    kwargs_of,
    seconds,
    shared_broker,
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    e = sub.add_parser("enqueue", help="enqueue one job")
    broker_arg(e, shared=True)
    e.add_argument("--app", default=os.environ.get("M_APP"), help="check the job name against it")
    e.add_argument("job", help="job name")
    e.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    e.add_argument("--dedup-id", default=None, help="deduplication id")
    when = e.add_mutually_exclusive_group()
    when.add_argument(
        "--in", dest="delay", type=seconds, default=None, metavar="SECONDS",
        help="hold the job this many seconds before it runs",
    )  # fmt: skip
    when.add_argument(
        "--at", dest="at", type=instant, default=None, metavar="TIME",
        help="hold the job until this ISO 8601 time with its offset (2026-12-24T18:00:00+01:00)",
    )  # fmt: skip
    return e


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_enqueue(args))


async def _enqueue(args: argparse.Namespace) -> int:
    app = load_app(args.app) if args.app else None
    configure_logging(args)
    kwargs = kwargs_of(args.kwargs)
    if app is not None:
        check_job(app, args.app, args.job, kwargs)
    broker = shared_broker(args.broker)
    async with connected(broker):
        if args.delay is not None:
            job_id = await broker.enqueue_in(args.delay, args.job, args.dedup_id, **kwargs)
        elif args.at is not None:
            job_id = await broker.enqueue_at(args.at, args.job, args.dedup_id, **kwargs)
        else:
            job_id = await broker.enqueue(args.job, args.dedup_id, **kwargs)
    print(job_id)
    if app is None:
        print(
            f"m: note: {args.job!r} and its kwargs were not checked (pass --app to check "
            "them against the app before sending)",
            file=sys.stderr,
        )
    return 0
