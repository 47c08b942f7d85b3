"""The chaos run (short version) and the evidence checks it relies on.

The slow tests share one short chaos run (tests/helpers/chaos.py: 5,000
jobs, 8 real worker processes of two lease lengths logging in with only the
worker level, SIGKILL, SIGSTOP, terminated connections and two PostgreSQL
restarts) and assert one invariant each.  The fast tests prove the checks
can fail: they forge each violation in the evidence tables, the way a broken
extension or worker would leave it, and expect it counted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import pgjobq

from helpers.chaos import ChaosConfig, Report, evidence, privileges, render, run_chaos
from helpers.chaos_handlers import SCHEMA_DDL
from helpers.sqlhelpers import Db

# one chaos run for the module: under pytest-xdist its tests stay on one worker
pytestmark = pytest.mark.xdist_group("chaos")

# the forged histories' workers: pgjobq.claim's default lease
LEASES = {"w1": 60.0, "w2": 60.0}

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


def claim(db: Db, job_id: int, worker: str = "w1", lease_timeout: float = 60.0) -> int:
    """Claim job_id (made runnable now) and record its execution; returns the lease."""
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))
    (job,) = pgjobq.claim(db, "chaos", 1, worker, lease_timeout=timedelta(seconds=lease_timeout))
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
    """Reap every running job, as if its worker had died ten minutes ago (its lease's length kept)."""
    db.execute(
        "UPDATE jobq.jobs SET locked_at = locked_at - interval '10 minutes',"
        " lease_expires_at = lease_expires_at - interval '10 minutes' WHERE status = 'running'"
    )
    db.execute("SELECT jobq.reap()")


def found(db: Db) -> dict[str, dict[str, Any]]:
    """The evidence of a forged history: its workers of LEASES, every change made by this session."""
    return evidence(db, LEASES, db.info.user)


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

    evidence = found(chaos_db)

    assert {k: evidence["lost"][k] for k in ("lost", "missing")} == {"lost": 0, "missing": 0}
    assert evidence["claims"] == {"overlaps": 0, "bad_claims": 0, "unleased_claims": 0, "log_gaps": 0}
    assert evidence["stale"] == {"stale": 0, "second_completions": 0}
    assert evidence["dups"] == {"executions": 5, "duplicates": 1, "same_lease": 0, "unexplained": 0}
    assert evidence["effects"] == {"done": 1, "wrong": 0}
    assert evidence["counts"]["reaps"] == 1
    assert {k: evidence["reaps"][k] for k in ("reaps", "early")} == {"reaps": 1, "early": 0}
    assert evidence["reaps"]["least_margin"] > 0
    # five claims, and the reap helper's aging of the one running job: a change of its expiry
    assert evidence["leases"] == {"claims": 5, "heartbeats": 1, "wrong": 0, "claims_by_length": {"60": 5}}
    assert evidence["roles"]["foreign"] == 0
    assert evidence["roles"]["reaps_by_role"] == 1


def test_evidence_counts_a_job_never_run_and_an_id_never_stored_as_lost(chaos_db: Db) -> None:
    clean_history(chaos_db)
    enqueue(chaos_db)
    chaos_db.execute("INSERT INTO chaos.acked (id) VALUES (-1)")

    assert found(chaos_db)["lost"] == {"lost": 2, "missing": 1}


def test_evidence_counts_an_ordinary_job_that_failed_as_lost(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    chaos_db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (job_id,))
    pgjobq.fail(chaos_db, job_id, "boom", lease)

    assert found(chaos_db)["lost"]["lost"] == 1


def test_evidence_counts_a_claim_of_a_running_job_as_a_double_claim(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    claim(chaos_db, job_id)
    # a broken claim: a second lease while the first is still valid
    chaos_db.execute("UPDATE jobq.jobs SET lease = lease + 1, locked_by = 'w2' WHERE id = %s", (job_id,))

    claims = found(chaos_db)["claims"]

    assert (claims["overlaps"], claims["bad_claims"]) == (1, 1)


def test_evidence_counts_a_done_job_without_its_lease_finished_as_a_stale_completion(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    first = claim(chaos_db, job_id)
    reap(chaos_db)
    claim(chaos_db, job_id, "w2")
    finish(chaos_db, job_id, first)
    # a broken complete(id, first): accepted although lease 2 is current and still running
    chaos_db.execute("UPDATE jobq.jobs SET status = 'done', finished_at = now() WHERE id = %s", (job_id,))

    assert found(chaos_db)["stale"]["stale"] == 1


def test_evidence_counts_a_rerun_without_a_reap_as_unexplained(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    claim(chaos_db, job_id)
    # the lease ends without a reap (a broken release that forgets the run happened)
    chaos_db.execute("UPDATE jobq.jobs SET status = 'queued' WHERE id = %s", (job_id,))
    lease = claim(chaos_db, job_id)
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)

    dups = found(chaos_db)["dups"]

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

    assert found(chaos_db)["effects"] == {"done": 1, "wrong": 1}


def test_evidence_counts_a_reap_of_a_lease_not_yet_expired(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    # a broken reap: takes the lease, valid for another minute, all the same
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'queued', last_error = %s WHERE id = %s",
        (f"reaped: lease {lease} of w1 went stale", job_id),
    )

    assert {k: found(chaos_db)["reaps"][k] for k in ("reaps", "early")} == {"reaps": 1, "early": 1}


def test_evidence_counts_a_claim_under_another_lease_length_as_wrong(chaos_db: Db) -> None:
    claim(chaos_db, enqueue(chaos_db), "w1", lease_timeout=30)

    leases = found(chaos_db)["leases"]

    assert (leases["claims"], leases["wrong"], leases["claims_by_length"]) == (1, 1, {"30": 1})


def test_evidence_counts_a_heartbeat_that_changes_the_lease_length_as_wrong(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    pgjobq.heartbeat(chaos_db, job_id, lease)  # the real one keeps the job's length
    # a broken heartbeat: extends by another length (a reaper's, say)
    chaos_db.execute(
        "UPDATE jobq.jobs SET locked_at = now(), lease_expires_at = now() + interval '5 s' WHERE id = %s",
        (job_id,),
    )

    leases = found(chaos_db)["leases"]

    assert (leases["claims"], leases["heartbeats"], leases["wrong"]) == (1, 2, 1)


def test_evidence_counts_the_changes_made_by_another_role(chaos_db: Db) -> None:
    clean_history(chaos_db)

    roles = evidence(chaos_db, LEASES, "someone_else")["roles"]

    assert roles["foreign"] == roles["changes"] > 0
    assert roles["reaps_by_role"] == 0


def test_privileges_show_nothing_beyond_the_worker_level_until_more_is_granted(db: Db) -> None:
    role = f"chaos_{uuid.uuid4().hex[:12]}"
    db.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        db.execute("SELECT jobq.grant_worker(%s::regrole)", (role,))
        assert privileges(db, role) == {
            "attributes": False, "memberships": 0, "table_access": False, "other_functions": [],
        }  # fmt: skip

        db.execute("SELECT jobq.grant_admin(%s::regrole)", (role,))
        more = privileges(db, role)
        assert more["table_access"] is True
        assert "jobq.retry_failed(text,bigint[])" in more["other_functions"]
    finally:
        db.execute("SELECT jobq.revoke_all(%s::regrole)", (role,))
        db.execute(f'DROP ROLE "{role}"')


# -- the short chaos run -----------------------------------------------------------


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    """One short chaos run for all the tests below; its table is printed (pytest -s shows it).

    Session-scoped: under pytest-xdist other files' tests may run between these on their worker, and a
    module fixture would be run again after them.
    """
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
def test_chaos_run_never_reaps_a_lease_before_it_expired(report: Report) -> None:
    assert_holds(report, "reaped_valid_lease")


@pytest.mark.slow
def test_chaos_run_claims_and_heartbeats_under_each_workers_own_lease_length(report: Report) -> None:
    assert_holds(report, "lease_lengths")


@pytest.mark.slow
def test_chaos_run_changes_jobs_only_through_the_worker_level(report: Report) -> None:
    assert_holds(report, "worker_level_only")


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
