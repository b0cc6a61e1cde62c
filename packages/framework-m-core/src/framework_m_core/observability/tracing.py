"""OpenTelemetry spans for enqueues and attempts (the ``tracing`` extra:
``pip install './packages/framework-m-core[tracing]'``).

With ``opentelemetry-api`` installed and an SDK tracer provider set by the
application, every enqueue (and every tick) is a ``send {job}`` producer span whose
context travels in the message's ``meta``, and every attempt a ``process {job}``
consumer span, child of the enqueue that stored the job: a trace shows the request
that enqueued a job and each attempt at it; a ticked job's attempts hang under the
publish of its slot (``framework_m.slot``). A failed attempt's span has status
ERROR and the exception. Without the package or a provider this costs one check.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..ports.messages import JobMessage

if TYPE_CHECKING:
    from ..ports.records import PublishResult

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the extra is not installed
    trace = None  # type: ignore[assignment]

_SYSTEM = "framework_m"
_provider: Any = None  # set_tracer_provider(); None: OpenTelemetry's global one


def set_tracer_provider(provider: Any) -> None:
    """Record framework-m's spans with ``provider`` instead of the global one (None: the
    global again). For applications that keep several providers, and for tests."""
    if trace is None:
        raise RuntimeError(
            "opentelemetry-api is not installed: "
            "pip install './packages/framework-m-core[tracing]' (core's tracing extra)"
        )
    global _provider
    _provider = provider


def active() -> bool:
    """Whether spans are recorded: the API is installed and an SDK provider is set."""
    if trace is None:
        return False
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _tracer() -> Any:
    return trace.get_tracer("framework_m", tracer_provider=_provider)


def _attributes(message: JobMessage, operation: str, destination: str) -> dict[str, Any]:
    """What every span of ``message`` carries (OpenTelemetry's messaging names)."""
    attributes: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": destination,
        "messaging.message.id": message.id,
        "framework_m.job": message.job_name,
    }
    if message.scheduled_at is not None:
        attributes["framework_m.slot"] = message.scheduled_at
    return attributes


@contextlib.contextmanager
def sending(message: JobMessage, destination: str) -> Iterator[tuple[JobMessage, Any]]:
    """A producer span around a publish; yields the message carrying its context, and
    the span (None when tracing is off) for :func:`sent`."""
    if not active():
        yield message, None
        return
    attributes = _attributes(message, "send", destination)
    if message.deduplication_id is not None:
        attributes["framework_m.deduplication_id"] = message.deduplication_id
    with _tracer().start_as_current_span(
        f"send {message.job_name}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier = dict(message.meta)
        propagate.inject(carrier)
        yield dataclasses.replace(message, meta=carrier), span


def sent(span: Any, result: PublishResult) -> None:
    """Record on a producer span which job id the broker answered with."""
    if span is not None:
        span.set_attribute("framework_m.duplicate", result.duplicate)
        if result.duplicate:
            span.set_attribute("framework_m.original_job_id", result.job_id)


@contextlib.contextmanager
def processing(message: JobMessage, attempt: int, destination: str) -> Iterator[Any]:
    """A consumer span around one attempt, child of the enqueue's span when the message
    carries its context; yields the span (None when tracing is off)."""
    if not active():
        yield None
        return
    attributes = _attributes(message, "process", destination)
    attributes["framework_m.attempt"] = attempt
    parent = propagate.extract(message.meta) if message.meta else None
    with _tracer().start_as_current_span(
        f"process {message.job_name}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span


def finished(span: Any, outcome: str, error: BaseException | None, reason: str | None) -> None:
    """Record an attempt's outcome; a failure sets status ERROR with the exception."""
    if span is None:
        return
    span.set_attribute("framework_m.outcome", outcome)
    if reason is not None:
        if error is not None:
            span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, reason[:500]))
