"""What a worker does, for Prometheus (WorkerMetrics, a WorkerObserver), scraped over HTTP."""

from __future__ import annotations

import logging
import threading
import typing
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from prometheus_client import CollectorRegistry

import pgjobq
from pgjobq import ConfigurationError, Job, Retry, WorkerSettings
from pgjobq._worker.observe import WorkerObserver
from pgjobq.prometheus import OUTCOMES, WorkerMetrics, start_worker_metrics

from helpers.fixtures import RunWorker
from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, wait_until
from helpers.sqlhelpers import Db, enqueue, statuses
from observability.scraping import Samples, free_port, scrape


def a_job(queue: str = "emails", job_id: int = 1, task: str | None = None) -> Job:
    return Job(id=job_id, queue=queue, payload={}, priority=0, attempts=1, max_attempts=3, lease=1, task=task)


PLAIN = {"queue": "emails", "task": ""}  # the labels of emails' plain jobs


def test_worker_metrics_count_what_the_observer_is_told() -> None:
    metrics = WorkerMetrics()
    job = a_job()

    metrics.claimed(["emails"], [job], 0.002)
    metrics.started(job, 0.5)
    metrics.finished(job, "done", 0.25)
    metrics.finished(a_job(job_id=2), "retried", 0.1)
    metrics.finished(a_job(job_id=3), "released", None)
    metrics.pending(4)
    metrics.reconnected()

    value = metrics.registry.get_sample_value
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "done"}) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "retried"}) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "released"}) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "failed"}) == 0
    assert value("pgjobq_worker_handler_duration_seconds_count", {**PLAIN, "outcome": "done"}) == 1
    assert value("pgjobq_worker_handler_duration_seconds_sum", {**PLAIN, "outcome": "done"}) == 0.25
    assert value("pgjobq_worker_handler_duration_seconds_count", {**PLAIN, "outcome": "released"}) is None
    assert value("pgjobq_worker_wait_seconds_sum", PLAIN) == 0.5
    assert value("pgjobq_worker_claimed_jobs_total", PLAIN) == 1
    assert value("pgjobq_worker_claim_duration_seconds_count", {"queue": "emails"}) == 1
    assert value("pgjobq_worker_acknowledgements_pending") == 4
    assert value("pgjobq_worker_reconnects_total") == 1


def test_a_claim_over_several_queues_is_labelled_with_all_their_names() -> None:
    metrics = WorkerMetrics()

    metrics.claimed(["a", "b"], [a_job("b")], 0.001)

    value = metrics.registry.get_sample_value
    assert value("pgjobq_worker_claim_duration_seconds_count", {"queue": "a,b"}) == 1
    assert value("pgjobq_worker_claimed_jobs_total", {"queue": "b", "task": ""}) == 1
    assert value("pgjobq_worker_claimed_jobs_total", {"queue": "a", "task": ""}) == 0


def test_the_per_job_metrics_are_labelled_with_the_job_s_task() -> None:
    metrics = WorkerMetrics()
    welcome, plain = a_job(task="send_welcome"), a_job(job_id=2)

    metrics.claimed(["emails"], [welcome, plain], 0.002)
    for job in (welcome, plain):
        metrics.started(job, 0.5)
    metrics.finished(welcome, "failed", 0.25)
    metrics.finished(plain, "done", 0.1)

    value = metrics.registry.get_sample_value
    task = {"queue": "emails", "task": "send_welcome"}
    assert value("pgjobq_worker_claimed_jobs_total", task) == 1
    assert value("pgjobq_worker_wait_seconds_count", task) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**task, "outcome": "failed"}) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**task, "outcome": "done"}) == 0
    assert value("pgjobq_worker_handler_duration_seconds_sum", {**task, "outcome": "failed"}) == 0.25
    assert value("pgjobq_worker_claimed_jobs_total", PLAIN) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "done"}) == 1
    assert value("pgjobq_worker_jobs_finished_total", {**PLAIN, "outcome": "failed"}) == 0
    assert value("pgjobq_worker_claim_duration_seconds_count", {"queue": "emails"}) == 1  # a claim, not a job


