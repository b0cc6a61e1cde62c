"""The test command (``hatch run test [pytest args]``): the suite in two passes.

Most tests run two at a time, file by file (a file's servers and fixtures stay in
one process). The tests marked ``processes`` (real ``m worker`` processes, which
mostly wait on brokers and slots, not the CPU) then run eight at a time, test by
test, so that their waiting overlaps. Arguments go to both passes; with ``-m`` in
them, one pass runs as asked. A pass that selects nothing is not a failure unless
both select nothing (pytest's exit code 5).
"""

from __future__ import annotations

import subprocess
import sys

FIRST = ["-n", "2", "--dist", "loadfile", "-m", "not processes"]
SECOND = ["-n", "8", "--dist", "load", "-m", "processes"]
NO_TESTS = 5


def run(options: list[str], args: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "pytest", *options, *args])


def main(args: list[str]) -> int:
    if "-m" in args:
        return run(["-n", "2", "--dist", "loadfile"], args)
    codes = [run(FIRST, args), run(SECOND, args)]
    if not args:
        codes.append(subprocess.call(["hatch", "run", "django:test"]))
    failed = [c for c in codes if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if codes[:2] == [NO_TESTS, NO_TESTS] else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
