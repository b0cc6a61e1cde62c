"""The ``m`` command: ``m worker``, ``schedules``, ``enqueue``, ``sync-schema``, ``status``,
``dead-letters``, ``jobs``, ``console``, one module each beside this one."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .. import about
from ..errors import BrokerError, FrameworkMError, SchemaConflictError
from . import console, deadletters, enqueue, jobs, schedules, schema, status, worker
from .options import EXIT_BROKER, configure_logging, logging_args
from .worker import signals_stop

__all__ = ["main", "signals_stop"]


class _Versions(argparse.Action):
    """``m --version``: core's version and each installed adapter's, then exit."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        for name, number in about.installed_versions():
            print(f"{name} {number}")
        if (problem := about.mismatch()) is not None:
            parser.exit(2, f"m: error: {problem}\n")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="m", description="framework-m: leaderless scheduled and background jobs."
    )
    parser.add_argument(
        "--version", action=_Versions, nargs=0, help="print the versions of core and adapters"
    )
    logging_args(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = [
        worker.add_parser(sub),
        *schedules.add_parser(sub),
        enqueue.add_parser(sub),
        schema.add_parser(sub),
        status.add_parser(sub),
        *jobs.add_parser(sub),
        *deadletters.add_parser(sub),
        console.add_parser(sub),
    ]
    for command in commands:
        logging_args(command, top=False)
    return parser


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``m COMMAND``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise LookupError(command)


def _console(args: argparse.Namespace) -> int:
    configure_logging(args)
    return console.run(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": worker.run,
    "schedules": schedules.run,
    "enqueue": enqueue.run,
    "dead-letters": deadletters.run,
    "jobs": jobs.run,
    "status": status.run,
    "sync-schema": schema.run,
    "console": _console,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, with its usage
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    if (problem := about.mismatch()) is not None:
        print(f"m: error: {problem}", file=sys.stderr)
        return 2
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that closed the pipe shows here, not at exit
        return code
    except BrokenPipeError:  # `m status | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SchemaConflictError as exc:
        print(f"m: schema conflict: {exc}", file=sys.stderr)
        return 1
    except BrokerError as exc:  # the broker is out of reach or refused: not a usage error
        print(f"m: error: {exc}", file=sys.stderr)
        return EXIT_BROKER
    except FrameworkMError as exc:
        print(f"m: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
