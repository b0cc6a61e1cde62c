"""``m jobs status|result|cancel``: what became of a job, by its id (or a tick, by its
slot), and stopping it."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from ..adapters.registry import connected
from ..control import jobs
from ..errors import JobCancelledError, JobFailedError, ResultTimeoutError, UnknownJobError
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import JobState, JobStatus
from .options import Subparsers, broker_arg, configure_logging, seconds, shared_broker

#: Exit codes of ``m jobs``: 1 the job failed, was cancelled or is unknown; 4 not
#: finished within ``--wait``.
EXIT_NOT_DONE = 1
EXIT_WAITED = 4


def add_parser(sub: Subparsers) -> list[argparse.ArgumentParser]:
    """The parsers of ``m jobs``' actions."""
    j = sub.add_parser("jobs", help="a job's status and result, by its id")
    j_sub = j.add_subparsers(dest="action", required=True, metavar="ACTION")
    j_actions = [
        j_sub.add_parser("status", help="the job's state, attempts, times, error and result"),
        j_sub.add_parser("result", help="print the job's return value as JSON"),
        j_sub.add_parser("cancel", help="the job never runs, or stops where it runs"),
    ]
    for action in j_actions:
        broker_arg(action, shared=True)
        action.add_argument("id", help="the job id enqueue printed (or, with --slot, a schedule)")
        action.add_argument(
            "--slot", type=_slot, default=None, metavar="UNIX_SECONDS",
            help="the job ticked for this slot of the schedule ID (a job's name or @id)",
        )  # fmt: skip
    j_actions[0].add_argument("--json", action="store_true", help="print JSON")
    j_actions[1].add_argument(
        "--wait", type=_wait, default=0.0, metavar="SECONDS",
        help="wait this long for the job to finish (default 0: ask once)",
    )  # fmt: skip
    return j_actions


def run(args: argparse.Namespace) -> int:
    configure_logging(args)
    broker = shared_broker(args.broker, f"m jobs {args.action}")
    act = {"status": status, "result": result, "cancel": cancel}[args.action]
    return asyncio.run(act(args, broker))


def _slot(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a slot is whole unix seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a slot is whole unix seconds, got {text!r}")
    return value


def _wait(text: str) -> float:
    value = seconds(text)
    if value > jobs.MAX_WAIT:
        raise argparse.ArgumentTypeError(f"wait at most {jobs.MAX_WAIT:g} seconds")
    return value


async def status(args: argparse.Namespace, broker: BrokerProtocol) -> int:
    async with connected(broker):
        job_id = await _job_id(args, broker)
        if job_id is None:
            return EXIT_NOT_DONE
        found = await jobs.job_status(broker, job_id)
    if args.json:
        print(json.dumps(found.as_dict()))
    else:
        print(describe(found))
    return 0 if found.state is not JobState.UNKNOWN else EXIT_NOT_DONE


async def result(args: argparse.Namespace, broker: BrokerProtocol) -> int:
    async with connected(broker):
        job_id = await _job_id(args, broker)
        if job_id is None:
            return EXIT_NOT_DONE
        try:
            value = await jobs.wait_result(broker, job_id, timeout=args.wait)
        except (JobFailedError, JobCancelledError, UnknownJobError) as exc:
            print(f"m: {exc}", file=sys.stderr)
            return EXIT_NOT_DONE
        except ResultTimeoutError as exc:
            print(f"m: {exc}", file=sys.stderr)
            return EXIT_WAITED
    print(json.dumps(value))
    return 0


async def cancel(args: argparse.Namespace, broker: BrokerProtocol) -> int:
    async with connected(broker):
        job_id = await _job_id(args, broker)
        if job_id is None:
            return EXIT_NOT_DONE
        if await jobs.cancel_job(broker, job_id):
            print(f"job {job_id}: cancelled (it will not run, or stops within seconds)")
            return 0
        found = await jobs.job_status(broker, job_id)
    print(f"m: job {job_id} is not cancelled: it is {found.state}", file=sys.stderr)
    return EXIT_NOT_DONE


async def _job_id(args: argparse.Namespace, broker: BrokerProtocol) -> str | None:
    if args.slot is None:
        return str(jobs.validate_job_id(args.id))
    job_id = await jobs.job_of_slot(broker, args.id, args.slot)
    if job_id is None:
        print(f"m: no job is kept for {args.id}'s slot {args.slot}", file=sys.stderr)
    return job_id


def describe(s: JobStatus) -> str:
    """``s`` for a terminal: the state first, then what is known."""
    if s.state is JobState.UNKNOWN:
        return (
            f"job {s.job_id}: unknown (never enqueued on this broker, kept no status, or "
            "its status expired)"
        )
    lines = [f"job {s.job_id} ({s.job_name}): {s.state}, attempt {s.attempts}"]
    times: list[tuple[str, float | None]] = [
        ("enqueued", s.enqueued_at),
        ("due", s.due_at),
        ("started", s.started_at),
        ("finished", s.finished_at),
    ]
    for label, at in times:
        if at is not None:
            lines.append(f"  {label + ':':10} {_when(at)}")
    if s.slot is not None:
        lines.append(f"  {'slot:':10} {_when(s.slot)}")
    if s.error:
        lines.append(f"  {'error:':10} {s.error}")
    if s.has_result:
        lines.append(f"  {'result:':10} {_short(s.result)}")
    return "\n".join(lines)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 500 else text[:500] + f"... ({len(text):,} characters)"
