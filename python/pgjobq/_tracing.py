"""OpenTelemetry spans for enqueue and for handlers, when an application traces.

The client calls :func:`send` around each enqueue, the workers call
:func:`process` around each handler.  They follow the OpenTelemetry
messaging semantic conventions (semconv 1.44.0; "Development" status):

- ``send <queue>``, a PRODUCER span around ``enqueue`` (one job:
  ``messaging.message.id``) or ``enqueue_many`` (``messaging.batch.message_count``;
  every job of the batch carries the same context).  Its context goes into
  the job's headers as the W3C trace context, under the top-level keys
  ``traceparent`` (and ``tracestate`` when there is one), the keys the SQL
  side fills from the setting ``pgjobq.traceparent``.  Headers that carry a
  ``traceparent`` already are left as they are (the caller's own creation
  context): the span is then a CLIENT span linked to that context.
- ``process <queue>``, a CONSUMER span around the handler, a child of the
  context in the job's headers and linked to it as well (the conventions
  ask for the link; the parent puts producer and handler in one trace).  An
  exception is recorded on it, with status ERROR and ``error.type`` (the
  exception's qualified class name); ``Snooze`` is not an error.

Only opentelemetry-api is needed; the application brings the SDK and sets
its tracer provider.  Without opentelemetry-api (its import is tried once),
or while no tracer provider is set (the API's default proxy), each call
costs a cached look-up and a check, well under a microsecond, and hands
back a context manager that does nothing: headers pass through untouched
(the same object).  ``tracer_provider=`` overrides the global provider
(tests use it: the global one can be set only once per process).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pgjobq._errors import Snooze
from pgjobq._job import Job
from pgjobq._version import PACKAGE_VERSION

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["SCHEMA_URL", "TRACE_HEADERS", "Sending", "process", "send"]

# The semantic conventions these spans follow (messaging spans are "Development" there).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
# The header keys that carry the W3C trace context, as the propagator and the SQL side name them.
TRACE_HEADERS = ("traceparent", "tracestate")
_SYSTEM = "pgjobq"


class Sending:
    """What :func:`send` yields: the headers to store with the job(s), and where to report their ids."""

    __slots__ = ("_count", "_span", "headers")

    def __init__(self, headers: Mapping[str, Any] | None, span: Span | None = None, count: int = 1) -> None:
        # the job's headers, with the trace context added when a span is being sent
        self.headers = headers
        self._span = span
        self._count = count

    def sent(self, ids: Sequence[int | None]) -> None:
        """The enqueue returned these ids (recorded on the span: the id of a single job)."""
        if self._span is not None and self._count == 1 and len(ids) == 1 and ids[0] is not None:
            self._span.set_attribute("messaging.message.id", str(ids[0]))

    # Untraced, send() hands out the Sending itself as the context manager: nothing to enter or leave.
    def __enter__(self) -> Sending:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


# What process() hands out untraced (nullcontext is reusable and reentrant).
_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext()


@functools.cache
def _api() -> ModuleType | None:
    """opentelemetry.trace, or None when opentelemetry-api is not installed (tried once)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def _tracer(provider: TracerProvider | None) -> Tracer | None:
    """pgjobq's tracer from provider (default: the global one), or None when nothing traces."""
    trace = _api()
    if trace is None:
        return None
    if provider is None:
        # The global provider unset (and none named by OTEL_PYTHON_TRACER_PROVIDER, which
        # get_tracer_provider would load): read without get_tracer_provider's look-up of the
        # environment, which costs more than everything else here.
        if getattr(trace, "_TRACER_PROVIDER", ...) is None and not _provider_from_environment():
            return None
        provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None  # the API's default: no SDK set (a proxy delegates once one is)
    try:
        return _tracer_of(provider)
    except TypeError:  # a provider that cannot be hashed: asked each time
        tracer: Tracer = provider.get_tracer("pgjobq", PACKAGE_VERSION, schema_url=SCHEMA_URL)
        return tracer


