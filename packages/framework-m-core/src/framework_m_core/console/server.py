"""The console's HTTP side: a Starlette app serving the page, its assets and the JSON API.

Every ``/api`` route is in the OpenAPI document (:mod:`.openapi`); reads and changes
are guarded as :mod:`.auth` says. Errors are JSON ``{"error": "..."}``: 400 for input
that cannot be carried out, 401 without a role, 403 with too little of one, 404 for
what is not there, 503 when the broker did not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import (
    BrokerError,
    ConfigurationError,
    InvalidJobError,
    InvalidMemoError,
    InvalidStateError,
)
from ..ports.capabilities import Capability
from . import auth, openapi
from .auth import Guard
from .hosts import HostCheck
from .views import SAMPLE_EVERY, Views, page_of

log = logging.getLogger("framework_m.console")

ASSETS = Path(__file__).parent / "assets"
MAX_BODY = 65_536  # bytes of a request body at most
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Handler = Callable[[Request], Awaitable[Any]]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=_HEADERS)


class Api:
    """The routes over one :class:`Views` and one :class:`Guard`."""

    def __init__(self, views: Views, guard: Guard) -> None:
        self.views = views
        self.guard = guard

    def _role(self, request: Request, unsafe: bool) -> auth.Role | None:
        return self.guard.role(
            request.headers.get("authorization"),
            request.cookies.get(auth.COOKIE),
            request.headers.get(auth.CSRF_HEADER),
            unsafe,
        )

    def reads(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if self.guard.reads_guarded and self._role(request, unsafe=False) is None:
                return _error(401, "reads need a token: sign in, or send Authorization: Bearer")
            return await self._answer(handler, request)

        return guarded

    def changes(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if not self.guard.changes_allowed:
                return _error(403, "changes are off: start the console with M_CONSOLE_TOKEN")
            if not _same_origin(request):
                return _error(403, "a request from another site changes nothing")
            role = self._role(request, unsafe=True)
            if role is None:
                return _error(
                    401,
                    "changes need the change token: sign in (and send X-CSRF-Token), or "
                    "send Authorization: Bearer",
                )
            if role != "change":
                return _error(403, "the read token changes nothing")
            response = await self._answer(handler, request)
            if response.status_code < 400:
                log.info("console: %s %s by %s", request.method, request.url.path, _peer(request))
            return response

        return guarded

    async def _answer(self, handler: Handler, request: Request) -> Response:
        try:
            result = await handler(request)
        except (ConfigurationError, InvalidJobError, InvalidStateError, InvalidMemoError) as exc:
            return _error(400, str(exc))
        except LookupError as exc:
            return _error(404, str(exc.args[0]) if exc.args else "not found")
        except BrokerError as exc:
            log.warning(
                "console: %s %s: the broker failed: %s", request.method, request.url.path, exc
            )
            return _error(503, f"the broker did not answer: {exc}")
        if isinstance(result, Response):
            return result
        return JSONResponse(result, headers=_HEADERS)

    # -- the routes ----------------------------------------------------------------------

    def routes(self) -> list[Route | Mount]:
        r, c = self.reads, self.changes
        return [
            Route("/", _page, methods=["GET"]),
            Mount("/assets", app=StaticFiles(directory=ASSETS), name="assets"),
            Route("/api/openapi.json", r(self.openapi), methods=["GET"]),
            Route("/api/session", self.session, methods=["GET"]),
            Route("/api/session", self.sign_in, methods=["POST"]),
            Route("/api/session", self.sign_out, methods=["DELETE"]),
            Route("/api/overview", r(self.overview), methods=["GET"]),
            Route("/api/schedules", r(self.schedules), methods=["GET"]),
            Route("/api/schedules/{name}/history", r(self.history), methods=["GET"]),
            Route("/api/schedules/{name}/pause", c(self.pause), methods=["POST"]),
            Route("/api/schedules/{name}/resume", c(self.resume), methods=["POST"]),
            Route("/api/schedules/{name}/trigger", c(self.trigger), methods=["POST"]),
            Route("/api/runtime-schedules", c(self.set_runtime), methods=["POST"]),
            Route("/api/runtime-schedules/{id}", c(self.delete_runtime), methods=["DELETE"]),
            Route("/api/replicas", r(self.replicas), methods=["GET"]),
            Route("/api/queues", r(self.queues), methods=["GET"]),
            Route("/api/dead-letters", r(self.dead_letters), methods=["GET"]),
            Route("/api/dead-letters/requeue", c(self.requeue), methods=["POST"]),
            Route("/api/dead-letters/purge", c(self.purge), methods=["POST"]),
            Route("/api/jobs", r(self.jobs), methods=["GET"]),
            Route("/api/jobs/cancel-waiting", c(self.cancel_waiting), methods=["POST"]),
            # a job id may hold "/": the cancel route is tried first for a POST
            Route("/api/jobs/{id:path}/cancel", c(self.cancel), methods=["POST"]),
            Route("/api/jobs/{id:path}", r(self.job), methods=["GET"]),
        ]

    async def openapi(self, request: Request) -> Any:
        return openapi.document()

    async def session(self, request: Request) -> Response:
        found = self.guard.session(request.cookies.get(auth.COOKIE))
        return JSONResponse(
            {
                "signed_in": found is not None,
                "role": found.role if found else None,
                "csrf": found.csrf if found else None,
                "changes_allowed": self.guard.changes_allowed,
                "reads_guarded": self.guard.reads_guarded,
            },
            headers=_HEADERS,
        )

    async def sign_in(self, request: Request) -> Response:
        if not _same_origin(request):
            return _error(403, "a request from another site signs nobody in")
        try:
            body = await _body(request)
        except ConfigurationError as exc:
            return _error(400, str(exc))
        token = body.get("token")
        signed = self.guard.sign_in(token) if isinstance(token, str) and token else None
        if signed is None:
            log.warning("console: a sign-in with a wrong token from %s", _peer(request))
            return _error(401, "that is not a console token")
        cookie, session = signed
        response = JSONResponse({"role": session.role, "csrf": session.csrf}, headers=_HEADERS)
        response.set_cookie(
            auth.COOKIE,
            cookie,
            max_age=int(auth.SESSION_TTL),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        if not _same_origin(request):
            return _error(403, "a request from another site signs nobody out")
        self.guard.sign_out(request.cookies.get(auth.COOKIE))
        response = JSONResponse({"signed_in": False}, headers=_HEADERS)
        response.delete_cookie(auth.COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def overview(self, request: Request) -> Any:
        return {
            **self.views.overview(),
            "changes_allowed": self.guard.changes_allowed,
            "reads_guarded": self.guard.reads_guarded,
        }

    async def schedules(self, request: Request) -> Any:
        return await self.views.schedules(page_of(request.query_params))

    def _signed(self, request: Request) -> str:
        """How a change was signed: the page's session or a bearer token."""
        return "bearer token" if request.headers.get("authorization") else "signed-in page"

    async def history(self, request: Request) -> Any:
        return await self.views.history(request.path_params["name"])

    async def pause(self, request: Request) -> Any:
        body = await _body(request)
        until = _until(body.get("until"))
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ConfigurationError("reason must be a string")
        by = f"console ({self._signed(request)} from {_peer(request)})"
        return await self.views.pause(request.path_params["name"], until, reason or None, by)

    async def resume(self, request: Request) -> Any:
        await _body(request)
        return await self.views.resume(request.path_params["name"])

    async def trigger(self, request: Request) -> Any:
        body = await _body(request)
        kwargs = body.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise ConfigurationError("kwargs must be a JSON object")
        return await self.views.trigger(request.path_params["name"], kwargs)

    async def set_runtime(self, request: Request) -> Any:
        return await self.views.set_runtime(await _body(request))

    async def delete_runtime(self, request: Request) -> Any:
        return await self.views.delete_runtime(request.path_params["id"])

    async def replicas(self, request: Request) -> Any:
        return await self.views.replicas()

    async def queues(self, request: Request) -> Any:
        return await self.views.queues()

    async def dead_letters(self, request: Request) -> Any:
        return await self.views.dead_letters(page_of(request.query_params))

    async def requeue(self, request: Request) -> Any:
        keys, job = _chosen(await _body(request))
        return await self.views.settle_dead(keys, requeue=True, job=job)

    async def purge(self, request: Request) -> Any:
        keys, job = _chosen(await _body(request))
        return await self.views.settle_dead(keys, requeue=False, job=job)

    async def jobs(self, request: Request) -> Any:
        params = request.query_params
        job = params.get("job")
        if job is not None and len(job) > 200:
            raise ConfigurationError("job must be at most 200 characters")
        return await self.views.jobs(params.get("state", ""), job, page_of(params))

    async def job(self, request: Request) -> Any:
        return await self.views.job(request.path_params["id"])

    async def cancel_waiting(self, request: Request) -> Any:
        job = (await _body(request)).get("job")
        if not isinstance(job, str) or not job or len(job) > 200:
            raise ConfigurationError("job must be a job's name (1 to 200 characters)")
        return await self.views.cancel_waiting(job)

    async def cancel(self, request: Request) -> Any:
        await _body(request)
        return await self.views.cancel(request.path_params["id"])


