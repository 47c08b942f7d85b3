"""The heartbeat schedule (pgjobq._worker.leases), without a database."""

from __future__ import annotations

import dataclasses

from pgjobq import Job, WorkerSettings
from pgjobq._worker.leases import Leases


def make_job(job_id: int, lease_seconds: float | None = 60.0) -> Job:
    return Job(
        id=job_id, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, lease=1,
        _lease_seconds=lease_seconds,
    )  # fmt: skip


def test_the_interval_is_a_quarter_of_the_shortest_lease_claimed() -> None:
    leases = Leases(WorkerSettings(), "q")

    leases.held([make_job(1, 40.0), make_job(2, 8.0)], now=100.0, alone=True)

    assert leases.every == 2.0
    assert leases.next_due == 102.0


def test_an_explicit_interval_shorter_than_the_lease_is_kept() -> None:
    leases = Leases(WorkerSettings(heartbeat_interval=1.0), "q")

    leases.held([make_job(1, 60.0)], now=0.0, alone=True)

    assert leases.every == 1.0


def test_an_explicit_interval_too_long_for_a_lease_the_queue_gave_falls_back_to_a_quarter() -> None:
    leases = Leases(WorkerSettings(heartbeat_interval=5.0), "q")

    leases.held([make_job(1, 4.0)], now=0.0, alone=True)

    assert leases.every == 1.0


def test_no_heartbeat_is_due_before_its_time() -> None:
    leases = Leases(WorkerSettings(), "q")
    jobs = [make_job(1)]
    leases.held(jobs, now=0.0, alone=True)

    assert leases.due(jobs, now=14.0) is None
    assert [job.id for job in leases.due(jobs, now=15.0) or []] == [1]


def test_a_lease_extended_less_than_an_interval_ago_waits_for_the_next_heartbeat() -> None:
    leases = Leases(WorkerSettings(), "q")
    old, new = make_job(1), make_job(2)
    leases.held([old], now=0.0, alone=True)
    leases.held([new], now=10.0, alone=False)

    due = leases.due([old, new], now=15.0)

    assert [job.id for job in due or []] == [1]


def test_a_heartbeat_records_held_leases_cancel_requests_and_new_deadlines_once() -> None:
    leases = Leases(WorkerSettings(), "q")
    jobs = [make_job(1), make_job(2), make_job(3)]
    leases.held(jobs, now=0.0, alone=True)
    leases.due(jobs, now=15.0)

    beat = leases.beat([(1, False, False), (2, True, True)], now=15.0)
    again = leases.beat([(2, False, True)], now=30.0)

    assert beat.held == {1, 2}  # 3's lease is gone
    assert beat.cancels == [2]
    assert beat.newly_overdue == {2}
    assert again.newly_overdue == set()


def test_a_job_past_its_deadline_gets_no_more_heartbeats() -> None:
    leases = Leases(WorkerSettings(), "q")
    jobs = [make_job(1), make_job(2)]
    leases.held(jobs, now=0.0, alone=True)
    leases.due(jobs, now=15.0)
    leases.beat([(1, False, True), (2, False, False)], now=15.0)

    due = leases.due(jobs, now=30.0)

    assert [job.id for job in due or []] == [2]


# -- while the database cannot be reached --------------------------------------


def test_a_lease_not_extended_for_longer_than_its_length_is_presumed_lost_once() -> None:
    leases = Leases(WorkerSettings(), "q")
    jobs = [make_job(1, 10.0), make_job(2, 30.0)]
    leases.held(jobs, now=0.0, alone=True)

    assert leases.presumed_lost(jobs, now=10.0) == []
    assert [job.id for job in leases.presumed_lost(jobs, now=10.5)] == [1]
    assert leases.presumed_lost(jobs, now=20.0) == []  # named once
    assert [job.id for job in leases.presumed_lost(jobs, now=31.0)] == [2]


def test_a_heartbeat_that_went_through_counts_from_its_own_time() -> None:
    leases = Leases(WorkerSettings(), "q")
    job = make_job(1, 10.0)
    leases.held([job], now=0.0, alone=True)
    leases.beat([(1, False, False)], now=8.0)

    assert leases.presumed_lost([job], now=17.0) == []
    assert [j.id for j in leases.presumed_lost([job], now=18.5)] == [1]


def test_a_job_past_its_deadline_is_not_presumed_lost_its_lease_ends_on_purpose() -> None:
    leases = Leases(WorkerSettings(), "q")
    job = make_job(1, 10.0)
    leases.held([job], now=0.0, alone=True)
    leases.beat([(1, False, True)], now=1.0)

    assert leases.presumed_lost([job], now=60.0) == []


def test_a_claim_without_a_lease_length_counts_under_the_default_lease() -> None:
    leases = Leases(WorkerSettings(), "q")
    job = make_job(1, None)
    leases.held([job], now=0.0, alone=True)

    assert leases.presumed_lost([job], now=59.0) == []
    assert [j.id for j in leases.presumed_lost([job], now=61.0)] == [1]


def test_a_job_claimed_again_under_a_new_lease_is_named_again() -> None:
    leases = Leases(WorkerSettings(), "q")
    first = make_job(1, 10.0)
    leases.held([first], now=0.0, alone=False)
    assert [j.lease for j in leases.presumed_lost([first], now=11.0)] == [1]

    again = dataclasses.replace(first, lease=2)
    leases.held([again], now=20.0, alone=False)

    assert leases.presumed_lost([again], now=25.0) == []
    assert [j.lease for j in leases.presumed_lost([again], now=31.0)] == [2]
