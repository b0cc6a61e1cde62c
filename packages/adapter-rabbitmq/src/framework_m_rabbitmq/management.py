"""The RabbitMQ management HTTP API, for the one thing AMQP cannot do: policies.

Settings that RabbitMQ lets change at run time (the quorum queue's
``delivery-limit``) live in a policy instead of queue arguments, so changing
them is an update in place rather than a delete and re-declare.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from framework_m_core.ports import BrokerError, ConfigurationError

_TIMEOUT = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: it would carry the Authorization header elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy as the management API reads and writes it."""

    pattern: str
    definition: dict[str, Any]
    priority: int
    apply_to: str = "queues"

    def as_json(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "definition": self.definition,
            "priority": self.priority,
            "apply-to": self.apply_to,
        }

    def differences(self, current: Policy) -> list[str]:
        """What changes from ``current`` to this policy, as ``field old -> new``."""
        out = [
            f"{key} {current.definition.get(key)} -> {value}"
            for key, value in sorted(self.definition.items())
            if current.definition.get(key) != value
        ]
        out += [f"{k} dropped" for k in sorted(set(current.definition) - set(self.definition))]
        for name, old, new in (
            ("pattern", current.pattern, self.pattern),
            ("priority", current.priority, self.priority),
            ("apply-to", current.apply_to, self.apply_to),
        ):
            if old != new:
                out.append(f"{name} {old!r} -> {new!r}")
        return out


class ManagementAPI:
    """A minimal client of ``/api/policies``; credentials come from the amqp:// URL."""

    def __init__(
        self,
        base_url: str,
        amqp_url: str,
        *,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        verify: bool = True,
    ) -> None:
        base = urlsplit(base_url)
        if "@" in base.netloc:  # checked first: no message below may echo a password
            raise ConfigurationError(
                "the management URL must not hold credentials: the amqp:// URL's user is used"
            )
        if base.scheme not in ("http", "https") or not base.hostname:
            raise ConfigurationError(
                f"management must be an http:// or https:// URL, got {base_url!r}"
            )
        amqp = urlsplit(amqp_url)
        self.base_url = base_url.rstrip("/")
        self.vhost = unquote(amqp.path[1:]) if len(amqp.path) > 1 else "/"
        user, password = unquote(amqp.username or "guest"), unquote(amqp.password or "guest")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self._https = base.scheme == "https"
        self._tls = (cafile, certfile, keyfile, verify)
        self._opener: urllib.request.OpenerDirector | None = None

    @staticmethod
    def default_url(amqp_url: str) -> str:
        """The management listener's usual address: the broker's host, port 15672."""
        parts = urlsplit(amqp_url)
        host = parts.hostname or "localhost"
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if parts.scheme == "amqps" else "http"
        return f"{scheme}://{host}:{15671 if scheme == 'https' else 15672}"

    def _policy_url(self, name: str) -> str:
        return f"{self.base_url}/api/policies/{quote(self.vhost, safe='')}/{quote(name, safe='')}"

    def _request(
        self, method: str, url: str, body: dict[str, Any] | None = None, *, missing_ok: bool = False
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", self._auth)
        request.add_header("Content-Type", "application/json")
        try:
            with self._open(request) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            detail = exc.read()[:300].decode(errors="replace")
            raise BrokerError(
                f"management API {method} {url} answered {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BrokerError(
                f"cannot reach the management API at {self.base_url}: {reason}"
            ) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise BrokerError(f"management API {method} {url} answered with no JSON") from None

    def _open(self, request: urllib.request.Request) -> Any:
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
            if self._https:
                cafile, certfile, keyfile, verify = self._tls
                context = ssl.create_default_context(cafile=cafile)
                if certfile:
                    context.load_cert_chain(certfile, keyfile)
                if not verify:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                handlers.append(urllib.request.HTTPSHandler(context=context))
            self._opener = urllib.request.build_opener(*handlers)
        return self._opener.open(request, timeout=_TIMEOUT)

    async def queue_policy(self, queue: str) -> str | None:
        """The name of the policy in effect on ``queue`` (None: none, or no such queue)."""
        url = f"{self.base_url}/api/queues/{quote(self.vhost, safe='')}/{quote(queue, safe='')}"
        found = await asyncio.to_thread(self._request, "GET", url, missing_ok=True)
        policy = found.get("policy") if isinstance(found, dict) else None
        return str(policy) if policy else None

    async def get_policy(self, name: str) -> Policy | None:
        """The policy ``name`` in the URL's vhost, or None when there is none."""
        found = await asyncio.to_thread(
            self._request, "GET", self._policy_url(name), missing_ok=True
        )
        if found is None:
            return None
        if not isinstance(found, dict) or not isinstance(found.get("definition"), dict):
            raise BrokerError(f"management API returned an unexpected policy: {found!r:.200}")
        return Policy(
            pattern=str(found.get("pattern", "")),
            definition=dict(found["definition"]),
            priority=int(found.get("priority", 0)),
            apply_to=str(found.get("apply-to", "all")),
        )

    async def put_policy(self, name: str, policy: Policy) -> None:
        """Create or replace the policy ``name``."""
        await asyncio.to_thread(self._request, "PUT", self._policy_url(name), policy.as_json())

    async def delete_policy(self, name: str) -> None:
        """Delete the policy ``name`` (no error when it does not exist)."""
        await asyncio.to_thread(self._request, "DELETE", self._policy_url(name), missing_ok=True)
