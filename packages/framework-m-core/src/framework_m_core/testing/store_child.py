"""A child process of the store tests: ``python -m framework_m_core.testing.store_child
URL GO_FILE COMMAND ARG...``.

Connects, prints ``ready``, waits for GO_FILE to exist, runs COMMAND and prints its
outcome as one line of JSON, then stays alive until killed. Commands:

* ``claim KEY PLACES TTL VALUE...``: one claim of a place of KEY per VALUE, all at once;
  prints ``{value: place key or null}``.
* ``create KEY VALUE...``: one write per VALUE under KEY, each only where the key has no
  record, all at once; prints ``{value: version or null}``.
* ``watch KEY VERSION TIMEOUT``: prints ``watching`` once the watch is asked, then
  ``{"value": ..., "version": ...}`` (or ``null``) once it returned. VERSION ``-`` is None.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from ..adapters.registry import open_broker
from ..ports.store import Record, StoreProtocol, Write


async def main(url: str, go: Path, command: str, args: list[str]) -> None:
    broker = open_broker(url)
    await broker.connect()
    store = broker.store
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(go.exists):
        if time.monotonic() > deadline:
            raise SystemExit("the go signal never came")
        await asyncio.sleep(0.002)
    print(json.dumps(await _run(store, command, args)), flush=True)
    await asyncio.Event().wait()


async def _run(store: StoreProtocol, command: str, args: list[str]) -> object:
    if command == "claim":
        key, places, ttl, values = args[0], int(args[1]), float(args[2]), args[3:]
        claims = await asyncio.gather(*(store.claim(key, places, v.encode(), ttl) for v in values))
        return {v: None if c is None else c.key for v, c in zip(values, claims, strict=True)}
    if command == "create":
        key, values = args[0], args[1:]
        versions = await asyncio.gather(
            *(store.write([Write(key, v.encode(), version=None)]) for v in values)
        )
        return {v: got[0] for v, got in zip(values, versions, strict=True)}
    if command == "watch":
        key, version, timeout = args[0], args[1], float(args[2])
        watching = asyncio.ensure_future(
            store.watch(key, None if version == "-" else int(version), timeout=timeout)
        )
        await asyncio.sleep(0)  # the watch is asked before the parent is told
        print("watching", flush=True)
        return _shown(await watching)
    raise SystemExit(f"unknown command {command!r}")


def _shown(record: Record | None) -> object:
    if record is None:
        return None
    return {"value": record.value.decode(), "version": record.version}


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4:]))
