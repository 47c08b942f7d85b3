"""The chaos run (short version) and the evidence checks it relies on.

The slow tests share one short chaos run (tests/chaos/chaos.py: 5,000
jobs, 8 real worker processes of two lease lengths logging in with only the
worker level, SIGKILL, SIGSTOP, terminated connections and two PostgreSQL
restarts; and the job control of 0.6.0 mixed in: unique keys that conflict,
a canceller cancelling queued and running jobs, some with force, handlers
that snooze and that return results): one test, parametrized over the keys
the harness declares (chaos.INVARIANTS), asserts each invariant, and
another that the run judged exactly those.  The fast tests prove the checks
can fail: they forge each violation in the evidence tables, the way a
broken extension or worker would leave it, expect it counted, and expect
the verdict (chaos.judge, the run's own) to fail its invariant; a sound
history, judged with a run that saw nothing wrong, holds every invariant,
and each thing the run sees besides the evidence tables fails its
invariant when it goes wrong.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from rich.console import Console

import pgjobq

from chaos.chaos import (
    CANCEL_AND_RECORD,
    CORE_INVARIANTS,
    INVARIANTS,
    ChaosConfig,
    Invariant,
    Report,
    RestartRecord,
    Seen,
    StopRecord,
    evidence,
    judge,
    privileges,
    read_back,
    render,
    run_chaos,
)
from chaos.chaos_handlers import SCHEMA_DDL, canceller_grants
from helpers.fixtures import once_per_run
from helpers.sqlhelpers import Db

# one chaos run for the module: under pytest-xdist its tests stay on one worker
pytestmark = pytest.mark.xdist_group("chaos")

# the forged histories' workers: pgjobq.claim's default lease
LEASES = {"w1": 60.0, "w2": 60.0}
# the run the forged histories are judged as: its workers' one lease length
CONFIG = dataclasses.replace(ChaosConfig.short(), leases=(60.0,))

# -- the evidence checks, on forged histories ------------------------------------


@pytest.fixture
def chaos_db(db: Db) -> Db:
    db.execute(SCHEMA_DDL)
    return db


def enqueue(
    db: Db,
    *,
    mode: str = "plain",
    fail: bool = False,
    acked: bool = True,
    n: int = 0,
    result: bool = False,
    key: str | None = None,
    on_conflict: Literal["return", "replace"] = "return",
) -> int:
    payload = {
        "n": n, "ms": 1, "mode": mode, "fail": fail,
        **({"result": True} if result else {}), **({"key": key} if key else {}),
    }  # fmt: skip
    job_id = pgjobq.enqueue(
        db, "chaos", payload, max_attempts=1 if fail else 10, unique_key=key, on_conflict=on_conflict
    )
    if acked:
        db.execute("INSERT INTO chaos.acked (id) VALUES (%s)", (job_id,))
    return job_id


def claim(db: Db, job_id: int, worker: str = "w1", lease_timeout: float = 60.0) -> int:
    """Claim job_id (made runnable now) and record its execution; returns the lease."""
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))
    (job,) = pgjobq.claim(db, "chaos", 1, worker, lease_timeout=timedelta(seconds=lease_timeout))
    assert job.id == job_id
    execute(db, job_id, job.lease, worker)
    return job.lease


def execute(db: Db, job_id: int, lease: int, worker: str = "w1") -> None:
    """Record an execution of job_id under lease, begun now (as the handler does)."""
    db.execute(
        "INSERT INTO chaos.executions (token, job_id, lease, pid, worker)"
        " VALUES (gen_random_uuid(), %s, %s, 1, %s)",
        (job_id, lease, worker),
    )


def finish(db: Db, job_id: int, lease: int, outcome: str = "returned") -> None:
    db.execute(
        "UPDATE chaos.executions SET finished_at = clock_timestamp(), outcome = %s"
        " WHERE job_id = %s AND lease = %s",
        (outcome, job_id, lease),
    )


def cancel(db: Db, job_id: int, *, force: bool = False) -> str:
    """Cancel job_id as the chaos run's canceller does (recorded in chaos.cancels); the status returned."""
    (row,) = db.execute(CANCEL_AND_RECORD, {"ids": [job_id], "force": force}).fetchall()
    return str(row["status"])


