"""The flow-control chaos run (short version) and the checks it relies on.

tests/chaos/chaos_limits.py: 4,000 jobs on two limited queues (concurrency 50 and key_concurrency 2
over 100 keys, a few of them hot; concurrency 30 and key_concurrency 1 over 40 keys, round robin), a
1-second schedule ticked by the workers, 8 real worker processes of 8 handler threads, SIGKILL, SIGSTOP
and two PostgreSQL restarts.  The slow tests share one run: one test, parametrized over the keys the
harness declares (chaos_limits.INVARIANTS), asserts each invariant (limits swept from the status log and
reached, overlapping executions explained by reaps, no job lost or done twice, one occurrence per second),
another that the run judged exactly those, and another that the schedule was not skipped.  The fast
tests prove the four SQL checks can fail: each forges, in the evidence tables of a test database, what a
broken claim, reap, worker or tick would leave, expects it counted, and expects the run's verdict
(chaos_limits.judge) to fail its invariant; the sound history they start from holds every invariant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from rich.console import Console

import pgjobq
from pgjobq import Job

from chaos.chaos import Invariant
from chaos.chaos_limits import (
    INVARIANTS,
    SCHEMA_DDL,
    LimitsConfig,
    LimitsReport,
    LimitsSeen,
    evidence,
    judge,
    render,
    run_limits,
)
from helpers.fixtures import once_per_run
from helpers.sqlhelpers import Db

# a run of its own: under pytest-xdist it stays on one worker, apart from the other chaos run's
pytestmark = pytest.mark.xdist_group("chaos_limits")

# -- the checks, on forged histories ----------------------------------------------------


@pytest.fixture
def limits_db(db: Db) -> Db:
    """A test database with the run's evidence tables, and its two queues limited to two jobs at once, one
    of a key (fair in round robin)."""
    db.execute(SCHEMA_DDL)
    db.execute("SELECT jobq.configure_queue('limited', concurrency => 2, key_concurrency => 1)")
    db.execute(
        "SELECT jobq.configure_queue('fair', concurrency => 2, key_concurrency => 1,"
        " key_order => 'round_robin')"
    )
    return db


def enqueue(db: Db, queue: str, key: str | None = None, *, fail: bool = False) -> int:
    """Enqueue a job of queue with the concurrency key, acknowledged to the producer (chaos.acked)."""
    payload = {"n": 0, "ms": 1, "mode": "plain", "fail": fail}
    job_id = pgjobq.enqueue(db, queue, payload, max_attempts=1 if fail else 10, concurrency_key=key)
    db.execute("INSERT INTO chaos.acked (id) VALUES (%s)", (job_id,))
    return job_id


def execute(db: Db, job_id: int, lease: int) -> None:
    """Record an execution of job_id under lease, begun now (as the handler does)."""
    db.execute(
        "INSERT INTO chaos.executions (token, job_id, lease, pid, worker)"
        " VALUES (gen_random_uuid(), %s, %s, 1, 'w1')",
        (job_id, lease),
    )


def claim(db: Db, queue: str, n: int) -> list[Job]:
    """Claim up to n jobs of queue (as its limits let), each execution recorded as begun."""
    jobs = pgjobq.claim(db, queue, n, "w1")
    for job in jobs:
        execute(db, job.id, job.lease)
    return jobs


def finish(db: Db, job_id: int, lease: int) -> None:
    db.execute(
        "UPDATE chaos.executions SET finished_at = clock_timestamp(), outcome = 'returned'"
        " WHERE job_id = %s AND lease = %s",
        (job_id, lease),
    )


def complete(db: Db, *jobs: Job) -> None:
    for job in jobs:
        finish(db, job.id, job.lease)
        pgjobq.complete(db, job.id, job.lease)


def start_unclaimed(db: Db, job_id: int) -> int:
    """A broken claim: job_id running under a new lease, whatever its queue's limits; the lease."""
    row = db.execute(
        "UPDATE jobq.jobs SET status = 'running', lease = lease + 1, locked_by = 'w1', locked_at = now(),"
        " lease_expires_at = now() + interval '60 s' WHERE id = %s RETURNING lease",
        (job_id,),
    ).fetchone()
    assert row is not None
    execute(db, job_id, row["lease"])
    return int(row["lease"])


