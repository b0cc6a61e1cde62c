"""Where an enqueue's time goes beyond the raw client's: rates side by side, then cProfile.

    hatch run bench:python benchmarks/profile_enqueue.py redis://127.0.0.1:6379/0
    hatch run bench:python benchmarks/profile_enqueue.py nats://127.0.0.1:4222 --inflight 100 \
        --profile

Alternates rounds of ``enqueue`` (each with a dedup id) and of the raw client doing
the same broker work (Redis: the adapter's ENQUEUE script through redis-py; NATS: a
JetStream publish with a unique ``Nats-Msg-Id``), one at a time or ``--inflight`` at
once, and prints each round's rates and their ratio. ``--profile`` then profiles one
round of each and prints the functions whose calls or own time differ most, per
enqueue (the profiler slows both about threefold: compare the differences).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import statistics
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the modules beside this file
from common import sends_per_second
from run import fresh

Send = Callable[[int], Awaitable[object]]


@contextlib.asynccontextmanager
async def raw_redis(server: str) -> AsyncIterator[Send]:
    import redis.asyncio as aioredis
    from peers_redis import _ARGS, BODY

    from framework_m_redis.scripts import ENQUEUE

    client = aioredis.Redis.from_url(server)
    script = client.register_script(ENQUEUE)
    tag = uuid.uuid4().hex[:12]
    keys = f"bench:{{{tag}}}:jobs", f"bench:{{{tag}}}:delayed"

    async def send(i: int) -> object:
        dedup = f"bench:{{{tag}}}:d:{i}"
        return await script(keys=[keys[0], dedup, keys[1]], args=[str(i), BODY, *_ARGS])

    try:
        yield send
    finally:
        await client.delete(*keys)
        async for key in client.scan_iter(match=f"bench:{{{tag}}}:d:*", count=1000):
            await client.delete(key)
        await client.aclose()


@contextlib.asynccontextmanager
async def raw_nats(server: str) -> AsyncIterator[Send]:
    import nats
    from nats.js.api import StreamConfig
    from peers_nats import BODY

    nc = await nats.connect(server)
    js = nc.jetstream()
    tag = uuid.uuid4().hex[:12]
    stream = f"bench_raw_{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[stream], duplicate_window=120))

    async def send(i: int) -> object:
        return await js.publish(stream, BODY, headers={"Nats-Msg-Id": f"{tag}:{i}"})

    try:
        yield send
    finally:
        await js.delete_stream(stream)
        await nc.close()


def per_call(profile: cProfile.Profile, n: int) -> dict[str, tuple[float, float]]:
    """Calls and own time (us) per enqueue of each function the profile saw."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = {}
    for (file, line, name), (_, calls, own, *_) in stats.items():
        short = file.split("site-packages/")[-1].split("/src/")[-1].split("python3.11/")[-1]
        out[f"{short}:{line}({name})"] = (calls / n, own / n * 1e6)
    return out


async def compare(url: str, n: int, inflight: int, rounds: int, profile: bool, top: int) -> None:
    raw = raw_redis if url.startswith("redis") else raw_nats
    async with raw(url.partition("?")[0]) as raw_send, fresh(url) as broker:
        run = uuid.uuid4().hex

        async def ours(i: int) -> object:
            return await broker.enqueue("noop", f"{run}:{i}", i=i)

        await raw_send(-1)
        await ours(-1)
        ratios = []
        for r in range(rounds):
            a = await sends_per_second(raw_send, n, inflight, r * n)
            b = await sends_per_second(ours, n, inflight, r * n)
            ratios.append(b / a)
            print(f"round {r + 1}: raw {a:8,.0f}/s  framework-m {b:8,.0f}/s  ratio {b / a:.2f}")
        print(f"{url}, {inflight} in flight: median ratio {statistics.median(ratios):.2f}")
        if not profile:
            return
        seen = {}
        for name, send in (("raw", raw_send), ("framework-m", ours)):
            p = cProfile.Profile()
            p.enable()
            await sends_per_second(send, n, inflight, (rounds + 1) * n)
            p.disable()
            seen[name] = per_call(p, n)
            calls = sum(c for c, _ in seen[name].values())
            print(f"{name}: {calls:.0f} calls an enqueue")
    diffs = []
    for fn in seen["raw"].keys() | seen["framework-m"].keys():
        (c0, t0), (c1, t1) = seen["raw"].get(fn, (0, 0)), seen["framework-m"].get(fn, (0, 0))
        diffs.append((t1 - t0, c1 - c0, fn))
    print("framework-m minus raw, per enqueue (own time under the profiler):")
    for dt, dc, fn in sorted(diffs, key=lambda d: -abs(d[0]))[:top]:
        print(f"  {dt:+7.2f} us {dc:+6.2f} calls  {fn}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="redis://... or nats://...")
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if not args.url.startswith(("redis://", "nats://")):
        parser.error("the raw comparison exists for redis:// and nats:// URLs")
    asyncio.run(compare(args.url, args.n, args.inflight, args.rounds, args.profile, args.top))


if __name__ == "__main__":
    main()
