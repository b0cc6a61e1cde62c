"""OpenTelemetry: an enqueue's span is the parent of each attempt's, through the message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from framework_m_core import App, JobContext, Ticker, decode_message
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.observability import tracing as fm_tracing
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fm_tracing.set_tracer_provider(provider)
    yield exporter
    fm_tracing.set_tracer_provider(None)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_each_attempt_is_a_child_of_the_enqueue_and_a_failure_is_an_error(
    memory: MemoryBroker, spans: InMemorySpanExporter
) -> None:
    app = App(backoff=0.01)

    @app.job(max_attempts=2)
    async def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    job_id = await memory.enqueue("flaky")
    [sent] = named(spans, "send flaky")
    assert sent.kind is SpanKind.PRODUCER
    assert sent.attributes is not None
    assert sent.attributes["messaging.message.id"] == job_id
    assert sent.attributes["framework_m.duplicate"] is False
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1)
    first, second = sorted(named(spans, "process flaky"), key=lambda s: s.start_time or 0)
    for span in (first, second):
        assert span.kind is SpanKind.CONSUMER
        assert span.context is not None
        assert sent.context is not None
        assert span.context.trace_id == sent.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == sent.context.span_id
    assert first.attributes is not None
    assert second.attributes is not None
    assert (first.attributes["framework_m.attempt"], second.attributes["framework_m.attempt"]) == (
        1,
        2,
    )
    assert first.status.status_code is StatusCode.ERROR
    assert "first try fails" in (first.status.description or "")
    assert [e.name for e in first.events] == ["exception"]
    assert first.attributes["framework_m.outcome"] == "retried"
    assert second.status.status_code is StatusCode.UNSET
    assert second.attributes["framework_m.outcome"] == "succeeded"


async def test_spans_inside_a_handler_join_the_job_s_trace(
    memory: MemoryBroker, spans: InMemorySpanExporter
) -> None:
    from opentelemetry import trace

    app = App()

    @app.job
    async def nested(ctx: JobContext) -> None:
        tracer = trace.get_tracer("app", tracer_provider=fm_tracing._provider)
        with tracer.start_as_current_span("query"):
            pass

    await memory.enqueue("nested")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1)
    [query] = named(spans, "query")
    [process] = named(spans, "process nested")
    assert query.parent is not None
    assert process.context is not None
    assert query.parent.span_id == process.context.span_id


async def test_a_ticked_job_hangs_under_the_publish_of_its_slot(
    memory: MemoryBroker, spans: InMemorySpanExporter
) -> None:
    app = App()

    @app.job(every=1)
    async def beat(ctx: JobContext) -> None: ...

    ticker = Ticker(app.jobs.values(), memory, grace=2)
    async with running_worker(app, memory, ticker=ticker) as worker:
        await wait_until(lambda: worker.stats.succeeded >= 1, timeout=10)
    sends = {s.context.span_id: s for s in named(spans, "send beat") if s.context is not None}
    [process, *_] = named(spans, "process beat")
    assert process.parent is not None
    publish = sends[process.parent.span_id]
    assert publish.attributes is not None
    assert process.attributes is not None
    assert publish.attributes["framework_m.slot"] == process.attributes["framework_m.slot"]
    assert publish.attributes["framework_m.deduplication_id"] == (
        f"tick:beat:{process.attributes['framework_m.slot']}"
    )


async def test_a_duplicate_enqueue_names_the_original_job(
    memory: MemoryBroker, spans: InMemorySpanExporter
) -> None:
    first = await memory.enqueue("job", deduplication_id="once")
    await memory.enqueue("job", deduplication_id="once")
    again = named(spans, "send job")[1]
    assert again.attributes is not None
    assert again.attributes["framework_m.duplicate"] is True
    assert again.attributes["framework_m.original_job_id"] == first


async def test_without_a_provider_messages_carry_no_trace_context(memory: MemoryBroker) -> None:
    await memory.enqueue("job")
    [delivery] = await memory.receive(1, 1)
    assert b'"meta"' not in delivery.body
    assert decode_message(delivery.body).meta == {}
