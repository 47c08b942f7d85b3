"""OpenTelemetry spans at enqueue and around handlers (pgjobq._tracing), with the SDK's in-memory exporter.

These pass a tracer provider of their own (tracer_provider=): the global
one can be set only once per process, and setting it here would trace the
enqueues of every other test of this process.  test_otel_worker.py runs a
real application with the global provider in a process of its own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import pgjobq
from pgjobq import Job, Snooze, _tracing

from helpers.processes import process_env
from helpers.sqlhelpers import Db, scalar


@dataclass
class Tracing:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def span(self, name: str) -> ReadableSpan:
        [span] = self.spans(name)
        return span


@pytest.fixture
def tracing() -> Tracing:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, exporter)


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


def parent_of(span: ReadableSpan) -> tuple[int, int] | None:
    return None if span.parent is None else (span.parent.trace_id, span.parent.span_id)


def linked(span: ReadableSpan) -> Sequence[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def traced_enqueue(db: Db, tracing: Tracing, headers: dict[str, str] | None = None) -> int:
    """An enqueue inside a span "request", as the client makes it (its send span, our provider)."""
    with (
        tracing.provider.get_tracer("app").start_as_current_span("request"),
        _tracing.send("emails", headers, tracer_provider=tracing.provider) as sending,
    ):
        job_id = pgjobq.enqueue(db, "emails", {}, headers=sending.headers, priority=5)
        sending.sent([job_id])
    return job_id


def claimed(db: Db) -> Job:
    [job] = pgjobq.claim(db, "emails", 1, "w1")
    return job


def sent_job(tracing: Tracing) -> Job:
    """A job as a worker claims it after a traced enqueue (the headers the send span gave it)."""
    with (
        tracing.provider.get_tracer("app").start_as_current_span("request"),
        _tracing.send("emails", None, tracer_provider=tracing.provider) as sending,
    ):
        sending.sent([7])
    headers = dict(sending.headers or {})
    return Job(
        id=7, queue="emails", payload={}, priority=5, attempts=1, max_attempts=3, lease=1, headers=headers
    )


def test_an_enqueue_sends_a_producer_span_whose_context_the_job_s_headers_carry(
    db: Db, tracing: Tracing
) -> None:
    job_id = traced_enqueue(db, tracing, {"tenant": "acme"})

    send = tracing.span("send emails")
    assert send.kind is SpanKind.PRODUCER
    assert parent_of(send) == ids(tracing.span("request"))
    assert dict(send.attributes or {}) == {
        "messaging.system": "pgjobq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job_id),
    }
    headers = scalar(db, "SELECT headers FROM jobq.jobs WHERE id = %s", (job_id,))
    assert headers == {"tenant": "acme", "traceparent": traceparent(send)}


def test_an_enqueue_many_sends_one_span_whose_context_every_job_carries(db: Db, tracing: Tracing) -> None:
    with _tracing.send("emails", None, count=3, tracer_provider=tracing.provider) as sending:
        job_ids = pgjobq.enqueue_many(db, "emails", [{}, {}, {}], headers=sending.headers)
        sending.sent(job_ids)

    send = tracing.span("send emails")
    assert send.kind is SpanKind.PRODUCER
    assert (send.attributes or {})["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in (send.attributes or {})
    stored = [row["headers"] for row in db.execute("SELECT headers FROM jobq.jobs ORDER BY id")]
    assert stored == [{"traceparent": traceparent(send)}] * 3


def test_the_handler_runs_in_a_consumer_span_of_the_enqueue_s_trace(tracing: Tracing) -> None:
    job = sent_job(tracing)

    with _tracing.process(job, "worker-1", tracer_provider=tracing.provider):
        pass

    send, process = tracing.span("send emails"), tracing.span("process emails")
    assert process.kind is SpanKind.CONSUMER
    assert parent_of(process) == ids(send)  # same trace: a child of the creation context
    assert linked(process) == [ids(send)]  # and linked to it, as the conventions ask
    assert dict(process.attributes or {}) == {
        "messaging.system": "pgjobq",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": "7",
        "messaging.client.id": "worker-1",
        "pgjobq.job.attempt": 1,
        "pgjobq.job.priority": 5,
    }
    assert process.status.status_code is StatusCode.UNSET


def test_a_failing_handler_s_span_records_the_exception_and_the_error(tracing: Tracing) -> None:
    job = sent_job(tracing)

    with (
        pytest.raises(KeyError),
        _tracing.process(job, "worker-1", tracer_provider=tracing.provider),
    ):
        raise KeyError("missing")

    process = tracing.span("process emails")
    assert process.status.status_code is StatusCode.ERROR
    assert (process.attributes or {})["error.type"] == "builtins.KeyError"
    assert [event.name for event in process.events] == ["exception"]


def test_a_snoozing_handler_s_span_is_no_error(tracing: Tracing) -> None:
    job = sent_job(tracing)

    with pytest.raises(Snooze), _tracing.process(job, "worker-1", tracer_provider=tracing.provider):
        raise Snooze(60)

    process = tracing.span("process emails")
    assert process.status.status_code is StatusCode.UNSET
    assert not process.events


def test_headers_that_carry_a_trace_context_keep_it_and_the_send_span_links_to_it(
    db: Db, tracing: Tracing
) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job_id = traced_enqueue(db, tracing, {"traceparent": own, "tracestate": "vendor=1"})

    send = tracing.span("send emails")
    assert send.kind is SpanKind.CLIENT  # its context is not the message's creation context
    assert linked(send) == [(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)]
    headers = scalar(db, "SELECT headers FROM jobq.jobs WHERE id = %s", (job_id,))
    assert headers == {"traceparent": own, "tracestate": "vendor=1"}


ORDERS = """
CREATE TABLE orders (id bigint PRIMARY KEY);
CREATE FUNCTION order_placed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobq.enqueue('emails', jsonb_build_object('order', NEW.id));
    RETURN NEW;
