"""Which ``Host`` the console answers: its guard against DNS rebinding.

A page on another site can point its own name at 127.0.0.1 and then read a loopback
console as if it were its own origin; its requests still carry that name in ``Host``.
So the console answers a request only when its ``Host`` is an IP address (a browser
that asked for an address is on the console's own origin), ``localhost``, the name it
listens on, or a name the operator allowed (``--allowed-host``, ``M_CONSOLE_HOSTS``,
``*.example.com`` for every name under one); anything else gets 400 and no data.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from ..errors import ConfigurationError

_NAME = re.compile(
    r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
)


def allowed_names(values: Iterable[str]) -> tuple[str, ...]:
    """Host names from the operator (comma-separated lists allowed), lower-cased, IP
    addresses left out (always answered); ConfigurationError for one that is no host
    name."""
    names: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower().rstrip(".")
            if not name or _is_address(name.strip("[]")):
                continue
            if len(name) > 253 or not _NAME.fullmatch(name):
                raise ConfigurationError(
                    f"allowed host {part.strip()!r} is not a host name (letters, digits, "
                    "'-' and '.', or '*.' before a domain; no port)"
                )
            names.append(name)
    return tuple(names)


class HostCheck:
    """Whether a request's ``Host`` header names this console."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = frozenset(n for n in names if not n.startswith("*."))
        self._domains = tuple(n[1:] for n in names if n.startswith("*."))  # ".example.com"

    def allows(self, host: str | None) -> bool:
        """True for an IP address, ``localhost`` or an allowed name, with any port."""
        name = _without_port(host or "")
        if not name:
            return False
        if _is_address(name):
            return True
        name = name.lower().rstrip(".")
        if name == "localhost" or name in self._names:
            return True
        return any(name.endswith(domain) for domain in self._domains)


def _without_port(host: str) -> str:
    if host.startswith("["):  # [v6]:port
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    return name if port.isdigit() or not port else ""


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