def reap(db: Db) -> None:
    """Reap every running job, as if its worker had died ten minutes ago (its lease's length kept)."""
    db.execute(
        "UPDATE jobq.jobs SET locked_at = locked_at - interval '10 minutes',"
        " lease_expires_at = lease_expires_at - interval '10 minutes' WHERE status = 'running'"
    )
    db.execute("SELECT jobq.reap()")


def found(db: Db) -> dict[str, dict[str, Any]]:
    """The evidence of a forged history: its workers of LEASES, every change made by this session (which
    also cancels)."""
    return evidence(db, LEASES, db.info.user, db.info.user)


def restarts(
    reconnect: float | None = 1.0,
    cpu: float = 0.1,
    log_lines: int = 3,
    modes: tuple[str, ...] = ("fast", "immediate"),
) -> list[RestartRecord]:
    """The restarts of a run, one per mode, each 3 s down: every worker back after reconnect s (None:
    never), having spent cpu s and written log_lines lines meanwhile."""
    return [
        RestartRecord(
            mode, 3.0, {"w1": 1.0, "w2": reconnect}, {"w1": 0.1, "w2": cpu}, {"w1": 3, "w2": log_lines}
        )
        for mode in modes
    ]


def sound_run(db: Db, **changes: Any) -> Seen:
    """What a run that saw nothing wrong saw besides the evidence tables of db (but the changes given): the
    producer given exactly the ids chaos.acked holds, every kind of keyed enqueue and a conflict, cancels
    committed and none refused, samples with no key held twice, the results read back through pgjobq.job,
    no privilege beyond the worker level, faults of every kind, the stopped worker's late complete refused,
    both restarts quiet and soon over, every worker exiting 0 on SIGTERM and none on its own."""
    row = db.execute("SELECT count(*) AS n FROM chaos.acked").fetchone()
    assert row is not None
    read, misread = read_back(db, 10, 1)
    seen = Seen(
        acked=int(row["n"]), conflicts=1, variants=4, cancel_calls=1, cancel_refused={}, samples=1,
        shared_seen=0, read=read, misread=misread, beyond=[], not_reaping=0, kills=1, terminated=1,
        stop=StopRecord("w2", 60.0, [(1, 1)], 180.0, 0, Path(os.devnull)), late_refused=1,
        restarts=restarts(), exits={"w1": 0, "w2": 0}, unexpected_exits=[],
    )  # fmt: skip
    return dataclasses.replace(seen, **changes)


def verdict(
    db: Db, evidence: dict[str, dict[str, Any]] | None = None, **changes: Any
) -> dict[str, Invariant]:
    """The run's verdict (chaos.judge), by key, on the history in db (its evidence: found(db) unless
    given), judged as CONFIG with a run that saw nothing wrong besides (sound_run, but the changes)."""
    judged = judge(found(db) if evidence is None else evidence, CONFIG, sound_run(db, **changes))
    return {invariant.key: invariant for invariant in judged}


def failing(judged: dict[str, Invariant]) -> list[str]:
    return [key for key, invariant in judged.items() if not invariant.ok]


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