def reap(db: Db, job_id: int) -> None:
    """Reap job_id, as if its worker had died ten minutes ago, and make it runnable again at once."""
    db.execute(
        "UPDATE jobq.jobs SET locked_at = locked_at - interval '10 minutes',"
        " lease_expires_at = lease_expires_at - interval '10 minutes' WHERE id = %s",
        (job_id,),
    )
    db.execute("SELECT jobq.reap()")
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))


def queue_history(db: Db, queue: str, keys: tuple[str, str]) -> None:
    """Three jobs of queue, two of one key: the first claim takes one of each key (the queue's limit, and
    each key's), the third runs after; then a job whose worker dies: reaped, run again while its first
    execution never ended."""
    first, second = keys
    for key in (first, second, first):
        enqueue(db, queue, key)
    complete(db, *claim(db, queue, 3))
    complete(db, *claim(db, queue, 3))
    dying = enqueue(db, queue, second)
    claim(db, queue, 1)
    reap(db, dying)
    (again,) = claim(db, queue, 1)
    assert again.id == dying
    complete(db, again)


def schedule_history(db: Db) -> datetime:
    """The schedule 'tick' of queue 'ticks', every second from ten seconds ago: the occurrences due run
    and done, the later ones cancelled by the unschedule; when it was unscheduled."""
    db.execute(
        "SELECT jobq.schedule('tick', 'ticks', '{\"ms\": 2}', every => interval '1 second',"
        " catch_up => 'all')"
    )
    db.execute(
        "UPDATE jobq.schedule_settings SET next_at = date_trunc('second', now()) - interval '10 seconds'"
        " WHERE name = 'tick'"
    )
    db.execute("SELECT jobq.tick()")
    complete(db, *claim(db, "ticks", 100))
    row = db.execute("SELECT jobq.unschedule('tick') AS ok, clock_timestamp() AS at").fetchone()
    assert row is not None and row["ok"]
    unscheduled_at: datetime = row["at"]
    return unscheduled_at


def sound_history(db: Db) -> datetime:
    """Both limited queues by their rules, a job failing on purpose, and the schedule; when it was
    unscheduled."""
    queue_history(db, "limited", ("k1", "k2"))
    queue_history(db, "fair", ("f1", "f2"))
    failing = enqueue(db, "limited", "k3", fail=True)
    (job,) = claim(db, "limited", 1)
    finish(db, failing, job.lease)
    pgjobq.fail(db, failing, "IntentionalFailure", job.lease)
    return schedule_history(db)


def sound_run(db: Db, key_concurrency: int = 1, **changes: Any) -> tuple[LimitsConfig, LimitsSeen]:
    """The config and what was seen of a run of the history in db that saw nothing wrong (but the changes
    to what it saw): limits of two jobs at once, key_concurrency of limited's keys (fair's: one), as many
    jobs as chaos.acked holds, a schedule ticked over the whole run (10 s), faults of every kind, every
    worker exiting 0 on SIGTERM."""
    row = db.execute("SELECT count(*) AS n FROM chaos.acked").fetchone()
    assert row is not None
    config = dataclasses.replace(
        LimitsConfig.short(), jobs=int(row["n"]), concurrency=2, key_concurrency=key_concurrency,
        fair_concurrency=2, fair_key_concurrency=1,
    )  # fmt: skip
    seen = LimitsSeen(
        scheduled=True, tick_granted=True, wall_produce=10.0, exits={"w1": 0}, unexpected_exits=[], kills=1,
        kills_holding=1, pauses=1, long_stop="w1, 6.0 s, holding 1", restarts=["-m fast", "-m immediate"],
    )  # fmt: skip
    return config, dataclasses.replace(seen, **changes)


