"""Prometheus metrics (the ``metrics`` extra, prometheus-client): what workers do, and the queues' state.

Two sources, exported apart because they are counted apart:

- :class:`WorkerMetrics`, a :class:`~pgjobq.WorkerObserver` that counts
  what one worker process does (``pgjobq_worker_*``: jobs claimed and
  finished, handler durations and waits, by queue and task; claim round
  trips, pending acknowledgements, reconnects).  Give it to the worker
  (``WorkerSettings(observers=[metrics])``); one instance may serve several
  workers of a process.
- :class:`QueueStateCollector`, a custom collector that reads
  ``jobq.metrics()`` at scrape time (``pgjobq_jobs{queue,status}``, ages,
  retention, table size and bloat, oldest transaction): the database's view, the same from
  every process, so run one per database (``pgjobq metrics --port``, or
  one worker's ``--metrics-port`` endpoint), never one per worker summed.

Each keeps its metrics in a :class:`prometheus_client.CollectorRegistry`
of its own unless given one, so several workers in a process (or tests) do
not collide.  To export through an application's existing endpoint, use
the global registry: ``WorkerMetrics(prometheus_client.REGISTRY)`` (once
per process: a registry refuses the same metric names twice) and
``prometheus_client.REGISTRY.register(QueueStateCollector(dsn))``.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from pgjobq._errors import ConfigurationError, first_line
from pgjobq._job import Job
from pgjobq._queries import statements
from pgjobq._worker.observe import Outcome, WorkerObserver

if TYPE_CHECKING:
    from typing import LiteralString

__all__ = [
    "QueueStateCollector",
    "WorkerMetrics",
    "serve_database_metrics",
    "start_worker_metrics",
]

logger = logging.getLogger("pgjobq.prometheus")

# Every outcome a worker reports (pgjobq._worker.observe.Outcome), so that each reads 0 before it
# first happens.
OUTCOMES: tuple[Outcome, ...] = ("done", "retried", "failed", "cancelled", "snoozed", "released", "lost")

# Handlers and waits run from milliseconds to hours; a claim is one round trip.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

# The task label of a plain job (Prometheus reads an empty label value as no label), and of the jobs of
# the tasks past WorkerMetrics' max_tasks: no task name can be either (jobq._check_task:
# ^[A-Za-z_][A-Za-z0-9_.:-]*$).
NO_TASK = ""
OTHER_TASKS = "(other)"


@dataclass(slots=True)
class _Series:
    """The labelled children of one queue and task, found with one lookup on the hot path."""

    queue: str
    task: str  # the label: the task's name, NO_TASK or OTHER_TASKS
    finished: dict[Outcome, Counter]  # by outcome, every one of OUTCOMES made at 0
    claimed: Counter
    handler: dict[Outcome, Histogram] = field(default_factory=dict)  # by outcome, made when first observed
    wait: Histogram | None = None  # made when first observed


class WorkerMetrics(WorkerObserver):
    """A worker's counters, histograms and gauges, kept in ``registry`` (default: a new one of its own).

    ==============================================================  =========  ===============================
    metric                                                          type       from
    ==============================================================  =========  ===============================
    ``pgjobq_worker_jobs_finished_total{queue,task,outcome}``       counter    how the database settled a job
    ``pgjobq_worker_handler_duration_seconds{queue,task,outcome}``  histogram  the handler's run time
    ``pgjobq_worker_wait_seconds{queue,task}``                      histogram  run_at to the handler's start
    ``pgjobq_worker_claimed_jobs_total{queue,task}``                counter    jobs claimed
    ``pgjobq_worker_claim_duration_seconds{queue}``                 histogram  a claim's round trip
    ``pgjobq_worker_acknowledgements_pending``                      gauge      results not yet sent
    ``pgjobq_worker_reconnects_total``                              counter    reconnections
    ==============================================================  =========  ===============================

    One instance may serve several workers of a process: the counts add up,
    and the pending gauge sums each worker's last count (told apart by the
    thread they report from, so two AsyncWorkers sharing one event loop
    share one count: give each its own WorkerMetrics and registry).

    outcome is one of done, retried, failed, cancelled, snoozed, released,
    lost (see :data:`pgjobq.Outcome`).  task is the job's task
    (``Job.task``), or ``""`` for a plain job (Prometheus reads
    an empty label value as no label: ``{task=""}`` selects the plain jobs).
    Every claim counts in the claim histogram, those that found nothing too,
    and its round trip includes the acknowledgements that travel with it
    (``jobq.complete_and_claim``); a claim over several queues at once is
    labelled with their names joined by commas.  No label ever holds a job
    id.

    Each label value makes series of its own, so task names are meant to be
    a small set that developers choose.  A producer that writes unbounded
    names (an id in the name, say) would swamp Prometheus: only the first
    ``max_tasks`` (default 100) task names this instance sees get series of
    their own; the jobs of any other count under ``task="(other)"``, and a
    warning says so once.  The series of a plain job's queue are made at 0
    by the first claim over that queue, those of a task by the claim of its
    first job, so that ``rate()`` and ``increase()`` see every change.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, max_tasks: int = 100) -> None:
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 0:
            raise ConfigurationError(f"max_tasks must be an integer >= 0, got {max_tasks!r}")
        self.registry = CollectorRegistry() if registry is None else registry
        self._finished = Counter(
            "pgjobq_worker_jobs_finished",
            "Jobs settled by this process's workers, by queue, task and outcome.",
            ["queue", "task", "outcome"],
            registry=self.registry,
        )
        self._handler = Histogram(
            "pgjobq_worker_handler_duration_seconds",
            "Run time of the handlers, by queue, task and outcome.",
            ["queue", "task", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._wait = Histogram(
            "pgjobq_worker_wait_seconds",
            "Seconds from a job's run_at (its enqueue, unless scheduled) to its handler's start, "
            "by queue and task.",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._claimed = Counter(
            "pgjobq_worker_claimed_jobs",
            "Jobs claimed by this process's workers, by queue and task.",
            ["queue", "task"],
            registry=self.registry,
        )
        self._claim = Histogram(
            "pgjobq_worker_claim_duration_seconds",
            "Round trip of a claim (several queues: their names joined by commas).",
            ["queue"],
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        )
        self._pending = Gauge(
            "pgjobq_worker_acknowledgements_pending",
            "Results the workers hold and have not yet sent to the database.",
            registry=self.registry,
        )
        # each worker's last count, by the thread it reports from (a Worker's own, an AsyncWorker's loop)
        self._pending_by_thread: dict[int, int] = {}
        self._pending.set_function(self._pending_total)
        self._reconnects = Counter(
            "pgjobq_worker_reconnects",
            "Times a worker lost its database connections and made them again.",
            registry=self.registry,
        )
        self._max_tasks = max_tasks
        # The hot path's cache: (queue, Job.task) -> its children, so that a job costs one dict lookup
        # rather than a labels() call (a lock and a tuple of str()) per metric.  Written under _lock,
        # read without it; it holds no name past max_tasks (their jobs share (queue, OTHER_TASKS)).
        self._series: dict[tuple[str, str | None], _Series] = {}
        self._claims: dict[str, Histogram] = {}  # by the claim's label (queue names joined by commas)
        self._tasks: set[str] = set()  # the task names with series of their own
        self._overflowed = False  # whether a task past max_tasks was seen (it is said once)
        self._lock = threading.Lock()

    def _series_of(self, queue: str, task: str | None) -> _Series:
        """The children of queue and task (Job.task), made at 0 when first asked for (so that rate() sees
        their first change)."""
        with self._lock:
            found = self._series.get((queue, task))
            if found is not None:
                return found
            if task is None:
                label = NO_TASK
            elif task in self._tasks or len(self._tasks) < self._max_tasks:
                self._tasks.add(task)
                label = task
            else:
                label = OTHER_TASKS
                if not self._overflowed:
                    self._overflowed = True
                    logger.warning(
                        "more than %d task names: the metrics count the jobs of task %r and any other new"
                        ' one under task="%s" (WorkerMetrics(max_tasks=...))',
                        self._max_tasks,
                        task,
                        OTHER_TASKS,
                    )
            key = (queue, None if task is None else label)
            series = self._series.get(key)
            if series is None:
                finished = {outcome: self._finished.labels(queue, label, outcome) for outcome in OUTCOMES}
                series = _Series(queue, label, finished, self._claimed.labels(queue, label))
                self._series[key] = series
            return series

    def claimed(self, queues: Sequence[str], jobs: Sequence[Job], seconds: float) -> None:
        for queue in queues:
            if (queue, None) not in self._series:
                self._series_of(queue, None)
        name = ",".join(queues)
        claim = self._claims.get(name)
        if claim is None:
            claim = self._claims[name] = self._claim.labels(name)
        claim.observe(seconds)
        for job in jobs:
            series = self._series.get((job.queue, job.task))
            if series is None:
                series = self._series_of(job.queue, job.task)
            series.claimed.inc()

    def started(self, job: Job, waited: float | None) -> None:
        if waited is None:
            return
        series = self._series.get((job.queue, job.task))
        if series is None:
            series = self._series_of(job.queue, job.task)
        wait = series.wait
        if wait is None:
            wait = series.wait = self._wait.labels(series.queue, series.task)
        wait.observe(waited)

    def finished(self, job: Job, outcome: Outcome, seconds: float | None) -> None:
        series = self._series.get((job.queue, job.task))
        if series is None:
            series = self._series_of(job.queue, job.task)
        finished = series.finished.get(outcome)
        if finished is None:  # an outcome missing from OUTCOMES (a test forbids it): counted all the same
            finished = series.finished[outcome] = self._finished.labels(series.queue, series.task, outcome)
        finished.inc()
        if seconds is not None:
            handler = series.handler.get(outcome)
            if handler is None:
                handler = series.handler[outcome] = self._handler.labels(series.queue, series.task, outcome)
            handler.observe(seconds)

    def pending(self, acknowledgements: int) -> None:
        with self._lock:
            self._pending_by_thread[threading.get_ident()] = acknowledgements

    def _pending_total(self) -> float:
        with self._lock:
            return float(sum(self._pending_by_thread.values()))

    def reconnected(self) -> None:
        self._reconnects.inc()


def _statement(name: str) -> LiteralString:
    """The statement called name in prometheus.sql (a constant of the package)."""
    return statements("pgjobq", "prometheus.sql")[name]  # type checkers read LiteralString as str


# jobq.metrics() rows as Prometheus gauges: metric -> (family, help, status label or None).
_PER_QUEUE: dict[str, tuple[str, str, str | None]] = {
    "jobs_runnable": ("pgjobq_jobs", "", "runnable"),
    "jobs_scheduled": ("pgjobq_jobs", "", "scheduled"),
    "jobs_running": ("pgjobq_jobs", "", "running"),
    "jobs_waiting": ("pgjobq_jobs", "", "waiting"),
    "jobs_failed": ("pgjobq_jobs", "", "failed"),
    "oldest_runnable_age_seconds": (
        "pgjobq_queue_oldest_runnable_age_seconds",
        "How long the oldest runnable job of the queue has waited (0: none).",
        None,
    ),
    "paused": ("pgjobq_queue_paused", "1 while the queue is paused (jobq.pause), else 0.", None),
    # extension 0.10.0: retention
    "jobs_past_retention": (
        "pgjobq_queue_jobs_past_retention",
        "Finished jobs of the queue whose retention ended and that jobq.tick has not deleted yet "
        "(counted up to 100,000 per final state).",
        None,
    ),
    "oldest_finished_age_seconds": (
        "pgjobq_queue_oldest_finished_age_seconds",
        "How long ago the queue's oldest finished (done, failed or cancelled) job finished (0: none).",
        None,
    ),
}
_JOBS_HELP = (
    "Unfinished jobs by queue and status: runnable (queued, due), scheduled (queued, due later), "
    "running, waiting (for parent jobs), failed (dead letters)."
)
_TABLE: dict[str, tuple[str, str]] = {
    "live_tuples": ("pgjobq_table_live_tuples", "Live rows of jobq.jobs (pg_stat_user_tables' estimate)."),
    "dead_tuples": ("pgjobq_table_dead_tuples", "Dead rows of jobq.jobs awaiting vacuum (estimate)."),
    "table_bytes": ("pgjobq_table_size_bytes", "Size of jobq.jobs with its indexes and TOAST."),
    "index_bytes": ("pgjobq_table_index_size_bytes", "Size of jobq.jobs' indexes alone (extension 0.10.0)."),
    "last_vacuum_timestamp_seconds": (
        "pgjobq_table_last_vacuum_timestamp_seconds",
        "Unix time of the last vacuum of jobq.jobs, manual or automatic (absent: never).",
    ),
    "oldest_transaction_age_seconds": (
        "pgjobq_oldest_transaction_age_seconds",
        "Age of the database server's oldest open transaction (another session's).",
    ),
    "oldest_xmin_age": (
        "pgjobq_oldest_xmin_age",
        "In transactions: how far the oldest snapshot holds back vacuum.",
    ),
}
_UP = "pgjobq_database_up"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def _family_of(metric: str, queue: str | None) -> tuple[str, str | None]:
    """The gauge family of a jobq.metrics() row, and its status label (pgjobq_jobs only)."""
    if queue is None:
        return _TABLE[metric][0] if metric in _TABLE else f"pgjobq_{_UNSAFE.sub('_', metric)}", None
    if metric in _PER_QUEUE:
        family, _, status = _PER_QUEUE[metric]
        return family, status
    return f"pgjobq_queue_{_UNSAFE.sub('_', metric)}", None


Rows = list[tuple[str, str | None, float]]


class QueueStateCollector(Collector):
    """The queues' state from ``jobq.metrics()``, read at scrape time; register one per database.

    database: a connection string, or a callable returning a new psycopg
    connection (the collector owns it, keeps it open between scrapes and
    makes another after an error).  A result is reused for
    ``cache_seconds`` (several scrapers or endpoints hit the database once),
    and the query is cut off after ``statement_timeout`` seconds (0: never;
    a connection string without connect_timeout gets one of as many seconds,
    at least 2).  When the
    database cannot answer, the scrape still succeeds with
    ``pgjobq_database_up 0`` (the error is logged once, until it answers
    again).  Exports:

    - ``pgjobq_jobs{queue,status}``: status runnable, scheduled, running,
      waiting, failed (queue depth: runnable + scheduled);
    - ``pgjobq_queue_oldest_runnable_age_seconds{queue}``,
      ``pgjobq_queue_paused{queue}``;
    - retention (extension 0.10.0; no samples from 0.9.0):
      ``pgjobq_queue_jobs_past_retention{queue}`` (finished jobs whose
      retention ended, not yet deleted by the tick: counted up to 100,000 per
      final state), ``pgjobq_queue_oldest_finished_age_seconds{queue}``
      (0: none), ``pgjobq_table_index_size_bytes``;
    - ``pgjobq_table_live_tuples``, ``pgjobq_table_dead_tuples``,
      ``pgjobq_table_size_bytes``, ``pgjobq_table_last_vacuum_timestamp_seconds``,
      ``pgjobq_oldest_transaction_age_seconds``, ``pgjobq_oldest_xmin_age``;
    - ``pgjobq_database_up``: 1 when the last query answered, else 0.

    A row of a later extension version that this module does not know is
    exported too, as ``pgjobq_queue_<metric>{queue}`` or ``pgjobq_<metric>``.
    """

    def __init__(
        self,
        database: str | Callable[[], psycopg.Connection[Any]],
        *,
        cache_seconds: float = 5.0,
        statement_timeout: float = 5.0,
    ) -> None:
        if not isinstance(database, str) and not callable(database):
            raise ConfigurationError(
                f"database must be a connection string or a callable, got {type(database).__name__}"
            )
        for name, value in (("cache_seconds", cache_seconds), ("statement_timeout", statement_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self._database = database
        self._cache_seconds = float(cache_seconds)
        # 0: no timeout (PostgreSQL's own meaning); else at least a millisecond
        self._timeout_ms = str(max(1, round(statement_timeout * 1000)) if statement_timeout > 0 else 0)
        self._connect_timeout = max(2, math.ceil(statement_timeout)) if statement_timeout > 0 else 0
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._read_at: float | None = None
        self._rows: Rows = []
        self._up = False
        self._failing = False

    def _connect(self) -> psycopg.Connection[Any]:
        if isinstance(self._database, str):
            options: dict[str, Any] = {"autocommit": True, "application_name": "pgjobq metrics"}
            if "connect_timeout" not in conninfo_to_dict(self._database):
                options["connect_timeout"] = self._connect_timeout  # a scrape must not hang on a dead host
            return psycopg.connect(self._database, **options)
        return self._database()

    def _query(self) -> Rows:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        conn = self._conn
        with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(_statement("statement_timeout"), {"milliseconds": self._timeout_ms})
            cur.execute(_statement("metrics"))
            return [(str(m), None if q is None else str(q), float(v)) for m, q, v in cur.fetchall()]

    def _read(self) -> tuple[Rows, bool]:
        """The rows of jobq.metrics() (cached for cache_seconds) and whether the database answered."""
        with self._lock:  # one query at a time; concurrent scrapes wait and share its result
            now = time.monotonic()
            if self._read_at is not None and now - self._read_at < self._cache_seconds:
                return self._rows, self._up
            try:
                self._rows, self._up = self._query(), True
                if self._failing:
                    logger.warning("jobq.metrics() answers again")
                self._failing = False
            except psycopg.Error as exc:
                if not self._failing:
                    logger.warning("jobq.metrics() failed: %s", first_line(exc))
                self._failing = True
                self._rows, self._up = [], False
                self.close()
            self._read_at = time.monotonic()
            return self._rows, self._up

    def close(self) -> None:
        """Closes the collector's connection (the next scrape opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def describe(self) -> Iterable[Metric]:
        """The known families, without asking the database (registration checks names with it)."""
        return list(self._families([], up=False).values())

    def collect(self) -> Iterable[Metric]:
        rows, up = self._read()
        return list(self._families(rows, up=up).values())

    def _families(self, rows: Rows, *, up: bool) -> dict[str, GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {
            "pgjobq_jobs": GaugeMetricFamily("pgjobq_jobs", _JOBS_HELP, labels=["queue", "status"])
        }
        for family, help_text, status in _PER_QUEUE.values():
            if status is None:
                families[family] = GaugeMetricFamily(family, help_text, labels=["queue"])
        for family, help_text in _TABLE.values():
            families[family] = GaugeMetricFamily(family, help_text)
        families[_UP] = GaugeMetricFamily(_UP, "1 when jobq.metrics() answered at the last scrape, else 0.")
        families[_UP].add_metric([], 1.0 if up else 0.0)
        for metric, queue, value in rows:
            family, status = _family_of(metric, queue)
            if family not in families:  # a row this module does not know (a later extension version)
                labels = [] if queue is None else ["queue"]
                families[family] = GaugeMetricFamily(family, f"jobq.metrics() row {metric}", labels=labels)
            labels_values = [] if queue is None else [queue] if status is None else [queue, status]
            families[family].add_metric(labels_values, value)
        return families


def _listen(registry: CollectorRegistry, port: int, host: str) -> threading.Thread:
    """Serves registry over HTTP on host:port from a daemon thread (prometheus_client's server)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(f"port must be an integer from 0 to 65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise ConfigurationError(f"host must be a host name or address, got {host!r}")
    try:
        _, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    return thread


def start_worker_metrics(port: int, host: str = "127.0.0.1", dsn: str | None = None) -> WorkerMetrics:
    """A new WorkerMetrics whose registry is served over HTTP on host:port (``/metrics``), from now on.

    With dsn, the endpoint also exports the queues' state (a QueueStateCollector
    of that database).  The server runs on a daemon thread until the process ends.
    ``pgjobq worker --metrics-port`` calls this and adds the result to the
    worker's observers.
    """
    metrics = WorkerMetrics()
    if dsn is not None:
        metrics.registry.register(QueueStateCollector(dsn))
    _listen(metrics.registry, port, host)
    return metrics


def serve_database_metrics(
    dsn: str, port: int, host: str = "127.0.0.1", *, stop: threading.Event | None = None
) -> None:
    """Serves the queues' state of dsn's database on host:port (``/metrics``) until stop is set (without
    one, until interrupted); ``pgjobq metrics`` sets it on SIGINT or SIGTERM."""
    registry = CollectorRegistry()
    collector = QueueStateCollector(dsn)
    registry.register(collector)
    thread = _listen(registry, port, host)
    try:
        if stop is None:
            thread.join()
        else:
            stop.wait()
    finally:
        collector.close()
