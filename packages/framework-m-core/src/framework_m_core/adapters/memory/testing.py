"""``memory://`` namespaces for tests and benchmarks: a queue name of their own."""

from __future__ import annotations

from typing import Any

from ...testing.namespaces import Namespace, with_options
from .server import reset


class MemoryNamespace(Namespace):
    """A queue of the in-process server; dropping it forgets its messages."""

    def url(self, **options: Any) -> str:
        return with_options(f"memory://{self.name}", **options)

    async def drop(self) -> None:
        reset(self.name)
