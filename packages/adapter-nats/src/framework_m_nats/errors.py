"""nats-py's many exception types, turned into framework-m's one-line errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nats.errors
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

from framework_m_core.ports import BrokerError, SchemaConflictError

# Failures after which a publish is worth trying again (its Nats-Msg-Id makes that safe).
TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    NoStreamResponseError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
)


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, without nats-py's internals."""
    if isinstance(exc, APIError):
        if exc.code == 503 or isinstance(exc, ServiceUnavailableError):
            return "JetStream is not available on the server (start nats-server with -js)"
        text = exc.description or type(exc).__name__
        return f"{text} (code {exc.code}, err_code {exc.err_code})"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def server_errors(what: str) -> Iterator[None]:
    """Turn nats-py's errors raised inside the block into one-line
    :class:`BrokerError` exceptions."""
    try:
        yield
    except (BrokerError, SchemaConflictError):
        raise
    except (TimeoutError, nats.errors.Error) as exc:
        hint = ""
        if isinstance(exc, nats.errors.NoRespondersError | NoStreamResponseError):
            hint = " (is JetStream enabled on the server? start nats-server with -js)"
        raise BrokerError(f"{what} failed: {describe(exc)}{hint}") from None