def verdict(
    db: Db, unscheduled_at: datetime | None = None, key_concurrency: int = 1, **changes: Any
) -> dict[str, Invariant]:
    """The run's verdict (chaos_limits.judge), by key, on the history in db (unscheduled at
    unscheduled_at), judged as a sound run (sound_run, but the changes)."""
    config, seen = sound_run(db, key_concurrency, **changes)
    return {invariant.key: invariant for invariant in judge(evidence(db, unscheduled_at), config, seen)}


def failing(judged: dict[str, Invariant]) -> list[str]:
    return [key for key, invariant in judged.items() if not invariant.ok]


def sweep(db: Db, queue: str) -> dict[str, Any]:
    """The LIMIT_SWEEP row of queue."""
    return next(row for row in evidence(db)["sweep"] if row["queue"] == queue)


def test_a_sound_history_holds_every_declared_invariant(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)

    found = evidence(limits_db, unscheduled_at)
    config, seen = sound_run(limits_db)
    judged = judge(found, config, seen)

    assert [invariant.key for invariant in judged] == list(INVARIANTS)
    assert failing({invariant.key: invariant for invariant in judged}) == []
    assert {
        (row["queue"], row["peak"], row["over"], row["key_peak"], row["key_over"]) for row in found["sweep"]
    } == {
        ("limited", 2, 0, 1, 0),
        ("fair", 2, 0, 1, 0),
    }
    assert (found["overlaps"]["overlaps"], found["overlaps"]["unexplained"]) == (2, 0)
    assert {k: found["lost"][k] for k in ("lost", "done_twice", "unexecuted", "failed")} == {
        "lost": 0, "done_twice": 0, "unexecuted": 0, "failed": 1,
    }  # fmt: skip
    schedule = ("missing", "doubled", "not_done", "tail_wrong", "wrong_marks")
    assert {k: found["schedule"][k] for k in schedule} == dict.fromkeys(schedule, 0)


