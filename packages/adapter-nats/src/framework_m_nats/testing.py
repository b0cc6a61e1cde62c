"""``nats://`` namespaces for tests and benchmarks: a stream, subjects and consumer of their own."""

from __future__ import annotations

import contextlib
from typing import Any

import nats
from nats.js.errors import NotFoundError

from framework_m_core.testing.namespaces import Namespace, with_options


class NatsNamespace(Namespace):
    """Streams ``fmtest_<tag>`` and ``fmtest_<tag>_dead`` on ``server`` (a plain nats:// URL)."""

    def url(self, **options: Any) -> str:
        own = {
            "stream": self.name,
            "subject_prefix": f"fmtest.{self.tag}",
            "consumer": f"{self.name}_workers",
        }
        return with_options(self.server, **own, **options)

    async def drop(self) -> None:
        nc = await nats.connect(self.server)
        try:
            js = nc.jetstream()
            kv = [f"KV_{self.name}_{b}" for b in ("memos", "store")]
            for name in (self.name, f"{self.name}_dead", *kv):
                with contextlib.suppress(NotFoundError):
                    await js.delete_stream(name)
        finally:
            await nc.close()

    async def stored(self) -> int:
        """How many messages the job stream holds."""
        nc = await nats.connect(self.server)
        try:
            return int((await nc.jetstream().stream_info(self.name)).state.messages)
        finally:
            await nc.close()
