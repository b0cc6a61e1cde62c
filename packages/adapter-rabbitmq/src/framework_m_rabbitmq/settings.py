"""``amqp://`` URL parsing and the names it derives: exchange, queues, policy, arguments."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from framework_m_core.ports import (
    DEFAULT_MAX_JOB_SIZE,
    ConfigurationError,
    host_ports,
    max_job_size,
    query_params,
    redact_url,
)

from .management import ManagementAPI, Policy

EXCHANGE_TYPE = "x-message-deduplication"
STORE_EXCHANGE_TYPE = "x-fm-store"  # framework-m's plugin: the store's records
# Retry delays are rounded up to one of these (ms); each has its own TTL queue,
# so a long delay never holds back a short one.
RETRY_BUCKETS_MS: tuple[int, ...] = (100, 250, 500, 1000, 2000, 5000, 10_000, 30_000)
RETRY_BUCKETS_MS += (60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000)

# Passed through to aio-pika's connection: TLS files, heartbeat, connection name.
_CONNECTION_OPTIONS = ("cafile", "certfile", "keyfile", "no_verify_ssl", "heartbeat", "name")
_OPTIONS: dict[str, type] = {
    "queue": str,
    "dedup_window": float,
    "cache_size": int,
    "cache_persistence": str,
    "store": bool,
    "prefetch": int,
    "delivery_limit": int,
    "management": str,
    "policy_priority": int,
    "max_job_size": int,
    "timeout": str,
    **{name: str for name in _CONNECTION_OPTIONS},
}
_QUEUE = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

# The most ids framework-m's exchange plugin keeps (x-cache-size).
MAX_CACHE_SIZE = 10_000_000
# RabbitMQ's max_message_size by default (16 MiB from 4.0, 128 MiB before), less room
# for the headers of a dead-letter copy: the most a job may be.
MOST_JOB_SIZE = (16 << 20) - (64 << 10)


@dataclass(frozen=True, slots=True)
class RabbitSettings:
    """Everything an ``amqp://`` URL configures, validated, and the names derived from it."""

    display_url: str
    connection_url: str = field(repr=False)  # for aio-pika: framework-m's own options removed
    # One URL a host of the URL, in its order (a cluster's nodes); the first is connection_url.
    connection_urls: tuple[str, ...] = field(default=(), repr=False)
    queue: str = "framework_m"
    dedup_window: float = 120.0
    cache_size: int = 1_000_000
    cache_persistence: str = "disk"
    store: bool = True  # off: no x-fm-store exchange (the community dedup plugin alone)
    prefetch: int = 100
    delivery_limit: int = 20
    policy_priority: int = 10
    max_job_size: int = DEFAULT_MAX_JOB_SIZE  # bytes an encoded job may have
    connect_timeout: float = 60.0
    management: ManagementAPI | None = field(default=None, repr=False)

    @property
    def exchange(self) -> str:
        return f"{self.queue}.dedup"

    @property
    def store_exchange(self) -> str:
        return f"{self.queue}.store"

    @property
    def store_args(self) -> dict[str, Any]:
        return {"x-store-persistence": self.cache_persistence}

    @property
    def jobs(self) -> str:
        return f"{self.queue}.jobs"

    @property
    def dead(self) -> str:
        return f"{self.queue}.dead"

    @property
    def policy_name(self) -> str:
        return f"framework-m.{self.queue}"

    def retry_queue(self, delay: float) -> tuple[str, int]:
        """The retry queue for ``delay`` seconds (rounded up to a bucket) and its TTL in ms."""
        ms = next((b for b in RETRY_BUCKETS_MS if b >= delay * 1000), RETRY_BUCKETS_MS[-1])
        return f"{self.queue}.retry.{ms}", ms

    @property
    def retry_queues(self) -> list[tuple[str, int]]:
        """Every bucket's retry queue and its TTL in ms (schema sync declares them all)."""
        return [(f"{self.queue}.retry.{ms}", ms) for ms in RETRY_BUCKETS_MS]

    @property
    def exchange_args(self) -> dict[str, Any]:
        return {
            "x-cache-size": self.cache_size,
            "x-cache-ttl": int(self.dedup_window * 1000),
            "x-cache-persistence": self.cache_persistence,
        }

    @property
    def jobs_args(self) -> dict[str, Any]:
        return {
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.dead,
        }

    def retry_args(self, ttl_ms: int) -> dict[str, Any]:
        """A retry bucket: a quorum queue whose TTL dead-letters into the jobs queue at
        least once (a classic queue's dead-lettering drops a message that expires while
        the jobs queue is not up yet, as after a broker restart)."""
        return {
            "x-queue-type": "quorum",
            "x-message-ttl": ttl_ms,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.jobs,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }

    @property
    def policy(self) -> Policy:
        """The policy holding the jobs queue's run-time settings."""
        return Policy(
            pattern=f"^{re.escape(self.jobs)}$",
            definition={"delivery-limit": self.delivery_limit},
            priority=self.policy_priority,
        )