def job_control_history(db: Db) -> None:
    """One job of each kind of 0.6.0, by the rules: a result, a snooze, cancels, unique keys."""
    with_result = enqueue(db, n=3, result=True)
    lease = claim(db, with_result)
    finish(db, with_result, lease)
    pgjobq.complete(db, with_result, lease, result={"echo": 3})

    snoozed = enqueue(db, mode="effects")
    first = claim(db, snoozed)
    finish(db, snoozed, first, "snoozed")
    pgjobq.snooze(db, snoozed, first, timedelta(0))
    second = claim(db, snoozed)
    with db.transaction():
        db.execute(
            "INSERT INTO chaos.effects (token, job_id, lease) VALUES (gen_random_uuid(), %s, %s)",
            (snoozed, second),
        )
        finish(db, snoozed, second)
        pgjobq.complete(db, snoozed, second)

    assert cancel(db, enqueue(db)) == "cancelled"  # queued

    forced = enqueue(db)
    lease = claim(db, forced)
    assert cancel(db, forced, force=True) == "cancelled"  # running
    finish(db, forced, lease)
    assert pgjobq.complete_many(db, [(forced, lease)]) == set()  # its late complete is refused

    asked = enqueue(db)
    lease = claim(db, asked)
    assert cancel(db, asked) == "cancel_requested"
    finish(db, asked, lease)
    pgjobq.complete(db, asked, lease)  # done after all

    stopped = enqueue(db)
    lease = claim(db, stopped)
    assert cancel(db, stopped) == "cancel_requested"
    finish(db, stopped, lease, "stopped")
    assert pgjobq.fail(db, stopped, "CancelHeard", lease)[0] == "cancelled"

    for _ in range(2):  # one key, held by one job after the other
        keyed = enqueue(db, key="a1")
        lease = claim(db, keyed)
        finish(db, keyed, lease)
        pgjobq.complete(db, keyed, lease)


def replace_history(db: Db) -> None:
    """A replace (scope active) of a queued holder's payload, the job then run with it."""
    holder = enqueue(db, n=10, key="a2")
    assert enqueue(db, n=11, key="a2", on_conflict="replace", acked=False) == holder
    db.execute("INSERT INTO chaos.replaced (n, job_id) VALUES (11, %s)", (holder,))
    lease = claim(db, holder)
    finish(db, holder, lease)
    pgjobq.complete(db, holder, lease)


def sound_history(db: Db) -> None:
    """Every kind of job the chaos run makes, each by the rules."""
    clean_history(db)
    job_control_history(db)
    replace_history(db)


def test_a_sound_history_judged_with_a_sound_run_holds_every_declared_invariant(chaos_db: Db) -> None:
    sound_history(chaos_db)

    judged = judge(found(chaos_db), CONFIG, sound_run(chaos_db))

    assert [invariant.key for invariant in judged] == list(INVARIANTS)
    assert failing({invariant.key: invariant for invariant in judged}) == []


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
    core = [key for key in failing(verdict(chaos_db, evidence)) if key in CORE_INVARIANTS]
    assert core == []


def test_evidence_of_a_clean_job_control_history_shows_no_violation(chaos_db: Db) -> None:
    job_control_history(chaos_db)

    evidence = found(chaos_db)

    assert evidence["lost"] == {
        "acked": 8,
        "lost": 0,
        "missing": 0,
        "cancelled": 3,
        "failed": 0,
        "spurious": 0,
    }
    assert evidence["claims"] == {"overlaps": 0, "bad_claims": 0, "unleased_claims": 0, "log_gaps": 0}
    assert evidence["stale"] == {"stale": 0, "second_completions": 0}
    # the snoozed job ran twice, under two leases: explained by its snooze
    assert evidence["dups"] == {"executions": 8, "duplicates": 1, "same_lease": 0, "unexplained": 0}
    assert evidence["effects"] == {"done": 1, "wrong": 0}
    assert evidence["unique"] == {
        "holders": 2, "keys": 1, "until_done": 0, "overlaps": 0, "given_up": 0, "unlogged": 0,
    }  # fmt: skip
    assert evidence["shared"] == {"shared": 0}
    assert evidence["forced"] == {"forced": 1, "while_running": 1, "not_cancelled": 0, "done": 0}
    assert evidence["results"] == {"done": 5, "with_result": 1, "wrong": 0}
    assert evidence["absorbing"] == {
        "cancelled": 3, "from_running": 2, "not_cancelled": 0, "changed_after": 0, "claimed_after": 0,
        "unlogged": 0,
    }  # fmt: skip
    assert evidence["requests"] == {"asked": 2, "done": 1, "cancelled": 1, "wrong_end": 0, "rerun": 0}
    assert evidence["snoozes"] == {"snoozed": 1, "snoozes": 1, "counted": 0, "early_claims": 0, "claims": 8}
    # claims, and the cancel requests: not heartbeats
    assert evidence["leases"]["wrong"] == 0
    assert evidence["leases"]["heartbeats"] == 0
    assert evidence["roles"]["foreign"] == 0
    assert read_back(chaos_db, 10, 1) == (5, [])