END $$;
CREATE TRIGGER orders_placed AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION order_placed();
"""


def test_a_job_a_trigger_enqueues_joins_the_trace_of_the_transaction_that_set_pgjobq_traceparent(
    db: Db, tracing: Tracing
) -> None:
    db.execute(ORDERS)
    with tracing.provider.get_tracer("app").start_as_current_span("place order"):
        context: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(context)
        with db.transaction():
            # SET LOCAL pgjobq.traceparent = '00-...', with the value as a parameter
            db.execute("SELECT set_config('pgjobq.traceparent', %s, true)", (context["traceparent"],))
            db.execute("INSERT INTO orders VALUES (1)")
    job = claimed(db)

    with _tracing.process(job, "worker-1", tracer_provider=tracing.provider):
        pass

    assert job.headers == {"traceparent": context["traceparent"]}
    assert parent_of(tracing.span("process emails")) == ids(tracing.span("place order"))


def test_without_a_tracer_provider_nothing_is_added_to_the_headers(db: Db) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), (
        "a test of this process set the global tracer provider: every enqueue now traces"
    )
    given = {"tenant": "acme"}
    with _tracing.send("emails", given) as sending:
        assert sending.headers is given

    pgjobq.enqueue(db, "emails", {}, headers=given)
    pgjobq.enqueue(db, "emails", {})

    stored = [row["headers"] for row in db.execute("SELECT headers FROM jobq.jobs ORDER BY id")]
    assert stored == [given, None]  # a job enqueued without headers has none stored, not even {}


WITHOUT_OPENTELEMETRY = """
import sys
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed: its import fails
import psycopg, pgjobq
from pgjobq import _tracing
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    pgjobq.enqueue(conn, "emails", {}, headers={"tenant": "acme"})
    [job] = pgjobq.claim(conn, "emails", 1, "w1")
    with _tracing.process(job, "w1"):
        pass
    print(job.headers)
"""


def test_without_opentelemetry_installed_enqueue_and_handlers_work_untraced(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY, dsn],
        env=process_env(dsn),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'tenant': 'acme'}"


PRINT_HEADERS = """
import sys
import psycopg, pgjobq
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    job_id = pgjobq.enqueue(conn, "emails", {})
    print(sorted(conn.execute("SELECT headers FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()[0]))
"""


def test_a_tracer_provider_named_by_the_environment_traces_enqueues(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRINT_HEADERS, dsn],
        env=process_env(dsn, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['traceparent']"


def test_the_quick_check_still_finds_the_api_s_provider_slot() -> None:
    # pgjobq._tracing reads it to skip get_tracer_provider()'s look-up of the environment when untraced;
    # without it the check still works, through get_tracer_provider(), only slower
    assert hasattr(trace, "_TRACER_PROVIDER"), (
        "opentelemetry-api renamed _TRACER_PROVIDER: see _tracing._tracer"
    )


def test_spans_a_coroutine_handler_makes_after_an_await_are_children_of_its_process_span(
    tracing: Tracing,
) -> None:
    job = sent_job(tracing)

    async def handler() -> None:
        with _tracing.process(job, "worker-1", tracer_provider=tracing.provider):
            await asyncio.sleep(0)
            with tracing.provider.get_tracer("app").start_as_current_span("send email"):
                await asyncio.sleep(0)

    asyncio.run(handler())

    assert parent_of(tracing.span("send email")) == ids(tracing.span("process emails"))