def parse_url(url: str) -> RabbitSettings:
    """Parse and validate; raise :class:`ConfigurationError` naming the problem."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps"):
        raise ConfigurationError(f"not an amqp:// or amqps:// URL: {shown!r}")
    opts = query_params(url, _OPTIONS)
    queue = _queue(opts)
    persistence = _cache_persistence(opts)
    window, cache_size, prefetch, delivery_limit, priority = _sizes(opts, shown)
    passed, timeout = _connection_options(opts)
    urls = tuple(
        urlunsplit((parts.scheme, netloc, parts.path, urlencode(passed), ""))
        for netloc in _netlocs(parts.netloc, shown)
    )
    first = urls[0]
    return RabbitSettings(
        display_url=shown,
        connection_url=first,
        connection_urls=urls,
        queue=queue,
        dedup_window=window,
        cache_size=cache_size,
        cache_persistence=persistence,
        store=bool(opts.get("store", True)),
        prefetch=prefetch,
        delivery_limit=delivery_limit,
        policy_priority=priority,
        max_job_size=_max_job_size(opts, shown),
        connect_timeout=float(timeout),
        management=_management(first, opts, passed),
    )


def _netlocs(netloc: str, shown: str) -> list[str]:
    """``user:password@host1:port1,host2:port2`` as one netloc a host, in order."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not hosts:
        return [netloc]  # aio-pika's default host
    host_ports(hosts, shown)  # each one a host:port
    return [f"{userinfo}{at}{host}" for host in hosts.split(",")]


def _queue(opts: dict[str, object]) -> str:
    """The queue name, the stem of every name derived from it."""
    queue = str(opts.get("queue", "framework_m"))
    if not _QUEUE.fullmatch(queue):
        raise ConfigurationError(
            f"queue must be 1-200 letters, digits, '_', '.', ':' or '-', got {queue!r}"
        )
    return queue


def _cache_persistence(opts: dict[str, object]) -> str:
    """Where the exchange keeps its dedup ids: ``disk`` or ``memory``."""
    persistence = str(opts.get("cache_persistence", "disk"))
    if persistence not in ("disk", "memory"):
        raise ConfigurationError(
            f"cache_persistence must be 'disk' or 'memory', got {persistence!r}"
        )
    return persistence


def _sizes(opts: dict[str, object], shown: str) -> tuple[float, int, int, int, int]:
    """dedup_window, cache_size, prefetch, delivery_limit and policy_priority, checked."""
    window = float(str(opts.get("dedup_window", 120.0)))
    cache_size, prefetch, delivery_limit, priority = (
        int(str(opts.get(key, default)))
        for key, default in (
            ("cache_size", 1_000_000),
            ("prefetch", 100),
            ("delivery_limit", 20),
            ("policy_priority", 10),
        )
    )
    if min(window, cache_size, prefetch, delivery_limit) <= 0:
        raise ConfigurationError(
            f"dedup_window, cache_size, prefetch and delivery_limit must be positive in {shown!r}"
        )
    if cache_size > MAX_CACHE_SIZE:
        raise ConfigurationError(
            f"cache_size {cache_size} is over the exchange's limit of {MAX_CACHE_SIZE:,} ids"
        )
    return window, cache_size, prefetch, delivery_limit, priority


def _max_job_size(opts: dict[str, object], shown: str) -> int:
    """The most bytes an encoded job may have, checked."""
    given = opts.get("max_job_size", DEFAULT_MAX_JOB_SIZE)
    return max_job_size(int(str(given)), MOST_JOB_SIZE, shown)


def _connection_options(opts: dict[str, object]) -> tuple[dict[str, str], str]:
    """The checked options passed through to aio-pika (with the connection's name),
    and the connect timeout (whole seconds, as text)."""
    passed = {k: str(v) for k, v in opts.items() if k in _CONNECTION_OPTIONS}
    timeout = str(opts.get("timeout", "60"))
    for name, value in (("heartbeat", passed.get("heartbeat", "60")), ("timeout", timeout)):
        if not value.isdigit():
            raise ConfigurationError(f"{name} must be whole seconds, got {value!r}")
    if passed.get("no_verify_ssl", "0") not in ("0", "1"):
        raise ConfigurationError("no_verify_ssl must be 0 or 1")
    for file in ("cafile", "certfile", "keyfile"):
        if file in passed and not os.path.isfile(passed[file]):
            raise ConfigurationError(f"{file} {passed[file]!r} is not a readable file")
    passed.setdefault("name", "framework-m")  # the connection's name in the management UI
    return passed, timeout


def _management(url: str, opts: dict[str, object], passed: dict[str, str]) -> ManagementAPI | None:
    """The management API the URL names (by default the broker's own), None for ``off``."""
    management = str(opts.get("management", ManagementAPI.default_url(url)))
    if management == "off":
        return None
    return ManagementAPI(
        management,
        url,
        cafile=passed.get("cafile"),
        certfile=passed.get("certfile"),
        keyfile=passed.get("keyfile"),
        verify=passed.get("no_verify_ssl", "0") == "0",
    )
