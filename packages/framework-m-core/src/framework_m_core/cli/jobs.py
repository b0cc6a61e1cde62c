"""``m jobs status|result|cancel``: what became of a job, by its id (or a tick, by its
slot), and stopping it; ``m jobs list``: the jobs in a state."""

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
from ..tracking import lists
from .options import (
    Subparsers,
    broker_arg,
    configure_logging,
    confirmed,
    positive_int,
    seconds,
    shared_broker,
)

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
    listing = j_sub.add_parser("list", help="the jobs running, finished, failed or dead")
    broker_arg(listing, shared=True)
    listing.add_argument(
        "--state", required=True, choices=lists.STATES,
        help="waiting (due now), delayed (enqueued for later), retrying (next attempt "
        "when), running (with replica and how long), finished (the latest settled), "
        "failed (the latest failed attempts) or dead (dead letters)",
    )  # fmt: skip
    listing.add_argument("--job", default=None, help="only jobs of this name")
    listing.add_argument("--limit", type=positive_int, default=50, help="jobs to show at most (50)")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    j_actions.append(listing)
    bulk = j_sub.add_parser(
        "cancel-waiting", help="cancel every waiting, delayed and retrying job of a job"
    )
    broker_arg(bulk, shared=True)
    bulk.add_argument("--job", required=True, help="the job's name")
    bulk.add_argument("--yes", action="store_true", help="do not ask")
    j_actions.append(bulk)
    j_actions[1].add_argument(
        "--wait", type=_wait, default=0.0, metavar="SECONDS",
        help="wait this long for the job to finish (default 0: ask once)",
    )  # fmt: skip
    return j_actions


def run(args: argparse.Namespace) -> int:
    configure_logging(args)
    broker = shared_broker(args.broker, f"m jobs {args.action}")
    act = {
        "status": status,
        "result": result,
        "cancel": cancel,
        "list": listed,
        "cancel-waiting": cancel_waiting,
    }[args.action]
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


async def listed(args: argparse.Namespace, broker: BrokerProtocol) -> int:
    async with connected(broker):
        items, total = await lists.jobs_in_state(broker, args.state, args.job)
    shown = items[: args.limit]
    if args.json:
        print(json.dumps({"state": args.state, "total": total, "items": shown}, indent=2))
        return 0
    of = f" of {args.job}" if args.job else ""
    if not shown:
        print(f"no {args.state} jobs{of}")
        return 0
    print(f"{args.state} jobs{of}: {len(shown)} of {total}")
    for item in shown:
        print("  " + _line(args.state, item))
    return 0


async def cancel_waiting(args: argparse.Namespace, broker: BrokerProtocol) -> int:
    async with connected(broker):
        held = await lists.held_ids(broker, args.job)  # a typo: one line, nothing done
        if not held:
            print(f"no job of {args.job} is waiting")
            return 0
        question = f"cancel {len(held)} waiting, delayed and retrying job(s) of {args.job}?"
        if not args.yes and not confirmed(question):
            print("nothing done")
            return EXIT_NOT_DONE
        count = sum(await jobs.cancel_jobs(broker, held))  # the jobs counted, no others
    print(f"cancelled {count} job(s) of {args.job}: none of them runs")
    return 0


def _line(state: str, item: dict[str, Any]) -> str:
    if state in ("waiting", "delayed", "retrying"):
        due = "" if item["due_at"] is None else f"due {_when(item['due_at'])}  "
        return f"{due}{item['job']}  {item['job_id']}  attempt {item['attempt']}"
    if state == "running":
        return (
            f"{item['job_id']}  {item['job']}  attempt {item['attempt']}  "
            f"running {item['running_for']:.1f}s  since {_when(item['started_at'])}  "
            f"on {item['replica']}"
        )
    if state == "dead":
        return (
            f"{_when(item['dead_lettered_at'])}  {item['job']}  {item['job_id']}  "
            f"{item['attempts']} attempt(s)  {item['reason'].splitlines()[0]}"
        )
    took = "" if item["duration"] is None else f"  took {item['duration']:.3f}s"
    why = "" if item["error"] is None else f"  {item['error']}"
    return (
        f"{_when(item['finished_at'])}  {item['outcome']}  {item['job']}  {item['job_id']}  "
        f"attempt {item['attempt']}{took}  on {item['replica']}{why}"
    )


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
