"""The queues' state for Prometheus (QueueStateCollector over jobq.metrics()), scraped over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from psycopg.rows import dict_row
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq.prometheus import QueueStateCollector, start_worker_metrics

from helpers.databases import connect_as, fresh_database
from helpers.processes import process_env, wait_until
from helpers.sqlhelpers import Connect, Db, scalar
from observability.scraping import Samples, free_port, scrape

STATUS_COUNTS = """
SELECT queue, CASE WHEN status = 'queued' AND run_at > now() THEN 'scheduled'
                   WHEN status = 'queued' THEN 'runnable' ELSE status::text END AS status,
       count(*) AS n
  FROM jobq.jobs
 WHERE status::text <> ALL (ARRAY['done', 'cancelled'])
 GROUP BY 1, 2
"""


def jobs_in_every_state(db: Db) -> None:
    """Queue a: 3 runnable, 2 scheduled, 1 running; queue b: 1 failed, 1 waiting (on a job of a)."""
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    for _ in range(4):
        pgjobq.enqueue(db, "a", {})
    for _ in range(2):
        pgjobq.enqueue(db, "a", {}, run_at=later)
    pgjobq.claim(db, "a", 1, "w1")
    pgjobq.enqueue(db, "b", {}, max_attempts=1)
    [doomed] = pgjobq.claim(db, "b", 1, "w1")
    pgjobq.fail(db, doomed.id, "boom", doomed.lease)
    parent = pgjobq.enqueue(db, "a", {}, run_at=later)
    pgjobq.enqueue(db, "b", {}, depends_on=[parent])


def queue_state(samples: Samples) -> dict[tuple[str, str], int]:
    """pgjobq_jobs{queue,status}, the nonzero ones."""
    found = {}
    for (name, labels), value in samples.values.items():
        if name == "pgjobq_jobs" and value:
            label = dict(labels)
            found[(label["queue"], label["status"])] = int(value)
    return found


def test_the_queue_state_endpoint_counts_what_the_table_holds(db: Db, dsn: str) -> None:
    jobs_in_every_state(db)
    port = free_port()
    start_worker_metrics(port, dsn=dsn)

    samples = scrape(port)

    expected = {(row["queue"], row["status"]): row["n"] for row in db.execute(STATUS_COUNTS)}
    assert expected == {
        ("a", "runnable"): 3,
        ("a", "scheduled"): 3,
        ("a", "running"): 1,
        ("b", "failed"): 1,
        ("b", "waiting"): 1,
    }
    assert queue_state(samples) == expected
    depth = scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'a' AND status = 'queued'")
    runnable = samples.value("pgjobq_jobs", queue="a", status="runnable")
    scheduled = samples.value("pgjobq_jobs", queue="a", status="scheduled")
    assert runnable is not None and scheduled is not None and runnable + scheduled == depth
    assert samples.value("pgjobq_database_up") == 1


def table_rows(db: Db) -> dict[str, float]:
    """jobq.metrics()' rows about the table (queue NULL): metric -> value."""
    rows = db.execute("SELECT metric, value FROM jobq.metrics() WHERE queue IS NULL").fetchall()
    return {row["metric"]: row["value"] for row in rows}


def tuples(db: Db) -> tuple[float, float]:
    """jobq.metrics()' live and dead tuples of jobq.jobs."""
    rows = table_rows(db)
    return rows["live_tuples"], rows["dead_tuples"]


