"""An event loop in a daemon thread of its own, that blocking callers hand coroutines to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs an asyncio event loop in a daemon thread until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; its future, to wait on from any other thread."""
        if self.inside():
            coro.close()
            raise RuntimeError(
                "a blocking framework-m call from inside its own event loop would wait for "
                "itself: await the async API there"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def inside(self) -> bool:
        """Whether the calling thread is the loop's own."""
        return threading.get_ident() == self._thread.ident

    def stop(self, timeout: float) -> None:
        """Stop the loop (its tasks cancelled) and wait up to ``timeout`` for the thread."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