@functools.cache
def _provider_from_environment() -> bool:
    """Whether OTEL_PYTHON_TRACER_PROVIDER names a provider (read once; the API reads it once too)."""
    return "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


@functools.lru_cache(maxsize=8)
def _tracer_of(provider: TracerProvider) -> Tracer:
    """provider's tracer for pgjobq, made once (an SDK makes a new one, for microseconds, per ask)."""
    return provider.get_tracer("pgjobq", PACKAGE_VERSION, schema_url=SCHEMA_URL)


def _trace_context(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C trace context in headers (only string values count), as a propagator's carrier."""
    if not headers:
        return {}
    return {key: value for key in TRACE_HEADERS if isinstance(value := headers.get(key), str)}


@contextlib.contextmanager
def _recording_failure(span: Span) -> Iterator[None]:
    """Records an exception raised in the block on span (status ERROR, error.type), and re-raises it."""
    try:
        yield
    except Snooze:
        raise  # not a failure: the job goes back for later, the attempt not counted
    except BaseException as exc:
        from opentelemetry.trace import Status, StatusCode

        kind = type(exc)
        span.record_exception(exc)
        span.set_attribute("error.type", f"{kind.__module__}.{kind.__qualname__}")
        span.set_status(Status(StatusCode.ERROR, str(exc) or kind.__name__))
        raise


def send(
    queue: str,
    headers: Mapping[str, Any] | None,
    *,
    count: int = 1,
    tracer_provider: TracerProvider | None = None,
) -> AbstractContextManager[Sending]:
    """Around one enqueue (count 1) or enqueue_many (count n) into queue: a PRODUCER span when tracing.

    ``with send(queue, headers) as sending:`` store ``sending.headers``, then
    call ``sending.sent(ids)``.
    """
    tracer = _tracer(tracer_provider)
    if tracer is None:
        return Sending(headers)
    return _send(tracer, queue, headers, count)


@contextlib.contextmanager
def _send(tracer: Tracer, queue: str, headers: Mapping[str, Any] | None, count: int) -> Iterator[Sending]:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    given = _trace_context(headers)
    links: list[trace.Link] = []
    kind = trace.SpanKind.PRODUCER
    if "traceparent" in given:
        # the caller's own creation context: kept as it is, linked from a CLIENT span
        kind = trace.SpanKind.CLIENT
        linked = trace.get_current_span(propagator.extract(given)).get_span_context()
        if linked.is_valid:
            links.append(trace.Link(linked))
    attributes: dict[str, str | int] = {
        "messaging.system": _SYSTEM,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with tracer.start_as_current_span(
        f"send {queue}",
        kind=kind,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        stored: Mapping[str, Any] | None = headers
        if "traceparent" not in given:
            carrier: dict[str, Any] = dict(headers or {})
            for key in TRACE_HEADERS:  # a stale tracestate without its traceparent goes
                carrier.pop(key, None)
            propagator.inject(carrier)
            stored = carrier
        with _recording_failure(span):
            yield Sending(stored, span, count)


def process(
    job: Job, worker: str, *, tracer_provider: TracerProvider | None = None
) -> AbstractContextManager[None]:
    """Around one handler call: a CONSUMER span, child of and linked to the job's trace context."""
    tracer = _tracer(tracer_provider)
    if tracer is None:
        return _UNTRACED
    return _process(tracer, job, worker)


@contextlib.contextmanager
def _process(tracer: Tracer, job: Job, worker: str) -> Iterator[None]:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    given = _trace_context(job.headers)
    parent = None
    links: list[trace.Link] = []
    if "traceparent" in given:
        parent = TraceContextTextMapPropagator().extract(given)
        creation = trace.get_current_span(parent).get_span_context()
        if creation.is_valid:
            links.append(trace.Link(creation))
        else:
            parent = None  # not a traceparent after all: the span starts in the worker's context
    with (
        tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "messaging.client.id": worker,
                "pgjobq.job.attempt": job.attempts,
                "pgjobq.job.priority": job.priority,
            },
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span,
        _recording_failure(span),
    ):
        yield
