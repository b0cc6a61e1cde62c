"""``nats://`` URL parsing: servers, credentials, TLS and stream settings, all validated."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from framework_m_core.ports import ConfigurationError, options_of, query_params, redact_url

DEFAULT_STREAM = "framework_m_jobs"
DEFAULT_PREFIX = "framework_m"
DEFAULT_CONSUMER = "framework_m_workers"
DEFAULT_DEDUP_WINDOW = 120.0
DEFAULT_MAX_AGE = 7 * 24 * 3600.0
DEFAULT_DEAD_MAX_AGE = 30 * 24 * 3600.0
DEFAULT_ACK_WAIT = 30.0

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_QUEUE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_SUBJECT = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


@dataclass(frozen=True)
class NatsSettings:
    """Everything a ``nats://`` or ``tls://`` URL can say."""

    servers: list[str]
    display_url: str
    queue: str = DEFAULT_PREFIX  # names the stream, subjects and consumer unless given
    stream: str = DEFAULT_STREAM
    subject_prefix: str = DEFAULT_PREFIX
    consumer: str = DEFAULT_CONSUMER
    dead_letter_stream: str = ""
    dedup_window: float = DEFAULT_DEDUP_WINDOW
    max_age: float = DEFAULT_MAX_AGE
    dead_letter_max_age: float = DEFAULT_DEAD_MAX_AGE
    replicas: int = 1
    ack_wait: float = DEFAULT_ACK_WAIT
    max_ack_pending: int = 10_000
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds: str | None = None
    nkey: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    use_tls: bool = False
    connect_timeout: float = 5.0
    name: str = "framework-m"

    @property
    def jobs_subject(self) -> str:
        return f"{self.subject_prefix}.jobs"

    @property
    def dead_subject(self) -> str:
        return f"{self.subject_prefix}.dead"

    @property
    def delayed_subject(self) -> str:
        """Where delayed jobs wait, in the job stream, until they are due."""
        return f"{self.subject_prefix}.delayed"

    @property
    def delayed_consumer(self) -> str:
        """The durable consumer that moves due delayed jobs to the jobs subject."""
        return f"{self.consumer}_delayed"

    def connect_options(self, first_rounds: int) -> dict[str, Any]:
        """nats-py's ``connect`` options: servers, credentials, TLS, reconnect rounds."""
        secrets = {"user": self.user, "password": self.password, "token": self.token}
        secrets |= {"user_credentials": self.creds, "nkeys_seed": self.nkey}
        options: dict[str, Any] = {k: v for k, v in secrets.items() if v}
        options |= {"servers": self.servers, "name": self.name, "allow_reconnect": True}
        options |= {"connect_timeout": self.connect_timeout, "reconnect_time_wait": 0.5}
        options["max_reconnect_attempts"] = first_rounds
        if (tls := self.ssl_context()) is not None:
            options["tls"] = tls
        return options

    def ssl_context(self) -> ssl.SSLContext | None:
        if not (self.use_tls or self.tls_ca or self.tls_cert):
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        return ctx


def queue_names(queue: str) -> dict[str, str]:
    """The stream, subject prefix and consumer of the queue named ``queue``; the default
    queue, ``framework_m``, has ``framework_m_jobs``, ``framework_m.*`` and
    ``framework_m_workers``."""
    return {"stream": f"{queue}_jobs", "subject_prefix": queue, "consumer": f"{queue}_workers"}


# Every field is an option, but for what the URL's other parts say.
_OPTIONS = options_of(
    NatsSettings, exclude=("servers", "display_url", "user", "password", "use_tls")
)


def parse_url(url: str) -> NatsSettings:
    """Parse and validate a broker URL; raise :class:`ConfigurationError` naming the problem."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("nats", "tls"):
        raise ConfigurationError(f"not a nats:// or tls:// URL: {shown!r}")
    netloc = parts.netloc
    user = password = token = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user, password = (unquote(p) for p in userinfo.split(":", 1))
        else:
            token = unquote(userinfo)
    hosts = [h for h in netloc.split(",") if h]
    if not hosts:
        raise ConfigurationError(f"broker URL {shown!r} names no server")
    scheme = "tls" if parts.scheme == "tls" else "nats"
    servers = [f"{scheme}://{h if ':' in h else h + ':4222'}" for h in hosts]
    opts = query_params(url, _OPTIONS)
    if "token" in opts:
        token = str(opts.pop("token"))
    if "queue" in opts:
        queue = str(opts["queue"])
        if not _QUEUE.match(queue):
            raise ConfigurationError(
                f"queue {queue!r} must be 1-100 letters, digits, '_' or '-' (in {shown!r})"
            )
        for option, value in queue_names(queue).items():
            opts.setdefault(option, value)
    settings = NatsSettings(
        servers=servers,
        display_url=shown,
        user=user,
        password=password,
        token=token,
        use_tls=parts.scheme == "tls",
        **opts,  # type: ignore[arg-type]
    )
    if not settings.dead_letter_stream:
        object.__setattr__(settings, "dead_letter_stream", f"{settings.stream}_dead")
    _validate(settings, shown)
    return settings


def _validate(s: NatsSettings, shown: str) -> None:
    """Raise :class:`ConfigurationError` naming the first thing wrong with ``s``, if any."""
    problem = _name_problem(s) or _limit_problem(s) or _file_problem(s)
    if problem is not None:
        raise ConfigurationError(f"{problem} (in {shown!r})")


def _name_problem(s: NatsSettings) -> str | None:
    """What is wrong with the stream, consumer and subject names, if anything."""
    for label, value in (
        ("stream", s.stream),
        ("consumer", s.consumer),
        ("dead_letter_stream", s.dead_letter_stream),
    ):
        if not _NAME.match(value):
            return f"{label} {value!r} must be letters, digits, '_' or '-'"
    if s.stream == s.dead_letter_stream:
        return "dead_letter_stream must differ from stream"
    if not _SUBJECT.match(s.subject_prefix):
        return f"subject_prefix {s.subject_prefix!r} must be dot-separated tokens"
    return None


def _limit_problem(s: NatsSettings) -> str | None:
    """What is wrong with the durations, counts and timeouts, if anything."""
    if not s.dedup_window > 0:
        return "dedup_window must be > 0 seconds"
    if s.max_age < s.dedup_window:
        return (
            f"max_age ({s.max_age:g}s) must be at least dedup_window ({s.dedup_window:g}s): "
            "JetStream forgets an id when its message is gone"
        )
    if s.dead_letter_max_age <= 0:
        return "dead_letter_max_age must be > 0 seconds"
    if not 1 <= s.replicas <= 5:
        return f"replicas must be 1 to 5, got {s.replicas}"
    if not s.ack_wait >= 0.5:
        return "ack_wait must be at least 0.5 seconds"
    if s.max_ack_pending < 1:
        return "max_ack_pending must be >= 1"
    if s.connect_timeout <= 0:
        return "connect_timeout must be > 0 seconds"
    return None


def _file_problem(s: NatsSettings) -> str | None:
    """What is wrong with the credential and TLS files, if anything."""
    for label, path in (
        ("creds", s.creds),
        ("nkey", s.nkey),
        ("tls_ca", s.tls_ca),
        ("tls_cert", s.tls_cert),
        ("tls_key", s.tls_key),
    ):
        if path is not None and not Path(path).is_file():
            return f"{label} file {path!r} does not exist"
    if s.tls_key and not s.tls_cert:
        return "tls_key needs tls_cert"
    return None
