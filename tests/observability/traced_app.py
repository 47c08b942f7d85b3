"""An application that traces (the OpenTelemetry SDK as the global provider), run as its own process.

``python traced_app.py DSN``: inside a span "request", enqueues a job that
succeeds and one that fails for good on queue "emails", and, through
pgjobq.aio, one that succeeds on queue "async_emails"; runs a Worker
(burst) over the first queue and an AsyncWorker (burst) over the second,
then prints JSON: the jobs' headers, and every span the in-memory exporter
got.  Its own process: the global tracer provider can be set once per
process, and setting it in the test process would trace every other
test's enqueues.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgjobq
import pgjobq.aio


def handler(job: pgjobq.Job) -> None:
    if job.payload["fail"]:
        raise RuntimeError("asked to fail")


async def async_handler(job: pgjobq.Job) -> None:
    handler(job)


async def enqueue_async(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await pgjobq.aio.enqueue(conn, "async_emails", {"fail": False})


def described(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
    }


def main(dsn: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with trace.get_tracer("app").start_as_current_span("request"):
            ok = pgjobq.enqueue(conn, "emails", {"fail": False})
            bad = pgjobq.enqueue(conn, "emails", {"fail": True}, max_attempts=1)
            by_async = asyncio.run(enqueue_async(dsn))  # the task runs in a copy of this context
        settings = pgjobq.WorkerSettings(queue="emails", burst=True, poll_interval=0.1, name="traced-worker")
        pgjobq.Worker(dsn, handler, settings).run(install_signal_handlers=False)
        settings = dataclasses.replace(settings, queue="async_emails", name="traced-async-worker")
        asyncio.run(pgjobq.AsyncWorker(dsn, async_handler, settings).run(install_signal_handlers=False))
        names = {ok: "ok", bad: "bad", by_async: "async"}
        rows = conn.execute("SELECT id, status, headers FROM jobq.jobs WHERE id = ANY(%s)", (list(names),))
        jobs = {names[job_id]: {"status": s, "headers": h} for job_id, s, h in rows}
    print(json.dumps({"jobs": jobs, "spans": [described(span) for span in exporter.get_finished_spans()]}))


if __name__ == "__main__":
    main(sys.argv[1])
