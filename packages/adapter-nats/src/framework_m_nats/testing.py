"""Helpers for tests that run framework-m against a real NATS server."""

from __future__ import annotations

import contextlib

import nats
from nats.js.errors import NotFoundError


def isolated_url(server: str, tag: str, **options: object) -> str:
    """A URL whose stream, subjects and consumer belong to one test (``tag``)."""
    opts = {
        "stream": f"fmtest_{tag}",
        "subject_prefix": f"fmtest.{tag}",
        "consumer": f"fmtest_{tag}_workers",
        **options,
    }
    return server + "?" + "&".join(f"{k}={v}" for k, v in opts.items())


async def delete_streams(server: str, tag: str) -> None:
    """Delete the job and dead-letter streams of :func:`isolated_url`'s ``tag``."""
    nc = await nats.connect(server)
    try:
        js = nc.jetstream()
        for name in (f"fmtest_{tag}", f"fmtest_{tag}_dead"):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
    finally:
        await nc.close()


async def stream_messages(server: str, stream: str) -> int:
    """How many messages ``stream`` holds."""
    nc = await nats.connect(server)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()
