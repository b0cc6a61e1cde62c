"""Who may read and who may change: tokens, the page's session cookie, its CSRF token.

* Changes need the change token (``M_CONSOLE_TOKEN``): ``Authorization: Bearer …``, or
  a session the page signed in with it, whose requests carry the session's CSRF token
  in ``X-CSRF-Token`` (a cross-site page can make the browser send the cookie, never
  that header: the console answers no CORS preflight). Without a change token the
  console changes nothing, and listens on loopback only.
* Reads are open, unless a read token (``M_CONSOLE_READ_TOKEN``) is set: then they need
  it or the change token, the same two ways.
* The session cookie is random, HttpOnly, SameSite=Strict (and Secure over HTTPS), kept
  in this process only, for :data:`SESSION_TTL` seconds.

Tokens are compared in constant time and never logged nor sent back.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError

Role = Literal["read", "change"]
COOKIE = "m_console"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL = 12 * 3600.0
MIN_TOKEN = 16  # characters: a shorter token guards nothing
_MAX_SESSIONS = 1000


@dataclass(frozen=True, slots=True)
class Session:
    role: Role
    csrf: str
    expires_at: float


def check_token(token: str | None, name: str) -> str | None:
    """``token`` (None or empty: none) when it is long enough to guard the console."""
    if not token:
        return None
    if len(token) < MIN_TOKEN:
        raise ConfigurationError(f"{name} must be at least {MIN_TOKEN} characters")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Guard:
    """The tokens and the sessions signed in with them."""

    def __init__(self, change_token: str | None, read_token: str | None) -> None:
        self.change_token = check_token(change_token, "M_CONSOLE_TOKEN")
        self.read_token = check_token(read_token, "M_CONSOLE_READ_TOKEN")
        self._sessions: dict[str, Session] = {}

    @property
    def changes_allowed(self) -> bool:
        return self.change_token is not None

    @property
    def reads_guarded(self) -> bool:
        return self.read_token is not None

    def check_bind(self, host: str) -> None:
        """A console that cannot guard changes listens on loopback only."""
        if self.change_token is None and not is_loopback(host):
            raise ConfigurationError(
                f"without M_CONSOLE_TOKEN the console serves reads only and listens on "
                f"loopback only, not on {host}: set M_CONSOLE_TOKEN (and, to guard reads "
                "too, M_CONSOLE_READ_TOKEN) or use --http 127.0.0.1:PORT"
            )

    def role_of_token(self, token: str) -> Role | None:
        if self.change_token is not None and hmac.compare_digest(
            token.encode(), self.change_token.encode()
        ):
            return "change"
        if self.read_token is not None and hmac.compare_digest(
            token.encode(), self.read_token.encode()
        ):
            return "read"
        return None

    def sign_in(self, token: str) -> tuple[str, Session] | None:
        """A new session for a valid token: its cookie value and the session."""
        role = self.role_of_token(token)
        if role is None:
            return None
        now = time.time()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]
        if len(self._sessions) >= _MAX_SESSIONS:  # the oldest goes first
            del self._sessions[min(self._sessions, key=lambda k: self._sessions[k].expires_at)]
        cookie = secrets.token_urlsafe(32)
        session = Session(role, secrets.token_urlsafe(32), now + SESSION_TTL)
        self._sessions[cookie] = session
        return cookie, session

    def session(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        session = self._sessions.get(cookie)
        if session is None or session.expires_at <= time.time():
            return None
        return session

    def sign_out(self, cookie: str | None) -> None:
        if cookie:
            self._sessions.pop(cookie, None)

    def role(
        self, authorization: str | None, cookie: str | None, csrf: str | None, unsafe: bool
    ) -> Role | None:
        """The role a request has: by its bearer token, else by its session (whose CSRF
        token an unsafe request must carry); None: no role at all."""
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return None
            return self.role_of_token(token.strip())
        session = self.session(cookie)
        if session is None:
            return None
        if unsafe and (csrf is None or not hmac.compare_digest(csrf, session.csrf)):
            return None
        return session.role