def test_the_sweep_counts_a_claim_past_the_queues_concurrency(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    first, second, third = (enqueue(limits_db, "limited", key) for key in ("k7", "k8", "k9"))
    running = claim(limits_db, "limited", 3)
    assert {job.id for job in running} == {first, second}  # the real claim stops at the limit
    lease = start_unclaimed(limits_db, third)
    complete(limits_db, *running)
    finish(limits_db, third, lease)
    pgjobq.complete(limits_db, third, lease)

    row = sweep(limits_db, "limited")

    assert (row["peak"], row["over"]) == (3, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["limit_limited"]


def test_the_sweep_counts_two_jobs_of_one_key_past_its_key_concurrency(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    first, second = enqueue(limits_db, "fair", "f7"), enqueue(limits_db, "fair", "f7")
    running = claim(limits_db, "fair", 2)
    assert [job.id for job in running] == [first]
    lease = start_unclaimed(limits_db, second)
    complete(limits_db, *running)
    finish(limits_db, second, lease)
    pgjobq.complete(limits_db, second, lease)

    row = sweep(limits_db, "fair")

    assert (row["key_peak"], row["key_over"]) == (2, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["key_limit_fair"]


def test_a_queue_never_filled_to_its_concurrency_proves_nothing_of_it(limits_db: Db) -> None:
    for key in ("k1", "k2"):  # one job at a time: the limit of two never reached
        enqueue(limits_db, "limited", key)
        complete(limits_db, *claim(limits_db, "limited", 1))

    row = sweep(limits_db, "limited")

    assert (row["peak"], row["over"], row["hits"], row["keys_at_limit"]) == (1, 0, 0, 2)
    judged = verdict(limits_db)
    assert (judged["limit_limited"].ok, judged["key_limit_limited"].ok) == (False, True)


def test_a_key_never_filled_to_its_key_concurrency_proves_nothing_of_it(limits_db: Db) -> None:
    limits_db.execute("SELECT jobq.configure_queue('limited', concurrency => 2, key_concurrency => 2)")
    for key in ("k1", "k2"):  # two at once, never two of one key
        enqueue(limits_db, "limited", key)
    complete(limits_db, *claim(limits_db, "limited", 2))

    row = sweep(limits_db, "limited")

    assert (row["peak"], row["hits"], row["key_peak"], row["keys_at_limit"]) == (2, 1, 1, 0)
    judged = verdict(limits_db, key_concurrency=2)
    assert (judged["limit_limited"].ok, judged["key_limit_limited"].ok) == (True, False)


def test_a_queue_the_sweep_finds_no_limits_on_fails_both_its_limits(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    found = evidence(limits_db, unscheduled_at)
    found["sweep"] = [row for row in found["sweep"] if row["queue"] != "fair"]  # fair left unconfigured

    judged = judge(found, *sound_run(limits_db))

    assert [inv.key for inv in judged if not inv.ok] == ["limit_fair", "key_limit_fair"]


def test_a_schedule_that_made_no_occurrence_fails(limits_db: Db) -> None:
    queue_history(limits_db, "limited", ("k1", "k2"))  # and no schedule, though the extension has one

    assert evidence(limits_db)["schedule"] is None
    assert verdict(limits_db)["schedule"].ok is False


# What a run sees besides the evidence tables, gone wrong, and the invariant it fails
SEEN_WRONG = [
    pytest.param("clean_exit", {"exits": {"w1": None}}, id="a worker still running after SIGTERM"),
    pytest.param("clean_exit", {"exits": {}}, id="no worker told to exit"),
    pytest.param("clean_exit", {"unexpected_exits": [("w2", 1)]}, id="a worker exiting on its own"),
    pytest.param("faults", {"kills_holding": 0}, id="no kill of a worker holding jobs"),
    pytest.param("faults", {"pauses": 0}, id="no pause"),
    pytest.param("faults", {"long_stop": None}, id="no long SIGSTOP"),
    pytest.param("faults", {"restarts": ["-m fast"]}, id="one restart only"),
    pytest.param("schedule", {"wall_produce": 20.0}, id="a schedule that stopped halfway through the run"),
]


@pytest.mark.parametrize(("key", "changes"), SEEN_WRONG)
def test_the_verdict_fails_a_run_that_saw(limits_db: Db, key: str, changes: dict[str, Any]) -> None:
    unscheduled_at = sound_history(limits_db)

    assert failing(verdict(limits_db, unscheduled_at, **changes)) == [key]


def test_the_verdict_fails_a_run_without_a_reap(limits_db: Db) -> None:
    for key in ("k1", "k2"):
        enqueue(limits_db, "limited", key)
    complete(limits_db, *claim(limits_db, "limited", 2))

    assert evidence(limits_db)["counts"]["reaps"] == 0
    assert verdict(limits_db)["faults"].ok is False


def test_overlapping_executions_without_a_reap_are_unexplained(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    job_id = enqueue(limits_db, "limited", "k7")
    claim(limits_db, "limited", 1)  # its execution never ends: the worker is stuck, not dead
    # a broken release: the job queued again under a lease not ended by a reap, and run meanwhile
    limits_db.execute("UPDATE jobq.jobs SET status = 'queued' WHERE id = %s", (job_id,))
    complete(limits_db, *claim(limits_db, "limited", 1))

    overlaps = evidence(limits_db)["overlaps"]

    assert (overlaps["overlaps"], overlaps["same_lease"], overlaps["unexplained"]) == (3, 0, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["overlaps"]


def test_overlapping_executions_under_one_lease_are_unexplained(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    enqueue(limits_db, "limited", "k7")
    (job,) = claim(limits_db, "limited", 1)
    execute(limits_db, job.id, job.lease)  # a broken worker runs it twice at once
    complete(limits_db, job)

    overlaps = evidence(limits_db)["overlaps"]

    assert (overlaps["overlaps"], overlaps["same_lease"], overlaps["unexplained"]) == (3, 1, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["overlaps"]


def test_a_job_never_run_is_lost(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    enqueue(limits_db, "limited", "k7")  # acknowledged, and no worker ever takes it

    lost = evidence(limits_db)["lost"]

    assert (lost["lost"], lost["unfinished"]) == (1, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["lost"]


def test_a_job_done_twice_is_counted(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    enqueue(limits_db, "limited", "k7")
    (job,) = claim(limits_db, "limited", 1)
    complete(limits_db, job)
    # a broken claim takes the done job, and it is done again
    lease = start_unclaimed(limits_db, job.id)
    finish(limits_db, job.id, lease)
    pgjobq.complete(limits_db, job.id, lease)

    assert evidence(limits_db)["lost"]["done_twice"] == 1
    assert verdict(limits_db, unscheduled_at)["lost"].ok is False


def test_a_job_done_without_an_execution_is_counted(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    enqueue(limits_db, "limited", "k7")
    (job,) = pgjobq.claim(limits_db, "limited", 1, "w1")
    pgjobq.complete(limits_db, job.id, job.lease)  # no handler ever ran it

    assert evidence(limits_db)["lost"]["unexecuted"] == 1
    assert failing(verdict(limits_db, unscheduled_at)) == ["lost"]


def test_a_second_with_no_occurrence_is_missing(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    # a tick that skipped a second: no job of it (the first and last ones bound the run)
    limits_db.execute(
        "DELETE FROM jobq.jobs WHERE id = (SELECT id FROM jobq.jobs WHERE queue = 'ticks' AND status = 'done'"
        " ORDER BY (headers->>'occurrence')::timestamptz LIMIT 1 OFFSET 3)"
    )

    schedule = evidence(limits_db, unscheduled_at)["schedule"]

    assert (schedule["missing"], schedule["doubled"]) == (1, 0)
    assert failing(verdict(limits_db, unscheduled_at)) == ["schedule"]


def test_a_second_with_two_occurrences_is_doubled(limits_db: Db) -> None:
    unscheduled_at = sound_history(limits_db)
    row = limits_db.execute(
        "SELECT headers FROM jobq.jobs WHERE queue = 'ticks' AND status = 'done' ORDER BY id LIMIT 1"
    ).fetchone()
    assert row is not None
    # a tick that enqueued a second twice, past the unique key, and both ran
    pgjobq.enqueue(limits_db, "ticks", {"ms": 2}, headers=row["headers"])
    complete(limits_db, *claim(limits_db, "ticks", 1))

    schedule = evidence(limits_db, unscheduled_at)["schedule"]

    assert (schedule["missing"], schedule["doubled"], schedule["wrong_marks"]) == (0, 1, 1)
    assert failing(verdict(limits_db, unscheduled_at)) == ["schedule"]


# -- the short limits chaos run ---------------------------------------------------------------


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsReport]:
    """One short limits chaos run for the tests below; its table is printed (pytest -s shows it).

    Session-scoped and kept on one pytest-xdist worker by its group, as test_chaos.py's: a second worker
    of the same run that gets here fails them rather than running it again.
    """
    once_per_run("chaos-limits", "the limits chaos run")
    result = run_limits(LimitsConfig.short(), tmp_path_factory.mktemp("chaos-limits"))
    render(result, Console(width=140))
    yield result


@pytest.mark.slow
def test_limits_chaos_run_judges_every_invariant_the_harness_declares_and_no_other(
    report: LimitsReport,
) -> None:
    assert sorted(report.keys()) == sorted(INVARIANTS)


@pytest.mark.slow
def test_limits_chaos_run_checks_the_schedule(report: LimitsReport) -> None:
    assert not report.schedule_skipped, "the extension has no jobq.schedule: the schedule went unchecked"


@pytest.mark.slow
@pytest.mark.parametrize("key", INVARIANTS)
def test_limits_chaos_run_holds_the_invariant(report: LimitsReport, key: str) -> None:
    report.assert_holds(key)
