"""``m status``: per queue, its counts, windows and whether its schema is in sync; with
``--app``, the runs going on now under overlap policies and limits."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from typing import Any

from ..adapters.registry import connected, open_broker
from ..app import App, load_app
from ..control import keys, replicas
from ..control.shared import shared
from ..errors import BrokerError
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from ..ports.records import QueueStats
from ..tracking import lists
from .options import DEFAULT_BROKER, Subparsers, configure_logging


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    st = sub.add_parser(
        "status", help="per queue: counts, dead letters, windows, schema in sync or not"
    )
    st.add_argument(
        "--broker",
        action="append",
        help="broker URL; repeat it for several queues "
        f"(env M_BROKER_URL; default {DEFAULT_BROKER})",
    )
    st.add_argument("--json", action="store_true", help="print JSON")
    st.add_argument(
        "--app",
        default=os.environ.get("M_APP"),
        help="also show, per job with an overlap policy or a limit, the runs going on "
        "now and where, and per job with a rate, the starts spent (env M_APP)",
    )
    return st


def run(args: argparse.Namespace) -> int:
    configure_logging(args)
    args.broker = args.broker or [os.environ.get("M_BROKER_URL", DEFAULT_BROKER)]
    return asyncio.run(status(args))


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
                    "schema_warnings": list(plan.warnings),
                    "oldest_waiting": await _oldest(broker, plan.in_sync),
                    "outbox": await _outbox(broker, plan.in_sync),
                    **({} if app is None else await _app_rows(app, broker)),
                }
            )
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
        return 0
    for report in reports:
        _print_status(report)
    return 0


async def _app_rows(app: App, broker: BrokerProtocol) -> dict[str, Any]:
    return {"running": await _running(app, broker), "rates": await _rates(app, broker)}


async def _running(app: App, broker: BrokerProtocol) -> dict[str, list[str]]:
    """Per job with an overlap policy or a limit, the holders of its leases: the runs
    going on now, ``job id@host:pid`` (a limit per key value is not listed)."""
    if Capability.STORE not in broker.capabilities:
        return {}
    out: dict[str, list[str]] = {}
    for spec in app.jobs.values():
        found: list[str] = []
        if spec.schedule is not None and spec.overlap != "allow":
            found += await shared(broker).lease_holders(keys.overlap(spec.name))
        if spec.concurrency is not None and spec.concurrency_key is None:
            key = keys.concurrency(spec.name, spec.concurrency_key, {})
            found += await shared(broker).lease_holders(key, limit=spec.concurrency)
        if spec.concurrency is not None or (spec.schedule is not None and spec.overlap != "allow"):
            out[spec.name] = sorted(set(found))
    return out


async def _rates(app: App, broker: BrokerProtocol) -> dict[str, dict[str, Any]]:
    """Per job with a rate (one without ``rate_key``), its starts in the last period
    (by the clocks of the replicas that logged them)."""
    if Capability.STORE not in broker.capabilities:
        return {}
    out: dict[str, dict[str, Any]] = {}
    now = time.time()
    for spec in app.jobs.values():
        if spec.rate is None or spec.rate_key is not None:
            continue
        key = keys.rate(spec.name, None, {})
        logged = await shared(broker).read_starts(key)
        spent = sum(1 for at in logged.starts if at > now - spec.rate.period)
        out[spec.name] = {"rate": str(spec.rate), "spent": spent, "limit": spec.rate.limit}
    return out


async def _oldest(broker: BrokerProtocol, in_sync: bool) -> dict[str, Any] | None:
    """The job first in line, where the broker can tell (none while the schema is not
    in place: what is missing holds nothing)."""
    try:
        oldest = await lists.oldest_waiting(broker)
    except BrokerError:
        if in_sync:
            raise
        return None
    return None if oldest is None else dataclasses.asdict(oldest)


async def _outbox(broker: BrokerProtocol, in_sync: bool) -> dict[str, Any] | None:
    """The outbox as the replicas' relays last counted it; None without one (or while
    the schema is not in place: no replica has written the roll)."""
    if Capability.STORE not in broker.capabilities:
        return None
    try:
        found = await replicas.list_replicas(broker)
    except BrokerError:
        if in_sync:
            raise
        return None
    seen = replicas.outbox_seen(found)
    return None if seen is None else dataclasses.asdict(seen)


def _outbox_row(r: dict[str, Any]) -> list[tuple[str, str]]:
    seen = r["outbox"]
    if seen is None:
        return []
    ago = max(0.0, time.time() - seen["seen_at"])
    text = f"{seen['rows']:,} row(s) waiting"
    if seen["rows"]:
        text += f", oldest {seen['oldest']:.1f}s"
    if seen["failing"]:
        text += f", {seen['failing']:,} failing"
    return [("outbox", f"{text} (counted {ago:.0f}s ago by {seen['replica']})")]


def _waited(r: dict[str, Any]) -> list[tuple[str, str]]:
    oldest = r["oldest_waiting"]
    if oldest is None:
        return []
    age = "?" if oldest["age"] is None else f"{oldest['age']:.1f}s"
    return [("oldest waiting", f"{age} ({oldest['job']} {oldest['job_id']})")]


def _retries_reserved(r: dict[str, Any]) -> bool:
    """Whether the broker counts the retries waiting out their delay as reserved
    (:class:`~framework_m_core.ports.records.QueueStats`)."""
    return r["retries"] is None and (r["scheduled"] is None or r["delayed"] is not None)


def _scheduled(r: dict[str, Any]) -> str:
    """What waits for a due time, delayed jobs told from retries where the broker can."""
    scheduled, delayed, retries = r["scheduled"], r["delayed"], r["retries"]
    if scheduled is None:
        return _UNKNOWN
    if delayed is not None and retries is not None:
        return f"{scheduled:,} ({delayed:,} delayed, {retries:,} {_plural(retries, 'retry')})"
    if delayed is not None:
        return f"{scheduled:,} (delayed jobs)"
    return f"{scheduled:,} (delayed jobs and retries)"


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word.removesuffix("y") + "ies"


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
        *_waited(r),
        *_outbox_row(r),
        ("reserved", count("reserved") + (" (with retries)" if _retries_reserved(r) else "")),
        ("scheduled", _scheduled(r)),
        ("dead letters", count("dead_letters")),
        ("consumers", count("consumers")),
        ("dedup window", f"{r['dedup_window']:g}s"),
        ("visibility", f"{r['visibility_timeout']:g}s"),
        ("schema", schema),
    ]
    for job, holders in r.get("running", {}).items():
        rows.append((f"running {job}", ", ".join(holders) or "-"))
    for job, rate in r.get("rates", {}).items():
        spent = f"{rate['spent']} of {rate['limit']} starts spent ({rate['rate']})"
        rows.append((f"rate {job}", spent))
    width = max(16, *(len(label) + 1 for label, _ in rows))  # a long job name's row too
    for label, text in rows:
        print(f"{label:<{width}}{text}")
    for change in changes:
        print(f"  {change}")
    for warning in r["schema_warnings"]:
        print(f"  warning: {warning}")
    if all(r[k] is None for k in ("ready", "reserved", "scheduled", "dead_letters")):
        print(f"({_UNKNOWN}: this broker's adapter does not report queue counts)")
    print()
