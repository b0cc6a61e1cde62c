"""A child process of the publish-race test: ``python -m framework_m_core.testing.publisher
URL GO_FILE ID...``. Connects, prints ``ready``, waits for GO_FILE to exist, publishes one
job per deduplication id all at once, and prints ``{id: [job_id, duplicate]}`` as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from ..adapters.registry import open_broker
from ..ports.messages import JobMessage


def _arrived(signal: Path) -> bool:
    return signal.exists()


async def main(url: str, go: Path, dedup_ids: list[str]) -> None:
    broker = open_broker(url)
    await broker.connect()
    try:
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while not _arrived(go):
            if time.monotonic() > deadline:
                raise SystemExit("the go signal never came")
            await asyncio.sleep(0.002)
        results = await asyncio.gather(
            *(broker.publish(JobMessage("race", deduplication_id=d)) for d in dedup_ids)
        )
        print(
            json.dumps(
                {d: [r.job_id, r.duplicate] for d, r in zip(dedup_ids, results, strict=True)}
            )
        )
    finally:
        await broker.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