def test_evidence_counts_a_job_never_run_and_an_id_never_stored_as_lost(chaos_db: Db) -> None:
    clean_history(chaos_db)
    enqueue(chaos_db)
    chaos_db.execute("INSERT INTO chaos.acked (id) VALUES (-1)")

    evidence = found(chaos_db)

    assert evidence["lost"] == {
        "acked": 6,
        "lost": 2,
        "missing": 1,
        "cancelled": 0,
        "failed": 1,
        "spurious": 0,
    }
    assert verdict(chaos_db, evidence)["lost"].ok is False


def test_the_verdict_counts_an_acked_table_short_of_the_producers_ids_as_lost(chaos_db: Db) -> None:
    sound_history(chaos_db)
    given = sound_run(chaos_db).acked
    # a bookkeeping slip: the producer's ids never reached chaos.acked, or only some of them
    chaos_db.execute("DELETE FROM chaos.acked WHERE id = (SELECT max(id) FROM chaos.acked)")
    short = verdict(chaos_db, acked=given)["lost"]
    chaos_db.execute("DELETE FROM chaos.acked")
    empty = verdict(chaos_db, acked=given)["lost"]

    assert given > 0
    assert (short.ok, empty.ok) == (False, False)
    assert verdict(chaos_db, acked=0)["lost"].ok is False  # nor does a producer given nothing judge anything


def test_the_verdict_fails_a_run_that_leaves_a_job_queued(chaos_db: Db) -> None:
    sound_history(chaos_db)
    enqueue(chaos_db, acked=False)  # in doubt (its commit never returned), and no worker takes it

    assert found(chaos_db)["counts"]["unfinished"] == 1
    assert failing(verdict(chaos_db)) == ["drained"]


def test_evidence_counts_an_ordinary_job_that_failed_as_lost(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    chaos_db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (job_id,))
    pgjobq.fail(chaos_db, job_id, "boom", lease)

    assert found(chaos_db)["lost"]["lost"] == 1
    assert verdict(chaos_db)["lost"].ok is False


