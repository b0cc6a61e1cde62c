"""``redis://`` URL parsing: the connection part goes to redis-py, the rest is ours."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit, urlunsplit

from framework_m_core.ports import ConfigurationError, options_of, query_params, redact_url

DEFAULT_QUEUE = "framework_m"
DEFAULT_GROUP = "workers"
DEFAULT_DEDUP_WINDOW = 120.0
DEFAULT_VISIBILITY = 30.0
DEFAULT_MAX_LEN = 1_000_000
DEFAULT_DEAD_MAX_LEN = 100_000

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_REDIS_PY = frozenset(
    {
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_check_hostname",
        "socket_timeout",
        "socket_connect_timeout",
        "health_check_interval",
        "client_name",
        "db",
        "protocol",
    }
)


@dataclass(frozen=True)
class RedisSettings:
    """Everything a ``redis://`` or ``rediss://`` URL can say."""

    client_url: str = field(repr=False)  # what redis-py gets: the URL minus our options
    display_url: str
    queue: str = DEFAULT_QUEUE
    group: str = DEFAULT_GROUP
    dedup_window: float = DEFAULT_DEDUP_WINDOW
    visibility_timeout: float = DEFAULT_VISIBILITY
    max_len: int = DEFAULT_MAX_LEN
    dead_letter_max_len: int = DEFAULT_DEAD_MAX_LEN
    cluster: bool = False
    max_connections: int = 64

    def key(self, name: str) -> str:
        # One hash tag for every key of a queue: scripts touch one slot on Redis Cluster.
        return f"fm:{{{self.queue}}}:{name}"

    @property
    def stream(self) -> str:
        return self.key("jobs")

    @property
    def delayed(self) -> str:
        return self.key("delayed")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def meta(self) -> str:
        return self.key("meta")

    def lease_key(self, key: str) -> str:
        return self.key(f"lease:{key}")

    def state_key(self, key: str) -> str:
        return self.key(f"state:{key}")

    def memo_key(self, key: str) -> str:
        return self.key(f"memo:{key}")

    def dedup_key(self, dedup_id: str) -> str:
        return self.key(f"dedup:{dedup_id}")


# Our options (the settings' fields); the redis-py ones above go to redis-py untouched.
_OURS = options_of(RedisSettings, exclude=("client_url", "display_url"))


def parse_url(url: str) -> RedisSettings:
    """Parse and validate; raise :class:`ConfigurationError` naming the problem."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"not a redis:// or rediss:// URL: {shown!r}")
    if not parts.hostname:
        raise ConfigurationError(f"broker URL {shown!r} names no host")
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise ConfigurationError(
            f"broker URL {shown!r}: the path is the database number, got {db!r} (e.g. /0)"
        )
    given = query_params(url, {**_OURS, **dict.fromkeys(_REDIS_PY, str)})
    ours = {k: v for k, v in given.items() if k in _OURS}
    passed = [(k, str(v)) for k, v in given.items() if k in _REDIS_PY]
    client_url = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(passed), parts.fragment)
    )
    settings = RedisSettings(client_url=client_url, display_url=shown, **ours)  # type: ignore[arg-type]
    _validate(settings, shown)
    return settings


def _validate(s: RedisSettings, shown: str) -> None:
    def bad(message: str) -> ConfigurationError:
        return ConfigurationError(f"{message} (in {shown!r})")

    for label, value in (("queue", s.queue), ("group", s.group)):
        if not _NAME.match(value) or "{" in value or "}" in value:
            raise bad(f"{label} {value!r} must be letters, digits, '_', '.', ':' or '-'")
    if not s.dedup_window >= 0.001:
        raise bad("dedup_window must be > 0 seconds")
    if not s.visibility_timeout >= 0.1:
        raise bad("visibility_timeout must be at least 0.1 seconds")
    if s.max_len < 1 or s.dead_letter_max_len < 1:
        raise bad("max_len and dead_letter_max_len must be >= 1")
    if s.max_connections < 2:
        raise bad("max_connections must be >= 2 (a blocked read holds one)")