def test_a_task_s_outcomes_read_0_from_the_claim_of_its_first_job() -> None:
    metrics = WorkerMetrics()

    metrics.claimed(["emails"], [a_job(task="send_welcome")], 0.002)

    value = metrics.registry.get_sample_value
    for outcome in OUTCOMES:
        labels = {"queue": "emails", "task": "send_welcome", "outcome": outcome}
        assert value("pgjobq_worker_jobs_finished_total", labels) == 0, outcome


def test_task_names_past_max_tasks_are_counted_together_under_other(caplog: pytest.LogCaptureFixture) -> None:
    metrics = WorkerMetrics(max_tasks=2)
    caplog.set_level(logging.WARNING, logger="pgjobq.prometheus")

    for job_id, task in enumerate(["a", "b", "c", "d", "a", "c"]):
        metrics.finished(a_job(job_id=job_id, task=task), "done", None)

    done_by_task = {
        sample.labels["task"]: sample.value
        for family in metrics.registry.collect()
        if family.name == "pgjobq_worker_jobs_finished"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["outcome"] == "done"
    }
    assert done_by_task == {"a": 2, "b": 1, "(other)": 3}
    assert [record.getMessage() for record in caplog.records] == [
        "more than 2 task names: the metrics count the jobs of task 'c' and any other new one under"
        ' task="(other)" (WorkerMetrics(max_tasks=...))'
    ]


def test_max_tasks_must_be_a_whole_number_of_at_least_0() -> None:
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(ConfigurationError, match=r"^max_tasks must be an integer >= 0, got "):
            WorkerMetrics(max_tasks=bad)  # type: ignore[arg-type]


def test_each_worker_metrics_has_a_registry_of_its_own_unless_given_one() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.reconnected()
    shared = CollectorRegistry()

    assert second.registry is not first.registry
    assert second.registry.get_sample_value("pgjobq_worker_reconnects_total") == 0
    assert WorkerMetrics(shared).registry is shared
    assert isinstance(first, WorkerObserver)


def test_every_outcome_a_worker_reports_has_its_series() -> None:
    assert set(typing.get_args(pgjobq.Outcome)) == set(OUTCOMES)


def test_the_pending_gauge_adds_up_the_workers_reporting_from_their_own_threads() -> None:
    metrics = WorkerMetrics()
    metrics.pending(3)
    other = threading.Thread(target=metrics.pending, args=(4,))
    other.start()
    other.join()

    metrics.pending(1)

    assert metrics.registry.get_sample_value("pgjobq_worker_acknowledgements_pending") == 5


def failing_when_asked(job: Job) -> None:
    if job.payload.get("fail"):
        raise RuntimeError("asked to fail")
    if job.payload.get("retry") and job.attempts == 1:
        raise Retry(0)


