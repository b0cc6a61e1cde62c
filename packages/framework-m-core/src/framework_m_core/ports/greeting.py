"""What a server port says first: for adapters that tell their broker from something else
listening on the URL's port, instead of waiting out a client's whole connect timeout."""

from __future__ import annotations

import asyncio
import contextlib


async def first_bytes(
    host: str, port: int, wait: float, *, send: bytes = b"", line: bool = False
) -> bytes | None:
    """Connect to ``host:port``, write ``send``, and return what the server answers within
    ``wait`` seconds: its first line with ``line``, else up to 64 bytes; b"" when it says
    nothing in time. None when the port cannot be reached at all (the client says so)."""
    try:
        async with asyncio.timeout(wait):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return None
    try:
        if send:
            writer.write(send)
        async with asyncio.timeout(wait):
            return await (reader.readline() if line else reader.read(64))
    except TimeoutError:
        return b""
    except OSError:
        return None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
