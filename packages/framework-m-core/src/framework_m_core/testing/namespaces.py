"""Namespaces: a stream, queue or key prefix that belongs to one test or benchmark run.

Every adapter's ``testing.py`` has a :class:`Namespace` subclass and registers
it under its URL schemes in the ``framework_m.test_namespaces`` entry-point
group, so that fixtures, multi-process tests and benchmarks make and drop
namespaces through one function, :func:`namespace`, for any installed broker.
This module needs no test framework.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import UnknownBrokerError
from ..ports.urls import scheme_of

GROUP = "framework_m.test_namespaces"


class Namespace(ABC):
    """A fresh namespace on the broker at ``server`` (a URL without framework-m options)."""

    def __init__(self, server: str, tag: str | None = None) -> None:
        self.server = server
        self.tag = tag or uuid.uuid4().hex[:12]

    @property
    def name(self) -> str:
        """The base name of everything the namespace holds (a queue, stream or prefix)."""
        return f"fmtest_{self.tag}"

    @abstractmethod
    def url(self, **options: Any) -> str:
        """A broker URL for this namespace; ``options`` are the adapter's URL options."""

    @abstractmethod
    async def drop(self) -> None:
        """Delete everything the namespace holds on the broker. Idempotent."""


def namespace(server: str, tag: str | None = None) -> Namespace:
    """A new :class:`Namespace` on ``server``, from the adapter registered for its scheme."""
    scheme = scheme_of(server)
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if scheme not in found:
        raise UnknownBrokerError(
            f"no installed adapter registers test namespaces for {scheme}:// "
            f"(entry-point group {GROUP})"
        )
    factory = found[scheme].load()
    made = factory(server, tag)
    if not isinstance(made, Namespace):
        raise TypeError(f"{found[scheme].value} did not return a Namespace")
    return made


def with_options(url: str, **options: Any) -> str:
    """``url`` with ``options`` added to its query string."""
    if not options:
        return url
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in options.items())


def with_option(url: str, key: str, value: object) -> str:
    """``url`` with its query option ``key`` set to ``value`` (replaced if present)."""
    base, _, query = url.partition("?")  # not urlunsplit: it drops the // of sqlite:///path
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != key]
    return f"{base}?{urlencode([*kept, (key, str(value))], safe='/:')}"


def with_address(url: str, address: str) -> str:
    """``url`` pointed at ``address`` (``host:port``), keeping its credentials."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{address}"))


def with_credentials(url: str, user: str, password: str) -> str:
    """``url`` with ``user:password`` as its credentials, keeping its server."""
    parts = urlsplit(url)
    server = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{server}"))