async def _page(request: Request) -> Response:
    return FileResponse(ASSETS / "index.html", headers=_HEADERS)


def _peer(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "?"


def _same_origin(request: Request) -> bool:
    """No Origin (not a browser's cross-site request), or one naming this console's
    host. The scheme is not compared: behind a TLS proxy the page is https and the
    console sees http."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object body (empty: ``{}``); ConfigurationError otherwise."""
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
        raise ConfigurationError(f"a request body must be at most {MAX_BODY} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ConfigurationError(f"a request body must be at most {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ConfigurationError("the body must be a JSON object")
    return body


def _until(value: object) -> float | None:
    """A pause's end: unix seconds, or an ISO 8601 time with its offset."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigurationError(f"until is not an ISO 8601 time: {value!r}") from None
        if when.tzinfo is None:
            raise ConfigurationError(f"until needs its offset or Z: {value!r}")
        return when.timestamp()
    raise ConfigurationError("until must be unix seconds or an ISO 8601 time")


def _chosen(body: dict[str, Any]) -> tuple[list[str] | None, str | None]:
    """The dead letters a requeue or purge is for: ``keys`` (a list of their keys) or
    ``job`` (every dead letter of that job), one of the two."""
    keys, job = body.get("keys"), body.get("job")
    if (keys is None) == (job is None):
        raise ConfigurationError("give keys (a list of dead-letter keys) or job (a name), not both")
    if job is not None:
        if not isinstance(job, str) or not job or len(job) > 200:
            raise ConfigurationError("job must be a job's name (1 to 200 characters)")
        return None, job
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise ConfigurationError("keys must be a non-empty list of dead-letter keys")
    if len(keys) > 1000:
        raise ConfigurationError("at most 1000 keys at once")
    return keys, None


class _HostGuard:
    """Answers 400, and nothing else, to a request whose ``Host`` is not the console's
    (:mod:`.hosts`)."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app, self.check = app, check
        self.refused: set[str] = set()  # hosts already logged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if not self.check.allows(host):
                if len(self.refused) < 100 and host not in self.refused:
                    self.refused.add(host or "")
                    log.warning("console: refused a request for host %r (not allowed)", host)
                response = _error(
                    400,
                    f"this console does not answer for host {host!r}: open it by its "
                    "address or localhost, or allow the name with --allowed-host",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build(
    views: Views,
    guard: Guard,
    *,
    sample_every: float = SAMPLE_EVERY,
    hosts: HostCheck | None = None,
) -> Starlette:
    """The console's ASGI app; it samples the queue's counts while it runs, and answers
    only requests for the hosts ``hosts`` allows (addresses and localhost by default)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stopping = asyncio.Event()
        task = asyncio.create_task(_sample(views, sample_every, stopping), name="queue samples")
        try:
            yield
        finally:
            stopping.set()  # it ends at its next turn even if a broker client eats the cancel
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return Starlette(
        routes=Api(views, guard).routes(),
        lifespan=lifespan,
        middleware=[Middleware(_HostGuard, check=hosts or HostCheck())],
    )


async def _sample(views: Views, every: float, stopping: asyncio.Event) -> None:
    if Capability.QUEUE_STATS not in views.broker.capabilities:
        return
    failing = False
    while not stopping.is_set():
        try:
            await views.sample()
            failing = False
        except BrokerError as exc:
            if not failing:
                log.warning("console: queue counts not sampled: %s", exc)
            failing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every)
