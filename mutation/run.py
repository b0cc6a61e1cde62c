"""Prove the contract suite by mutation: every deliberate bug must fail it.

    hatch run mutate                    # every mutant (about 15 minutes)
    hatch run mutate --adapter sqlite   # one adapter's mutants
    hatch run mutate --id redis-per-process-dedup
    hatch run mutate --list

For each mutant (``mutation/mutants.py``) the adapters' sources are copied to a
temporary folder, the mutant's edits applied to the copy, and the tests it names
run from the adapter's own contract hook-up with the copy first on
``PYTHONPATH`` (the worker processes the suite starts inherit it). A mutant is
killed when a test it names fails first: the row names that test, and a first
failure of any other test counts as OFF-TARGET, not as a kill. First, the same
tests run on an unmutated copy and must pass, so that a kill is the mutant's
doing. Prints a row per mutant as it finishes and a summary per adapter; exits 1
unless every mutant was killed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mutants import MUTANTS, SUITES, Mutant

REPO = Path(__file__).resolve().parents[1]
# Source roots copied for every run; a mutant edits files below them.
ROOTS = (
    "packages/framework-m-core/src",
    "packages/adapter-redis/src",
    "examples/adapter-sqlite/src",
    "packages/adapter-rabbitmq/src",
    "packages/adapter-nats/src",
    "packages/framework-m-django/src",
    "packages/framework-m-outbox/src",
)
TIMEOUT = 600
# Suites that run in another hatch environment (Django 6 needs Python 3.12).
ENVIRONMENTS = {"django": "django"}


def check(mutant: Mutant) -> None:
    """Every edit's text occurs exactly once in the real source."""
    text = (REPO / mutant.file).read_text()
    for old, _ in mutant.edits:
        found = text.count(old)
        if found != 1:
            raise SystemExit(f"{mutant.id}: text to replace found {found} times in {mutant.file}")


def copy_tree(workdir: Path, mutant: Mutant | None) -> str:
    """Copy the source roots to ``workdir``, apply ``mutant``; return the PYTHONPATH."""
    paths = []
    for root in ROOTS:
        target = workdir / root
        shutil.copytree(REPO / root, target, ignore=shutil.ignore_patterns("__pycache__"))
        paths.append(str(target))
    if mutant is not None:
        path = workdir / mutant.file
        text = path.read_text()
        for old, new in mutant.edits:
            text = text.replace(old, new)
        path.write_text(text)
    return os.pathsep.join(paths)


def run_tests(adapter: str, tests: tuple[str, ...], pythonpath: str) -> tuple[int, list[str], str]:
    """Run ``tests`` of ``adapter``'s suite; return the exit code, failed tests, output."""
    command = [
        interpreter(adapter), "-m", "pytest", SUITES[adapter], "-q", "-x", "-p", "no:cacheprovider",
        "-k", " or ".join(tests), "-o", "log_level=WARNING",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:  # a hang is no kill: the test must fail
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return 4, [], f"{out[-2500:]}\n(no result within {TIMEOUT}s)"
    failed = re.findall(r"^FAILED \S+::(\w+)", done.stdout, re.MULTILINE)
    if re.search(r"^ERROR \S+::", done.stdout, re.MULTILINE):  # set-up broke: not a kill
        return 3, failed, done.stdout[-3000:]
    return done.returncode, failed, done.stdout[-3000:]


def interpreter(adapter: str) -> str:
    """The Python that runs ``adapter``'s suite: this one, or its hatch environment's."""
    if adapter not in ENVIRONMENTS:
        return sys.executable
    found = subprocess.run(
        ["hatch", "env", "find", ENVIRONMENTS[adapter]],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    python = Path(found.stdout.strip()) / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{adapter}: create its environment first: hatch env create django")
    return str(python)


def baseline(adapter: str, mutants: list[Mutant]) -> None:
    """The tests the mutants name pass on the unmutated sources."""
    tests = tuple(sorted({t for m in mutants for t in m.tests}))
    with tempfile.TemporaryDirectory(prefix="fm-mutation-") as workdir:
        code, failed, output = run_tests(adapter, tests, copy_tree(Path(workdir), None))
    if code != 0:
        raise SystemExit(f"baseline of {adapter} fails ({failed}): fix that first\n{output}")
    print(f"baseline {adapter}: {len(tests)} test selectors pass unmutated", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", choices=sorted(SUITES), action="append")
    parser.add_argument("--id", action="append", help="run only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    chosen = [
        m for m in MUTANTS
        if (not args.adapter or m.adapter in args.adapter) and (not args.id or m.id in args.id)
    ]  # fmt: skip
    for mutant in chosen:
        check(mutant)
    if args.list:
        for m in chosen:
            print(f"{m.id:28} {m.adapter:7} {m.promise}")
        return 0
    started = time.monotonic()
    for adapter in sorted({m.adapter for m in chosen}):
        baseline(adapter, [m for m in chosen if m.adapter == adapter])
    print(f"{'mutant':28} {'result':9} {'seconds':>7}  killed by / promise")
    results: Counter[tuple[str, str]] = Counter()
    for mutant in chosen:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fm-mutation-") as workdir:
            code, failed, output = run_tests(
                mutant.adapter, mutant.tests, copy_tree(Path(workdir), mutant)
            )
        result = "killed" if code == 1 and failed else "SURVIVED" if code == 0 else "ERROR"
        if result == "killed" and not any(sel in failed[0] for sel in mutant.tests):
            result = "OFF-TARGET"  # a test of another promise failed first: no kill
        results[(mutant.adapter, result)] += 1
        detail = failed[0] if failed else mutant.promise
        print(f"{mutant.id:28} {result:9} {time.monotonic() - t0:7.1f}  {detail}", flush=True)
        if result in ("ERROR", "OFF-TARGET"):
            print(output)
    print(f"\nsummary ({time.monotonic() - started:.0f}s):")
    for adapter in sorted({m.adapter for m in chosen}):
        total = sum(n for (a, _), n in results.items() if a == adapter)
        killed = results[(adapter, "killed")]
        print(f"  {adapter:7} {total:3} mutants, {killed:3} killed")
    return 0 if all(v == "killed" for (_, v) in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
