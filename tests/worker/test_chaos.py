"""The chaos run (short version) and the evidence checks it relies on.

The slow tests share one short chaos run (tests/helpers/chaos.py: 5,000
jobs, 8 real worker processes, SIGKILL, SIGSTOP, terminated connections and
two PostgreSQL restarts) and assert one invariant each.  The fast tests prove the
checks can fail: they forge each violation in the evidence tables, the way a
broken extension or worker would leave it, and expect it counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import pgjobq

from helpers.chaos import ChaosConfig, Report, evidence, render, run_chaos
from helpers.chaos_handlers import SCHEMA_DDL
from helpers.sqlhelpers import Db

# -- the evidence checks, on forged histories ------------------------------------


@pytest.fixture
def chaos_db(db: Db) -> Db:
    db.execute(SCHEMA_DDL)
    return db


def enqueue(db: Db, *, mode: str = "plain", fail: bool = False, acked: bool = True) -> int:
    payload = {"ms": 1, "mode": mode, "fail": fail}
    job_id = pgjobq.enqueue(db, "chaos", payload, max_attempts=1 if fail else 10)
    if acked:
        db.execute("INSERT INTO chaos.acked (id) VALUES (%s)", (job_id,))
    return job_id


def claim(db: Db, job_id: int, worker: str = "w1") -> int:
    """Claim job_id (made runnable now) and record its execution; returns the lease."""
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))
    (job,) = pgjobq.claim(db, "chaos", 1, worker)
    assert job.id == job_id
    db.execute(
        "INSERT INTO chaos.executions (token, job_id, lease, pid, worker)"
        " VALUES (gen_random_uuid(), %s, %s, 1, %s)",
        (job_id, job.lease, worker),
    )
    return job.lease


def finish(db: Db, job_id: int, lease: int) -> None:
    db.execute(
        "UPDATE chaos.executions SET finished_at = clock_timestamp() WHERE job_id = %s AND lease = %s",
        (job_id, lease),
    )


def reap(db: Db) -> None:
    db.execute("SELECT pg_sleep(0.01)")
    db.execute("SELECT jobq.reap(interval '1 microsecond')")


def clean_history(db: Db) -> None:
    """One job of each kind, done or failed by the rules, one of them reaped and run again."""
    plain = enqueue(db)
    lease = claim(db, plain)
    finish(db, plain, lease)
    pgjobq.complete(db, plain, lease)

    reaped = enqueue(db)
    first = claim(db, reaped)
    reap(db)
    second = claim(db, reaped, "w2")
    finish(db, reaped, first)
    with pytest.raises(pgjobq.LeaseLost):
        pgjobq.complete(db, reaped, first)
    finish(db, reaped, second)
    pgjobq.complete(db, reaped, second)

    effects = enqueue(db, mode="effects")
    lease = claim(db, effects)
    with db.transaction():
        db.execute(
            "INSERT INTO chaos.effects (token, job_id, lease) VALUES (gen_random_uuid(), %s, %s)",
            (effects, lease),
        )
        finish(db, effects, lease)
        pgjobq.complete(db, effects, lease)

    failing = enqueue(db, fail=True)
    pgjobq.fail(db, failing, "IntentionalFailure", claim(db, failing))


def test_evidence_of_a_clean_history_shows_no_violation(chaos_db: Db) -> None:
    clean_history(chaos_db)

    found = evidence(chaos_db)

    assert {k: found["lost"][k] for k in ("lost", "missing")} == {"lost": 0, "missing": 0}
    assert found["claims"] == {"overlaps": 0, "bad_claims": 0, "unleased_claims": 0, "log_gaps": 0}
    assert found["stale"] == {"stale": 0, "second_completions": 0}
    assert found["dups"] == {"executions": 5, "duplicates": 1, "same_lease": 0, "unexplained": 0}
    assert found["effects"] == {"done": 1, "wrong": 0}
    assert found["counts"]["reaps"] == 1


def test_evidence_counts_a_job_never_run_and_an_id_never_stored_as_lost(chaos_db: Db) -> None:
    clean_history(chaos_db)
    enqueue(chaos_db)
    chaos_db.execute("INSERT INTO chaos.acked (id) VALUES (-1)")

    assert evidence(chaos_db)["lost"] == {"lost": 2, "missing": 1}


def test_evidence_counts_an_ordinary_job_that_failed_as_lost(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    chaos_db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (job_id,))
    pgjobq.fail(chaos_db, job_id, "boom", lease)

    assert evidence(chaos_db)["lost"]["lost"] == 1


def test_evidence_counts_a_claim_of_a_running_job_as_a_double_claim(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    claim(chaos_db, job_id)
    # a broken claim: a second lease while the first is still valid
    chaos_db.execute("UPDATE jobq.jobs SET lease = lease + 1, locked_by = 'w2' WHERE id = %s", (job_id,))

    claims = evidence(chaos_db)["claims"]

    assert (claims["overlaps"], claims["bad_claims"]) == (1, 1)


def test_evidence_counts_a_done_job_without_its_lease_finished_as_a_stale_completion(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    first = claim(chaos_db, job_id)
    reap(chaos_db)
    claim(chaos_db, job_id, "w2")
    finish(chaos_db, job_id, first)
    # a broken complete(id, first): accepted although lease 2 is current and still running
    chaos_db.execute("UPDATE jobq.jobs SET status = 'done', finished_at = now() WHERE id = %s", (job_id,))

    assert evidence(chaos_db)["stale"]["stale"] == 1


def test_evidence_counts_a_rerun_without_a_reap_as_unexplained(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    claim(chaos_db, job_id)
    # the lease ends without a reap (a broken release that forgets the run happened)
    chaos_db.execute("UPDATE jobq.jobs SET status = 'queued' WHERE id = %s", (job_id,))
    lease = claim(chaos_db, job_id)
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)

    dups = evidence(chaos_db)["dups"]

    assert (dups["duplicates"], dups["unexplained"]) == (1, 1)


def test_evidence_counts_a_second_effect_of_a_done_job(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db, mode="effects")
    lease = claim(chaos_db, job_id)
    for _ in range(2):
        chaos_db.execute(
            "INSERT INTO chaos.effects (token, job_id, lease) VALUES (gen_random_uuid(), %s, %s)",
            (job_id, lease),
        )
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)

    assert evidence(chaos_db)["effects"] == {"done": 1, "wrong": 1}


# -- the short chaos run -----------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    """One short chaos run for all the tests below; its table is printed (pytest -s shows it)."""
    workdir: Path = tmp_path_factory.mktemp("chaos")
    result = run_chaos(ChaosConfig.short(), workdir)
    render(result, Console(width=120))
    yield result


def assert_holds(report: Report, key: str) -> None:
    invariant = report.invariant(key)
    assert invariant.ok, f"{invariant.name}: {invariant.observed} (expected {invariant.expected})"


@pytest.mark.slow
def test_chaos_run_loses_no_job(report: Report) -> None:
    assert_holds(report, "lost")


@pytest.mark.slow
def test_chaos_run_never_has_two_valid_leases_on_one_job(report: Report) -> None:
    assert_holds(report, "double_claims")


@pytest.mark.slow
def test_chaos_run_accepts_no_stale_completion(report: Report) -> None:
    assert_holds(report, "stale_completions")


@pytest.mark.slow
def test_chaos_run_completes_each_job_at_most_once(report: Report) -> None:
    assert_holds(report, "second_completions")


@pytest.mark.slow
def test_chaos_run_explains_every_duplicate_execution_by_a_reap(report: Report) -> None:
    assert_holds(report, "duplicates_explained")


@pytest.mark.slow
def test_chaos_run_writes_exactly_one_effect_per_done_job(report: Report) -> None:
    assert_holds(report, "effects_exactly_once")


@pytest.mark.slow
def test_chaos_run_leaves_nothing_queued_or_running(report: Report) -> None:
    assert_holds(report, "drained")


@pytest.mark.slow
def test_chaos_run_workers_exit_cleanly_on_sigterm(report: Report) -> None:
    assert_holds(report, "clean_exit")


@pytest.mark.slow
def test_chaos_run_workers_never_exit_on_their_own(report: Report) -> None:
    assert_holds(report, "no_crashes")


@pytest.mark.slow
def test_chaos_run_workers_reconnect_within_15_s_of_a_restart(report: Report) -> None:
    assert_holds(report, "reconnect")


@pytest.mark.slow
def test_chaos_run_workers_do_not_spin_the_cpu_while_the_database_is_down(report: Report) -> None:
    assert_holds(report, "quiet_cpu")


@pytest.mark.slow
def test_chaos_run_workers_do_not_flood_the_log_while_the_database_is_down(report: Report) -> None:
    assert_holds(report, "quiet_log")


@pytest.mark.slow
def test_chaos_run_refuses_the_late_complete_of_the_stopped_worker(report: Report) -> None:
    assert_holds(report, "late_complete_refused")


@pytest.mark.slow
def test_chaos_run_injects_every_kind_of_fault(report: Report) -> None:
    assert_holds(report, "faults")
