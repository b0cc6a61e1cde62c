"""A TCP proxy in the test's event loop, to cut a broker connection the way a network does."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import urlsplit

from .namespaces import with_address


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """Forwards ``127.0.0.1:port`` to the server of ``url``; :meth:`cut` drops every
    connection and refuses new ones until :meth:`start` is called again."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 0)
        self.port = free_port()
        self.url = with_address(url, f"127.0.0.1:{self.port}")
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink, (writer, up_writer)))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        both: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            for w in both:  # one side gone: the whole connection is
                with contextlib.suppress(OSError, RuntimeError):
                    w.close()
