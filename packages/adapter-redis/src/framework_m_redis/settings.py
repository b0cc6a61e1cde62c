"""``redis://`` and ``redis+sentinel://`` URL parsing: the connection part goes to
redis-py, the rest is ours."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from framework_m_core.ports import (
    DEFAULT_MAX_JOB_SIZE,
    ConfigurationError,
    host_ports,
    max_job_size,
    options_of,
    query_params,
    redact_url,
)

DEFAULT_QUEUE = "framework_m"
DEFAULT_GROUP = "workers"
DEFAULT_DEDUP_WINDOW = 120.0
DEFAULT_VISIBILITY = 30.0
DEFAULT_MAX_LEN = 1_000_000
DEFAULT_DEAD_MAX_LEN = 100_000
DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_WAIT_TIMEOUT = 1.0
MOST_JOB_SIZE = 512 << 20  # Redis's proto-max-bulk-len by default: the most one value holds
SCHEMES = ("redis", "rediss", "redis+sentinel", "rediss+sentinel")

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
    max_job_size: int = DEFAULT_MAX_JOB_SIZE  # bytes an encoded job may have
    cluster: bool = False
    # cluster=1 with several hosts: the nodes asked for the topology, in order (seeds).
    seeds: tuple[tuple[str, int], ...] = ()
    max_connections: int = 64
    # Sentinel: where to ask for the primary of ``master`` (empty: a plain URL).
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    # Replicas a write must reach before it counts (WAIT); None: 1 with Sentinel, else 0.
    wait_replicas: int | None = None
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT

    @property
    def replicas_to_wait_for(self) -> int:
        if self.wait_replicas is not None:
            return self.wait_replicas
        return 1 if self.sentinels else 0

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
    def later(self) -> str:
        """The due times of the jobs enqueued for later (by job id), beside the delayed
        set that holds them with the retries: what tells the two apart in a count."""
        return self.key("later")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def meta(self) -> str:
        return self.key("meta")

    def record_key(self, key: str) -> str:
        return self.key(f"rec:{key}")

    @property
    def versions(self) -> str:
        """The counter every record version of the store is drawn from."""
        return self.key("versions")

    @property
    def changes(self) -> str:
        """What the channel a store write publishes on starts with; the changed record's
        Redis key follows."""
        return self.key("changes:")

    def dedup_key(self, dedup_id: str) -> str:
        return self.key(f"dedup:{dedup_id}")


# Our options (the settings' fields); the redis-py ones above go to redis-py untouched.
_OURS = options_of(RedisSettings, exclude=("client_url", "display_url", "master", "seeds"))
_SENTINEL_ONLY = ("sentinel_username", "sentinel_password")


def parse_url(url: str) -> RedisSettings:
    """Parse and validate; raise :class:`ConfigurationError` naming the problem.

    ``redis[s]://[user:password@]host:port[/db][?options]``; with ``cluster=1`` the
    hosts may be several (``host:port,host:port``), the seeds asked for the cluster's
    topology in order; or
    ``redis[s]+sentinel://[user:password@]host:port[,host:port...]/MASTER[/db][?options]``
    where the hosts are sentinels, the credentials the data nodes', and the sentinels'
    own come as ``sentinel_username`` and ``sentinel_password``.
    """
    shown = redact_url(url)
    scheme = url.partition("://")[0].lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(f"not a redis://, rediss:// or redis+sentinel:// URL: {shown!r}")
    if scheme.endswith("+sentinel"):
        return _parse_sentinel(url, shown)
    ours, passed = _options(url)
    netloc, seeds = _seeds(url, shown, cluster=bool(ours.get("cluster")))
    parts = urlsplit(url)._replace(netloc=netloc)
    if not parts.hostname:
        raise ConfigurationError(f"broker URL {shown!r} names no host")
    db = parts.path.strip("/")
    _check_db(db, shown)
    for name in _SENTINEL_ONLY:
        if name in ours:
            raise ConfigurationError(f"option {name!r} is for redis+sentinel:// URLs ({shown!r})")
    client_url = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(passed), parts.fragment)
    )
    settings = RedisSettings(
        client_url=client_url,
        display_url=shown,
        seeds=seeds,
        **ours,  # type: ignore[arg-type]
    )
    _validate(settings, shown)
    return settings


def _seeds(url: str, shown: str, *, cluster: bool) -> tuple[str, tuple[tuple[str, int], ...]]:
    """For a URL naming several hosts: its first host's netloc (what redis-py parses)
    and every host as a seed; for one host: its netloc as given and no seeds."""
    netloc = urlsplit(url).netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if "," not in hosts:
        return netloc, ()
    if not cluster:
        raise ConfigurationError(
            f"broker URL {shown!r} names several hosts: that is for a Redis Cluster's "
            "seeds (add cluster=1) or for sentinels (redis+sentinel://)"
        )
    seeds = tuple(
        (host, port or DEFAULT_PORT)
        for host, port in host_ports(hosts, shown, "a cluster node's host:port")
    )
    host, port = seeds[0]
    return f"{userinfo}{at}{f'[{host}]' if ':' in host else host}:{port}", seeds


def _parse_sentinel(url: str, shown: str) -> RedisSettings:
    scheme, _, rest = url.partition("://")
    tls = scheme.lower().startswith("rediss")
    netloc, slash, tail = rest.partition("/")
    path = (slash + tail).partition("?")[0].partition("#")[0]
    netloc = netloc.partition("?")[0].partition("#")[0]
    userinfo, at, hosts = netloc.rpartition("@")
    sentinels = tuple(
        (host, port or DEFAULT_SENTINEL_PORT)
        for host, port in host_ports(hosts, shown, "a sentinel's host:port")
    )
    names = [p for p in path.split("/") if p]
    if not names:
        raise ConfigurationError(
            f"broker URL {shown!r} names no master: the path is /MASTER[/db], the name "
            "the sentinels monitor (e.g. redis+sentinel://127.0.0.1:26379/mymaster/0)"
        )
    if len(names) > 2:
        raise ConfigurationError(f"broker URL {shown!r}: the path is /MASTER[/db]")
    master = unquote(names[0])
    db = names[1] if len(names) == 2 else ""
    _check_db(db, shown)
    ours, passed = _options(url)
    # redis-py reads the data nodes' options from a plain URL; its host is not used.
    client_url = urlunsplit(
        ("rediss" if tls else "redis", f"{userinfo}{at}sentinel", f"/{db}", urlencode(passed), "")
    )
    settings = RedisSettings(
        client_url=client_url,
        display_url=shown,
        sentinels=sentinels,
        master=master,
        **ours,  # type: ignore[arg-type]
    )
    _validate(settings, shown)
    return settings


def _check_db(db: str, shown: str) -> None:
    if db and not (db.isascii() and db.isdigit()):
        raise ConfigurationError(
            f"broker URL {shown!r}: the path is the database number, got {db!r} (e.g. /0)"
        )


def _options(url: str) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """Our options, typed, and the redis-py ones to pass on as they were given."""
    given = query_params(url, {**_OURS, **dict.fromkeys(_REDIS_PY, str)})
    ours = {k: v for k, v in given.items() if k in _OURS}
    passed = [(k, str(v)) for k, v in given.items() if k in _REDIS_PY]
    return ours, passed


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
    max_job_size(s.max_job_size, MOST_JOB_SIZE, shown)
    if s.max_connections < 2:
        raise bad("max_connections must be >= 2 (a blocked read holds one)")
    _validate_failover(s, bad)


def _validate_failover(s: RedisSettings, bad: Callable[[str], ConfigurationError]) -> None:
    if s.sentinels and s.cluster:
        raise bad("cluster=1 and Sentinel exclude each other: a cluster fails over itself")
    if s.wait_replicas is not None and not 0 <= s.wait_replicas <= 16:
        raise bad("wait_replicas must be between 0 (do not wait) and 16")
    if not 0.01 <= s.wait_timeout <= 60:
        raise bad("wait_timeout must be between 0.01 and 60 seconds")
