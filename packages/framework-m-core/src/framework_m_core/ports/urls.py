"""Broker URLs: parsing helpers and masking credentials for logs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import get_args, get_type_hints
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError

MASK = "***"
# Query parameters that carry secrets in any adapter's URL.
_SECRET_PARAMS = frozenset(
    {"password", "pass", "token", "secret", "nkey", "nkey_seed", "seed", "key", "creds"}
)


def scheme_of(url: str) -> str:
    """The URL's scheme, lower-cased; raises :class:`ConfigurationError` when it has none."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"broker URL {redact_url(str(url))!r} has no scheme: expected e.g. "
            "'memory://' or 'nats://127.0.0.1:4222'"
        )
    return url.split("://", 1)[0].lower()


def redact_url(url: str) -> str:
    """``url`` with its password and secret query parameters replaced by ``***``.

    A password written without percent-encoding may hold ``/``, ``?``, ``#`` or ``@``,
    which move where a parser thinks the host starts: then everything up to the last
    ``@`` is masked, user name included.
    """
    scheme, sep, rest = url.partition("://")
    own = rest.split("://", 1)[0]  # not into a URL nested in a query value
    userinfo, at, _ = own.rpartition("@")
    if sep and at and any(c in userinfo for c in "/?#@"):
        return redact_url(f"{scheme}://{MASK}@{rest[len(userinfo) + 1 :]}")
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            userinfo = f"{user}:{MASK}"
        elif parts.scheme.startswith("nats") or parts.scheme == "tls":
            userinfo = MASK  # nats://TOKEN@host
        netloc = f"{userinfo}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, MASK if _secret(k) else _redact_nested(v)) for k, v in pairs],
            safe="*/:@",
        )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def host_ports(hosts: str, shown: str, what: str = "a host:port") -> list[tuple[str, int | None]]:
    """``host:port``, ``host`` and ``[v6]:port`` entries of a comma-separated list (the
    nodes of a cluster in a URL), in order, as (host, port or None); raises
    :class:`ConfigurationError` naming an entry that is ``what`` not."""
    out: list[tuple[str, int | None]] = []
    for given in hosts.split(","):
        host, port = given, ""
        if given.startswith("["):
            host, _, after = given[1:].partition("]")
            if after and not after.startswith(":"):
                host = ""
            port = after[1:]
        elif ":" in given:
            host, _, port = given.rpartition(":")
        if not host or (port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)):
            raise ConfigurationError(
                f"broker URL {shown!r}: {given!r} is not {what} (hosts are separated by ',')"
            )
        out.append((host, int(port) if port else None))
    return out


def _secret(name: str) -> bool:
    name = name.lower()
    return name in _SECRET_PARAMS or name.endswith(("_password", "_token", "_secret"))


def _redact_nested(value: str) -> str:
    """A query value that is itself a URL (e.g. a management endpoint), masked the same way."""
    return redact_url(value) if "://" in value and "@" in value else value


def options_of(settings: type, *, exclude: Iterable[str] = ()) -> dict[str, type]:
    """The URL options a settings dataclass takes: its ``str``, ``int``, ``float`` and
    ``bool`` fields (optional ones included), by name, but for ``exclude``."""
    hints = get_type_hints(settings)
    out: dict[str, type] = {}
    for f in dataclasses.fields(settings):
        if f.name in exclude:
            continue
        kinds = [k for k in get_args(hints[f.name]) or (hints[f.name],) if k is not type(None)]
        if len(kinds) == 1 and kinds[0] in (str, int, float, bool):
            out[f.name] = kinds[0]
    return out


def _flag(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def query_params(url: str, allowed: dict[str, type]) -> dict[str, object]:
    """Parse the URL's query into typed values; unknown or malformed parameters are errors."""
    parts = urlsplit(url)
    out: dict[str, object] = {}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        kind = allowed.get(key)
        if kind is None:
            names = ", ".join(sorted(allowed)) or "none"
            raise ConfigurationError(
                f"unknown option {key!r} in broker URL {redact_url(url)!r} (allowed: {names})"
            )
        try:
            out[key] = _flag(raw) if kind is bool else kind(raw)
            if kind is float and not math.isfinite(out[key]):  # type: ignore[arg-type]
                raise ValueError(raw)
        except ValueError:
            raise ConfigurationError(
                f"option {key!r} in broker URL {redact_url(url)!r} must be a {kind.__name__}, "
                f"got {raw!r}"
            ) from None
    return out
