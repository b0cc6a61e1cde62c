"""A child process of the lease tests: ``python -m framework_m_core.testing.lease_holder
URL KEY TTL LIMIT GO_FILE [--extend] HOLDER...``.

Connects, prints ``ready``, waits for GO_FILE to exist, acquires a place under KEY for
every HOLDER at once and prints ``{holder: held}`` as JSON. Then it stays alive until
killed; with ``--extend`` it extends the places it holds every quarter of TTL and
prints ``lost HOLDER`` for any extend that fails.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from ..adapters.registry import open_broker
from ..control.shared import shared


async def main(url: str, key: str, ttl: float, limit: int, go: Path, args: list[str]) -> None:
    extend = "--extend" in args
    holders = [a for a in args if a != "--extend"]
    broker = open_broker(url)
    await broker.connect()
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(go.exists):
        if time.monotonic() > deadline:
            raise SystemExit("the go signal never came")
        await asyncio.sleep(0.002)
    held = await asyncio.gather(
        *(shared(broker).acquire_lease(key, h, ttl, limit=limit) for h in holders)
    )
    print(json.dumps(dict(zip(holders, held, strict=True))), flush=True)
    mine = [h for h, ok in zip(holders, held, strict=True) if ok]
    while True:
        await asyncio.sleep(ttl / 4)
        if extend:
            for holder in list(mine):
                if not await shared(broker).extend_lease(key, holder):
                    print(f"lost {holder}", flush=True)
                    mine.remove(holder)


if __name__ == "__main__":
    asyncio.run(
        main(
            sys.argv[1],
            sys.argv[2],
            float(sys.argv[3]),
            int(sys.argv[4]),
            Path(sys.argv[5]),
            sys.argv[6:],
        )
    )