def test_the_queue_state_endpoint_reports_age_pause_and_table_health(
    db: Db, dsn: str, connect: Connect
) -> None:
    pgjobq.enqueue(db, "a", {})
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 hour'")
    pgjobq.enqueue(db, "b", {}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    pgjobq.pause(db, "b")
    # an open transaction holding a snapshot, then transactions past it: an age and an xmin age to report
    holder = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")
    for _ in range(3):
        db.execute("SELECT txid_current()")
    # the two jobs inserted and the one updated, once this session has reported them to the statistics
    assert wait_until(lambda: tuples(db) == (2, 1)), f"the statistics never counted the writes: {tuples(db)}"
    port = free_port()
    start_worker_metrics(port, dsn=dsn)

    before = table_rows(db)
    samples = scrape(port)
    after = table_rows(db)

    age_a = samples.value("pgjobq_queue_oldest_runnable_age_seconds", queue="a")
    assert age_a is not None and 3600 <= age_a < 3700  # the hour, and the moments since the enqueue
    assert samples.value("pgjobq_queue_oldest_runnable_age_seconds", queue="b") == 0
    assert samples.value("pgjobq_queue_paused", queue="a") == 0
    assert samples.value("pgjobq_queue_paused", queue="b") == 1
    size = samples.value("pgjobq_table_size_bytes")
    assert size == scalar(db, "SELECT pg_total_relation_size('jobq.jobs')")
    # the table's health as jobq.metrics() gives it to the test: the same tuple counts, no vacuum yet,
    # and ages between those it read just before the scrape and just after
    assert samples.value("pgjobq_table_live_tuples") == after["live_tuples"] == before["live_tuples"]
    assert samples.value("pgjobq_table_dead_tuples") == after["dead_tuples"] == before["dead_tuples"]
    assert "last_vacuum_timestamp_seconds" not in after
    assert samples.value("pgjobq_table_last_vacuum_timestamp_seconds") is None
    for metric, family in [
        ("oldest_transaction_age_seconds", "pgjobq_oldest_transaction_age_seconds"),
        ("oldest_xmin_age", "pgjobq_oldest_xmin_age"),
    ]:
        scraped = samples.value(family)
        assert scraped is not None and 0 < before[metric] <= scraped <= after[metric], (metric, scraped)
    assert samples.families["pgjobq_jobs"] == "gauge"


def finish(db: Db, queue: str, n: int, finished_ago: timedelta) -> None:
    """n new jobs of queue, claimed and completed, their finished_at moved finished_ago into the past."""
    pgjobq.enqueue_many(db, queue, [{} for _ in range(n)])
    for job in pgjobq.claim(db, queue, n, "w1"):
        pgjobq.complete(db, job.id, job.lease)
    db.execute("UPDATE jobq.jobs SET finished_at = now() - %s WHERE queue = %s", (finished_ago, queue))


def test_the_queue_state_endpoint_reports_retention_and_index_size(db: Db, dsn: str) -> None:
    # "short" keeps done jobs a minute: its 3 jobs done an hour ago are past their retention (no tick ran
    # to delete them); "long" keeps them the default day: its 2 jobs done an hour ago are not
    pgjobq.configure_queue(db, "short", retain_done=timedelta(minutes=1))
    finish(db, "short", 3, timedelta(hours=1))
    finish(db, "long", 2, timedelta(hours=1))
    pgjobq.enqueue(db, "fresh", {})
    port = free_port()
    start_worker_metrics(port, dsn=dsn)

    samples = scrape(port)

    assert samples.value("pgjobq_queue_jobs_past_retention", queue="short") == 3
    assert samples.value("pgjobq_queue_jobs_past_retention", queue="long") == 0
    assert samples.value("pgjobq_queue_jobs_past_retention", queue="fresh") == 0
    for queue in ("short", "long"):
        age = samples.value("pgjobq_queue_oldest_finished_age_seconds", queue=queue)
        assert age is not None and 3600 <= age < 3700, (queue, age)  # the hour, and the moments since
    assert samples.value("pgjobq_queue_oldest_finished_age_seconds", queue="fresh") == 0
    assert samples.value("pgjobq_table_index_size_bytes") == scalar(db, "SELECT pg_indexes_size('jobq.jobs')")
    assert samples.families["pgjobq_queue_jobs_past_retention"] == "gauge"


def test_on_extension_0_9_0_the_retention_gauges_have_no_samples_and_the_rest_is_exported(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as old:
        old.execute("CREATE EXTENSION pgjobq VERSION '0.9.0'")
        old.execute("SELECT jobq.enqueue('a', '{}')")
        registry = CollectorRegistry()
        collector = QueueStateCollector(pg_server.dsn(dbname), cache_seconds=0)
        registry.register(collector)

        runnable = registry.get_sample_value("pgjobq_jobs", {"queue": "a", "status": "runnable"})
        past = registry.get_sample_value("pgjobq_queue_jobs_past_retention", {"queue": "a"})
        index_bytes = registry.get_sample_value("pgjobq_table_index_size_bytes")
        collector.close()

    assert (runnable, past, index_bytes) == (1, None, None)


def test_a_scrape_within_the_cache_time_reuses_the_last_answer(db: Db, dsn: str) -> None:
    pgjobq.enqueue(db, "a", {})
    cached, fresh = CollectorRegistry(), CollectorRegistry()
    cached.register(QueueStateCollector(dsn, cache_seconds=3600))
    fresh.register(QueueStateCollector(dsn, cache_seconds=0))
    labels = {"queue": "a", "status": "runnable"}
    assert cached.get_sample_value("pgjobq_jobs", labels) == 1
    assert fresh.get_sample_value("pgjobq_jobs", labels) == 1

    pgjobq.enqueue(db, "a", {})

    assert cached.get_sample_value("pgjobq_jobs", labels) == 1
    assert fresh.get_sample_value("pgjobq_jobs", labels) == 2


def test_a_database_that_cannot_answer_reads_as_down_and_the_scrape_still_succeeds(dsn: str) -> None:
    registry = CollectorRegistry()
    registry.register(QueueStateCollector(f"{dsn} dbname=no_such_database", cache_seconds=0))
    port = free_port()
    start_http_server(port, addr="127.0.0.1", registry=registry)

    samples = scrape(port)

    assert samples.value("pgjobq_database_up") == 0
    assert queue_state(samples) == {}


def test_a_blocked_query_is_cut_off_by_the_statement_timeout(db: Db, dsn: str, connect: Connect) -> None:
    pgjobq.enqueue(db, "a", {})
    collector = QueueStateCollector(dsn, cache_seconds=0, statement_timeout=0.2)
    registry = CollectorRegistry()
    registry.register(collector)
    locker = connect(autocommit=False)
    locker.execute("LOCK TABLE jobq.jobs IN ACCESS EXCLUSIVE MODE")

    assert registry.get_sample_value("pgjobq_database_up") == 0

    locker.rollback()
    assert registry.get_sample_value("pgjobq_database_up") == 1
    assert registry.get_sample_value("pgjobq_jobs", {"queue": "a", "status": "runnable"}) == 1
    collector.close()


def test_serve_database_metrics_serves_the_queue_state_until_stopped(db: Db, dsn: str) -> None:
    for _ in range(3):
        pgjobq.enqueue(db, "a", {})
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pgjobq.prometheus import serve_database_metrics;"
            " serve_database_metrics(sys.argv[1], int(sys.argv[2]))",
            dsn,
            str(port),
        ],
        env=process_env(dsn),
    )
    try:
        answered: list[Samples] = []

        def answers() -> bool:
            try:
                answered.append(scrape(port))
            except httpx.TransportError:
                return False
            return True

        assert wait_until(answers, timeout=30), "serve_database_metrics never answered"
        assert answered[-1].value("pgjobq_jobs", queue="a", status="runnable") == 3
        assert answered[-1].value("pgjobq_worker_reconnects_total") is None  # the database's view only
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.parametrize("port", [-1, 65536, "8080", True])
def test_a_bad_port_is_refused_naming_it(port: object) -> None:
    with pytest.raises(pgjobq.ConfigurationError, match="port must be an integer"):
        start_worker_metrics(port)  # type: ignore[arg-type]


def test_a_collector_can_be_given_a_function_that_connects(db: Db, dsn: str) -> None:
    pgjobq.enqueue(db, "a", {})
    collector = QueueStateCollector(lambda: psycopg.connect(dsn, row_factory=dict_row))
    registry = CollectorRegistry()
    registry.register(collector)

    assert registry.get_sample_value("pgjobq_jobs", {"queue": "a", "status": "runnable"}) == 1
    collector.close()


def test_a_port_in_use_is_refused_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(pgjobq.ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            start_worker_metrics(port)
