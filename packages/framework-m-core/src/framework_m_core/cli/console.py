"""``m console --app APP --broker URL --http HOST:PORT``: the operator's page and API."""

from __future__ import annotations

import argparse
import asyncio
import os

from ..adapters.registry import open_broker
from ..app import load_app
from ..console.hosts import allowed_names
from ..errors import ConfigurationError
from ..observability.probes import parse_address
from ..ports.capabilities import Capability


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    c = sub.add_parser(
        "console",
        help="serve a page and a JSON API over the fleet (needs the 'console' extra)",
        description="Serve the operator's console: schedules (pause, resume, trigger), "
        "replicas, queues, dead letters (requeue, purge) and jobs by id. Changes need "
        "M_CONSOLE_TOKEN; without it the console serves reads only, on loopback only. "
        "M_CONSOLE_READ_TOKEN guards reads too.",
    )
    c.add_argument(
        "--app",
        default=os.environ.get("M_APP"),
        help="the app whose code schedules and jobs to show (env M_APP; without it, only "
        "runtime schedules)",
    )
    c.add_argument(
        "--broker",
        default=os.environ.get("M_BROKER_URL"),
        help="URL of the fleet's shared broker (env M_BROKER_URL)",
    )
    c.add_argument(
        "--http",
        default=os.environ.get("M_CONSOLE_HTTP", "127.0.0.1:8090"),
        metavar="HOST:PORT",
        help="where to listen (env M_CONSOLE_HTTP; default 127.0.0.1:8090)",
    )
    c.add_argument(
        "--allowed-host",
        action="append",
        default=[os.environ.get("M_CONSOLE_HOSTS", "")],
        metavar="NAME",
        help="a host name the console answers for besides its addresses and localhost, "
        "as a proxy or browser sends it ('*.example.com' for every name under one; "
        "repeatable; env M_CONSOLE_HOSTS, comma-separated)",
    )
    c.add_argument(
        "--sample-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between samples of the queue's counts for the last hour's chart (30)",
    )
    return c


def run(args: argparse.Namespace) -> int:
    from .. import console

    host, port = parse_address(args.http)
    allowed = allowed_names(args.allowed_host)
    if not args.broker:
        raise ConfigurationError("m console needs the fleet's broker: --broker or M_BROKER_URL")
    if not 1 <= args.sample_every <= 3600:
        raise ConfigurationError("--sample-every must be 1 to 3600 seconds")
    broker = open_broker(args.broker)
    if Capability.CROSS_PROCESS not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} lives inside one process: m console would see nothing of "
            "the workers; use a shared broker URL"
        )
    app = load_app(args.app) if args.app else None
    asyncio.run(
        console.serve(
            broker,
            app,
            host,
            port,
            change_token=os.environ.get("M_CONSOLE_TOKEN"),
            read_token=os.environ.get("M_CONSOLE_READ_TOKEN"),
            sample_every=args.sample_every,
            allowed_hosts=allowed,
        )
    )
    return 0