def test_a_real_worker_s_endpoint_agrees_with_the_database(db: Db, dsn: str, run_worker: RunWorker) -> None:
    done, failed = 5, 3
    for _ in range(done):
        pgjobq.enqueue(db, "emails", {})
    for _ in range(failed):
        pgjobq.enqueue(db, "emails", {"fail": True}, max_attempts=1)
    pgjobq.enqueue(db, "emails", {"retry": True})  # retried once, then done
    port = free_port()
    metrics = start_worker_metrics(port, dsn=dsn)
    run_worker(
        dsn, failing_when_asked, WorkerSettings(queue="emails", poll_interval=0.2, observers=[metrics])
    )

    assert wait_until(lambda: statuses(db) == {"done": done + 1, "failed": failed}, timeout=30), statuses(db)
    scraped: list[Samples] = []

    def caught_up() -> bool:  # the database sees an acknowledgement commit before the worker hears of it
        scraped.append(scrape(port))
        latest = scraped[-1]
        return (
            latest.total("pgjobq_worker_jobs_finished_total") == done + failed + 2
            and latest.value("pgjobq_worker_acknowledgements_pending") == 0
        )

    assert wait_until(caught_up, timeout=10), scraped[-1].values
    samples = scraped[-1]

    def finished(outcome: str) -> float | None:
        return samples.value("pgjobq_worker_jobs_finished_total", queue="emails", task="", outcome=outcome)

    assert finished("done") == statuses(db)["done"] == done + 1
    assert finished("failed") == statuses(db)["failed"] == failed
    assert finished("retried") == 1
    assert finished("cancelled") == 0
    assert samples.total("pgjobq_worker_handler_duration_seconds_count") == done + failed + 2
    assert samples.value("pgjobq_worker_wait_seconds_count", queue="emails", task="") == done + failed + 2
    assert samples.value("pgjobq_worker_claimed_jobs_total", queue="emails", task="") == done + failed + 2
    claims = samples.value("pgjobq_worker_claim_duration_seconds_count", queue="emails")
    assert claims is not None and claims >= 1
    assert samples.value("pgjobq_worker_acknowledgements_pending") == 0
    assert samples.value("pgjobq_worker_reconnects_total") == 0
    # the same endpoint exports the database's view (dsn given)
    assert samples.value("pgjobq_jobs", queue="emails", status="failed") == failed
    assert samples.value("pgjobq_jobs", queue="emails", status="runnable") == 0


def test_a_real_worker_labels_its_jobs_with_their_task(db: Db, dsn: str, run_worker: RunWorker) -> None:
    for _ in range(2):
        enqueue(db, "emails", {}, task="send_welcome")
    enqueue(db, "emails", {})
    port = free_port()
    metrics = start_worker_metrics(port)
    run_worker(dsn, lambda job: None, WorkerSettings(queue="emails", poll_interval=0.2, observers=[metrics]))
    scraped: list[Samples] = []

    def caught_up() -> bool:
        scraped.append(scrape(port))
        return scraped[-1].total("pgjobq_worker_jobs_finished_total", outcome="done") == 3

    assert wait_until(caught_up, timeout=30), scraped[-1].values
    samples = scraped[-1]
    welcome = {"queue": "emails", "task": "send_welcome"}
    assert samples.value("pgjobq_worker_jobs_finished_total", **welcome, outcome="done") == 2
    assert samples.value("pgjobq_worker_jobs_finished_total", **PLAIN, outcome="done") == 1
    assert samples.value("pgjobq_worker_claimed_jobs_total", **welcome) == 2
    assert samples.value("pgjobq_worker_handler_duration_seconds_count", **welcome, outcome="done") == 2
    assert samples.label_values("pgjobq_worker_jobs_finished_total", "task") == {"send_welcome", ""}


def test_pgjobq_worker_metrics_port_serves_its_jobs_and_the_queue_state(
    db: Db, dsn: str, start_worker: StartWorker
) -> None:
    db.execute(EXECUTIONS_DDL)
    for _ in range(3):
        pgjobq.enqueue(db, "default", {})
    pgjobq.enqueue(db, "default", {}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    port = free_port()
    worker = start_worker("record", "--metrics-port", str(port), "--poll-interval", "0.2")
    scraped: list[Samples] = []

    def three_done() -> bool:
        try:
            scraped.append(scrape(port))
        except httpx.TransportError:
            return False
        done = scraped[-1].value(
            "pgjobq_worker_jobs_finished_total", queue="default", task="", outcome="done"
        )
        return done == 3

    assert wait_until(three_done, timeout=30), worker.log()
    samples = scraped[-1]
    assert statuses(db) == {"done": 3, "queued": 1}
    assert samples.value("pgjobq_jobs", queue="default", status="scheduled") == 1
    assert samples.value("pgjobq_database_up") == 1  # (runnable may still read as cached: 5 s)