def test_evidence_counts_a_claim_of_a_running_job_as_a_double_claim(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    claim(chaos_db, job_id)
    # a broken claim: a second lease while the first is still valid
    chaos_db.execute("UPDATE jobq.jobs SET lease = lease + 1, locked_by = 'w2' WHERE id = %s", (job_id,))

    claims = found(chaos_db)["claims"]

    assert (claims["overlaps"], claims["bad_claims"]) == (1, 1)
    assert verdict(chaos_db)["double_claims"].ok is False


def test_evidence_counts_a_claim_that_takes_no_new_lease_as_unleased(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    # a broken claim: the job running again under the lease it had (0: never claimed), no fencing token
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'running', locked_by = 'w1', locked_at = now(),"
        " lease_expires_at = now() + interval '60 s' WHERE id = %s",
        (job_id,),
    )

    claims = found(chaos_db)["claims"]

    assert claims == {"overlaps": 0, "bad_claims": 0, "unleased_claims": 1, "log_gaps": 0}
    assert verdict(chaos_db)["double_claims"].ok is False


def test_evidence_counts_a_claim_missing_from_the_transition_log_as_a_gap(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)
    # the log lost the claim: the job's lease counts one claim more than the log shows
    chaos_db.execute("DELETE FROM chaos.transitions WHERE job_id = %s AND new_lease <> old_lease", (job_id,))

    claims = found(chaos_db)["claims"]

    assert claims == {"overlaps": 0, "bad_claims": 0, "unleased_claims": 0, "log_gaps": 1}
    assert verdict(chaos_db)["double_claims"].ok is False


def test_evidence_counts_a_done_job_without_its_lease_finished_as_a_stale_completion(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    first = claim(chaos_db, job_id)
    reap(chaos_db)
    claim(chaos_db, job_id, "w2")
    finish(chaos_db, job_id, first)
    # a broken complete(id, first): accepted although lease 2 is current and still running
    chaos_db.execute("UPDATE jobq.jobs SET status = 'done', finished_at = now() WHERE id = %s", (job_id,))

    assert found(chaos_db)["stale"]["stale"] == 1
    assert verdict(chaos_db)["stale_completions"].ok is False


def test_evidence_counts_a_done_job_done_again_as_a_second_completion(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    first = claim(chaos_db, job_id)
    finish(chaos_db, job_id, first)
    pgjobq.complete(chaos_db, job_id, first)
    # a broken claim takes the done job under a new lease, and it runs and completes again
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'running', lease = lease + 1, locked_by = 'w1', locked_at = now(),"
        " lease_expires_at = now() + interval '60 s' WHERE id = %s",
        (job_id,),
    )
    second = first + 1
    execute(chaos_db, job_id, second)
    finish(chaos_db, job_id, second)
    pgjobq.complete(chaos_db, job_id, second)

    evidence = found(chaos_db)

    assert evidence["stale"] == {"stale": 0, "second_completions": 1}
    assert verdict(chaos_db, evidence)["second_completions"].ok is False


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
    assert verdict(chaos_db)["duplicates_explained"].ok is False


def test_evidence_counts_two_executions_under_one_lease(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    # a broken worker: it runs the job it holds a second time, under the same lease
    execute(chaos_db, job_id, lease)
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)

    dups = found(chaos_db)["dups"]

    assert dups == {"executions": 2, "duplicates": 1, "same_lease": 1, "unexplained": 0}
    assert verdict(chaos_db)["duplicates_explained"].ok is False


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
    assert verdict(chaos_db)["effects_exactly_once"].ok is False


def test_evidence_counts_a_reap_of_a_lease_not_yet_expired(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    # a broken reap: takes the lease, valid for another minute, all the same
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'queued', last_error = %s WHERE id = %s",
        (f"reaped: lease {lease} of w1 went stale", job_id),
    )

    assert {k: found(chaos_db)["reaps"][k] for k in ("reaps", "early")} == {"reaps": 1, "early": 1}
    assert verdict(chaos_db)["reaped_valid_lease"].ok is False


def test_evidence_counts_a_claim_under_another_lease_length_as_wrong(chaos_db: Db) -> None:
    claim(chaos_db, enqueue(chaos_db), "w2")
    claim(chaos_db, enqueue(chaos_db), "w1", lease_timeout=30)

    leases = found(chaos_db)["leases"]

    assert (leases["claims"], leases["wrong"], leases["claims_by_length"]) == (2, 1, {"30": 1, "60": 1})
    assert verdict(chaos_db)["lease_lengths"].ok is False


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
    assert verdict(chaos_db)["lease_lengths"].ok is False


def test_evidence_counts_the_changes_made_by_another_role(chaos_db: Db) -> None:
    clean_history(chaos_db)

    as_another_role = evidence(chaos_db, LEASES, "someone_else")

    roles = as_another_role["roles"]
    assert roles["foreign"] == roles["changes"] > 0
    assert roles["reaps_by_role"] == 0
    assert verdict(chaos_db, as_another_role)["worker_level_only"].ok is False


def test_evidence_counts_a_job_cancelled_unasked_as_lost(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    # a broken reap or fail: cancels a job nobody cancelled
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (job_id,)
    )

    lost = found(chaos_db)["lost"]

    assert (lost["lost"], lost["cancelled"], lost["spurious"]) == (1, 0, 1)
    assert verdict(chaos_db)["lost"].ok is False


def test_evidence_counts_a_job_failed_after_a_cancel_request_as_lost(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    assert cancel(chaos_db, job_id) == "cancel_requested"
    # a broken fail: retries the job it was asked to stop, and it runs out of attempts
    chaos_db.execute("UPDATE jobq.jobs SET status = 'failed', finished_at = now() WHERE id = %s", (job_id,))
    finish(chaos_db, job_id, lease)

    evidence = found(chaos_db)

    assert evidence["lost"]["lost"] == 1
    assert evidence["requests"]["wrong_end"] == 1
    judged = verdict(chaos_db, evidence)
    assert (judged["lost"].ok, judged["cancel_requests"].ok) == (False, False)


def test_evidence_counts_two_holders_of_one_key_as_an_overlap(chaos_db: Db) -> None:
    first = enqueue(chaos_db, key="a1")
    lease = claim(chaos_db, first)
    finish(chaos_db, first, lease)
    pgjobq.complete(chaos_db, first, lease)
    second = enqueue(chaos_db, key="a1")
    # a broken unique index: the second took the key while the first still held it
    chaos_db.execute(
        "UPDATE chaos.holders SET at = (SELECT min(at) FROM chaos.transitions WHERE job_id = %s)"
        " - interval '1 ms' WHERE job_id = %s",
        (first, second),
    )

    assert found(chaos_db)["unique"]["overlaps"] == 1
    assert verdict(chaos_db)["unique_keys"].ok is False


def test_evidence_explains_a_replace_of_a_running_holder_asked_to_cancel_before(chaos_db: Db) -> None:
    first = enqueue(chaos_db, key="a1")
    claim(chaos_db, first)
    assert cancel(chaos_db, first) == "cancel_requested"
    # the replace asks again (a change of nothing) and gives the key to a new job
    assert enqueue(chaos_db, n=1, key="a1", on_conflict="replace") != first

    evidence = found(chaos_db)

    assert (evidence["unique"]["overlaps"], evidence["unique"]["given_up"]) == (0, 1)
    assert evidence["shared"] == {"shared": 0}
    assert verdict(chaos_db, evidence)["unique_keys"].ok is True


def test_evidence_counts_a_force_cancelled_job_done_later(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    assert cancel(chaos_db, job_id, force=True) == "cancelled"
    finish(chaos_db, job_id, lease)
    # a broken complete: accepts the lease the cancel voided
    chaos_db.execute("UPDATE jobq.jobs SET status = 'done' WHERE id = %s", (job_id,))

    evidence = found(chaos_db)

    assert evidence["forced"] == {"forced": 1, "while_running": 1, "not_cancelled": 1, "done": 1}
    assert (evidence["absorbing"]["changed_after"], evidence["absorbing"]["not_cancelled"]) == (1, 1)
    judged = verdict(chaos_db, evidence)
    assert (judged["forced_never_done"].ok, judged["cancelled_absorbing"].ok) == (False, False)


def test_evidence_counts_a_cancelled_job_claimed_again(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    assert cancel(chaos_db, job_id) == "cancelled"
    # a broken claim: takes a cancelled job (seen as queued)
    chaos_db.execute("UPDATE jobq.jobs SET status = 'queued' WHERE id = %s", (job_id,))
    claim(chaos_db, job_id)

    absorbing = found(chaos_db)["absorbing"]

    assert (absorbing["changed_after"], absorbing["claimed_after"], absorbing["not_cancelled"]) == (2, 1, 1)
    assert verdict(chaos_db)["cancelled_absorbing"].ok is False


def test_evidence_counts_a_job_asked_to_stop_and_run_again(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    assert cancel(chaos_db, job_id) == "cancel_requested"
    finish(chaos_db, job_id, lease)
    # a broken reap: requeues the job its worker was asked to stop
    chaos_db.execute("UPDATE jobq.jobs SET status = 'queued' WHERE id = %s", (job_id,))
    lease = claim(chaos_db, job_id)
    finish(chaos_db, job_id, lease)
    pgjobq.complete(chaos_db, job_id, lease)

    requests = found(chaos_db)["requests"]

    assert (requests["asked"], requests["rerun"]) == (1, 1)
    assert verdict(chaos_db)["cancel_requests"].ok is False


def test_evidence_counts_results_that_are_not_the_handlers(chaos_db: Db) -> None:
    for n, result, stored in ((1, True, {"echo": 2}), (2, False, {"echo": 2}), (3, True, None)):
        job_id = enqueue(chaos_db, n=n, result=result)
        lease = claim(chaos_db, job_id)
        finish(chaos_db, job_id, lease)
        pgjobq.complete(chaos_db, job_id, lease, result=stored)

    assert found(chaos_db)["results"] == {"done": 3, "with_result": 2, "wrong": 3}
    read, wrong = read_back(chaos_db, 10, 1)
    assert (read, len(wrong)) == (3, 3)
    assert verdict(chaos_db)["results"].ok is False


def test_evidence_counts_a_replace_given_a_done_job_as_dropped(chaos_db: Db) -> None:
    holder = enqueue(chaos_db, n=1, key="a1")
    lease = claim(chaos_db, holder)
    finish(chaos_db, holder, lease)
    pgjobq.complete(chaos_db, holder, lease)
    queued = enqueue(chaos_db, n=3, key="a2")
    # replaces of payloads 2 and 4: a broken one was given the done holder, a sound one the queued job
    # (which a later replace, of payload 5, took over)
    chaos_db.execute("UPDATE jobq.jobs SET payload = payload || '{\"n\": 5}' WHERE id = %s", (queued,))
    chaos_db.execute(
        "INSERT INTO chaos.replaced (n, job_id) VALUES (2, %s), (4, %s), (5, %s)", (holder, queued, queued)
    )

    replaces = found(chaos_db)["replaces"]

    assert replaces == {"replaces": 3, "dropped": 1, "own": 1, "dropped_done": 1}
    assert verdict(chaos_db)["replace_kept"].ok is False


def test_evidence_counts_a_snooze_that_spent_the_attempt_and_an_early_claim(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    lease = claim(chaos_db, job_id)
    finish(chaos_db, job_id, lease, "snoozed")
    # a broken snooze: the job queued again for later, its attempt kept
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'queued', run_at = now() + interval '1 hour' WHERE id = %s", (job_id,)
    )
    # a broken claim: takes it before its run_at
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'running', lease = lease + 1, attempts = attempts + 1 WHERE id = %s",
        (job_id,),
    )

    snoozes = found(chaos_db)["snoozes"]

    assert (snoozes["snoozes"], snoozes["counted"], snoozes["early_claims"]) == (1, 1, 1)
    assert verdict(chaos_db)["snoozes"].ok is False


def test_evidence_counts_a_change_by_the_canceller_that_is_no_cancel_as_foreign(chaos_db: Db) -> None:
    canceller = f"chaos_{uuid.uuid4().hex[:12]}"
    chaos_db.execute(f'CREATE ROLE "{canceller}" LOGIN')
    try:
        chaos_db.execute("SELECT jobq.grant_admin(%s::regrole)", (canceller,))
        chaos_db.execute(canceller_grants(canceller))
        clean_history(chaos_db)  # its reap: the worker role's
        asked, forged = enqueue(chaos_db), enqueue(chaos_db)
        claim(chaos_db, asked)
        claim(chaos_db, forged)
        chaos_db.execute(f'SET SESSION AUTHORIZATION "{canceller}"')
        assert cancel(chaos_db, asked) == "cancel_requested"
        # the canceller extends a lease: not a cancel's change
        chaos_db.execute(
            "UPDATE jobq.jobs SET lease_expires_at = lease_expires_at + interval '1 s' WHERE id = %s",
            (forged,),
        )
        chaos_db.execute("RESET SESSION AUTHORIZATION")

        with_canceller = evidence(chaos_db, LEASES, chaos_db.info.user, canceller)

        roles = with_canceller["roles"]
        assert (roles["foreign"], roles["by_canceller"]) == (1, 2)
        assert verdict(chaos_db, with_canceller)["worker_level_only"].ok is False
    finally:
        chaos_db.execute("RESET SESSION AUTHORIZATION")
        chaos_db.execute(f'DROP OWNED BY "{canceller}"')
        chaos_db.execute(f'DROP ROLE "{canceller}"')


# What a run sees besides the evidence tables, gone wrong, and the invariants it fails
SEEN_WRONG = [
    pytest.param(
        ["cancel_errors"], {"cancel_refused": {"XX000: jobq.cancel broke": 1}}, id="a cancel refused"
    ),
    pytest.param(["cancel_errors", "job_control_load"], {"cancel_calls": 0}, id="no cancel committed"),
    pytest.param(["unique_keys"], {"shared_seen": 1}, id="a key sampled held twice"),
    pytest.param(["unique_keys"], {"samples": 0}, id="no sample of the keys"),
    pytest.param(["results"], {"misread": [1]}, id="a result read back wrong"),
    pytest.param(["worker_level_only"], {"beyond": ["jobq.jobs"]}, id="a privilege beyond the worker level"),
    pytest.param(["worker_level_only"], {"not_reaping": 1}, id="a worker refused jobq.reap"),
    pytest.param(["job_control_load"], {"variants": 3}, id="a kind of keyed enqueue never used"),
    pytest.param(["job_control_load"], {"conflicts": 0}, id="no unique key conflict"),
    pytest.param(["clean_exit"], {"exits": {"w1": 0, "w2": None}}, id="a worker still running after SIGTERM"),
    pytest.param(["clean_exit"], {"exits": {}}, id="no worker told to exit"),
    pytest.param(["no_crashes"], {"unexpected_exits": [("w3", 1)]}, id="a worker exiting on its own"),
    pytest.param(["reconnect"], {"restarts": restarts(reconnect=None)}, id="a worker never back"),
    pytest.param(["reconnect"], {"restarts": restarts(reconnect=16.0)}, id="a worker back after 16 s"),
    pytest.param(
        ["quiet_cpu"], {"restarts": restarts(cpu=1.0)}, id="a worker spinning while the server is down"
    ),
    pytest.param(["quiet_log"], {"restarts": restarts(log_lines=21)}, id="a worker flooding its log"),
    pytest.param(
        ["reconnect", "quiet_cpu", "quiet_log", "faults"],
        {"restarts": restarts(modes=("fast",))},
        id="one restart only",
    ),
    pytest.param(["late_complete_refused"], {"late_refused": 0}, id="no late complete refused"),
    pytest.param(["faults"], {"kills": 0}, id="no kill"),
    pytest.param(["faults"], {"stop": None}, id="no SIGSTOP"),
    pytest.param(["faults"], {"terminated": 0}, id="no connection terminated"),
    pytest.param(["faults"], {"restarts": restarts(modes=("fast", "fast"))}, id="no immediate restart"),
]


@pytest.mark.parametrize(("keys", "changes"), SEEN_WRONG)
def test_the_verdict_fails_a_run_that_saw(chaos_db: Db, keys: list[str], changes: dict[str, Any]) -> None:
    sound_history(chaos_db)

    judged = verdict(chaos_db, **changes)

    assert failing(judged) == keys


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
    module fixture would be run again after them.  The tests stay on one worker (--dist loadgroup): a
    second worker of the same run that gets here fails them, rather than running the chaos again.
    """
    once_per_run("chaos", "the short chaos run")
    workdir: Path = tmp_path_factory.mktemp("chaos")
    result = run_chaos(ChaosConfig.short(), workdir)
    render(result, Console(width=120))
    yield result


@pytest.mark.slow
def test_chaos_run_judges_every_invariant_the_harness_declares_and_no_other(report: Report) -> None:
    assert sorted(report.keys()) == sorted(INVARIANTS)


@pytest.mark.slow
@pytest.mark.parametrize("key", INVARIANTS)
def test_chaos_run_holds_the_invariant(report: Report, key: str) -> None:
    report.assert_holds(key)
