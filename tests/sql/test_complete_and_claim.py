"""The batched worker calls: jobq.complete_and_claim and jobq.heartbeat_many."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Db, fill, make_stale, scalar


def complete_and_claim(db: Db, acks: list[tuple[int, int]], n: int, queue: str = "default") -> list[Any]:
    ids = [job_id for job_id, _ in acks]
    leases = [lease for _, lease in acks]
    return db.execute(
        "SELECT id, status, lease FROM jobq.complete_and_claim(%s::bigint[], %s::bigint[], %s, %s, 'w1')",
        (ids, leases, queue, n),
    ).fetchall()


def test_with_nothing_to_acknowledge_it_claims_like_claim(db: Db) -> None:
    first, second, _ = fill(db, 3)

    rows = complete_and_claim(db, [], 2)

    assert rows == [
        {"id": first, "status": "running", "lease": 1},
        {"id": second, "status": "running", "lease": 1},
    ]


def test_acknowledged_jobs_come_first_as_done_then_the_claimed_ones_as_running(db: Db) -> None:
    first, second, third, fourth = fill(db, 4)
    complete_and_claim(db, [], 2)

    rows = complete_and_claim(db, [(first, 1), (second, 1)], 2)

    assert rows == [
        {"id": first, "status": "done", "lease": 1},
        {"id": second, "status": "done", "lease": 1},
        {"id": third, "status": "running", "lease": 1},
        {"id": fourth, "status": "running", "lease": 1},
    ]


def test_a_repeated_acknowledgement_returns_the_jobs_again_as_done(db: Db) -> None:
    first, second = fill(db, 2)
    complete_and_claim(db, [], 2)
    complete_and_claim(db, [(first, 1), (second, 1)], 1)
    finished = db.execute("SELECT id, finished_at FROM jobq.jobs ORDER BY id").fetchall()

    rows = complete_and_claim(db, [(second, 1), (first, 1)], 1)

    assert rows == [
        {"id": first, "status": "done", "lease": 1},
        {"id": second, "status": "done", "lease": 1},
    ]
    assert db.execute("SELECT id, finished_at FROM jobq.jobs ORDER BY id").fetchall() == finished


@pytest.mark.parametrize("already_done", [False, True], ids=["running", "done"])
def test_a_pair_given_twice_is_acknowledged_once(db: Db, already_done: bool) -> None:
    (job_id,) = fill(db, 1)
    complete_and_claim(db, [], 1)
    if already_done:
        complete_and_claim(db, [(job_id, 1)], 1)

    rows = complete_and_claim(db, [(job_id, 1), (job_id, 1)], 1)

    assert rows == [{"id": job_id, "status": "done", "lease": 1}]


def test_a_stale_lease_is_left_out_and_the_job_is_not_completed(db: Db) -> None:
    (job_id,) = fill(db, 1)
    complete_and_claim(db, [], 1)
    make_stale(db, job_id)
    db.execute("SELECT * FROM jobq.reap()")

    rows = complete_and_claim(db, [(job_id, 1)], 1)

    assert rows == []
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "queued"


def test_a_refused_claim_acknowledges_nothing(db: Db) -> None:
    (job_id,) = fill(db, 1)
    complete_and_claim(db, [], 1)

    with pytest.raises(psycopg.errors.InvalidParameterValue, match="queue must be"):
        complete_and_claim(db, [(job_id, 1)], 1, queue="Not A Queue")

    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "running"


@pytest.mark.parametrize(
    ("ids", "leases", "n", "sqlstate", "message"),
    [
        (None, [], 1, "22004", "ids must not be NULL"),
        ([], None, 1, "22004", "leases must not be NULL"),
        ([1, 2], [1], 1, "22023", "ids and leases must have the same length"),
        ([], [], 0, "22023", "n must be between 1 and 1000"),
        ([], [], 1001, "22023", "n must be between 1 and 1000"),
        ([], [], None, "22004", "n must not be NULL"),
    ],
    ids=["null ids", "null leases", "lengths differ", "n zero", "n huge", "n null"],
)
def test_bad_arguments_are_refused_naming_the_argument(
    db: Db, ids: list[int] | None, leases: list[int] | None, n: int | None, sqlstate: str, message: str
) -> None:
    fill(db, 1)

    with pytest.raises(psycopg.Error, match=message) as raised:
        db.execute(
            "SELECT * FROM jobq.complete_and_claim(%s::bigint[], %s::bigint[], 'default', %s, 'w1')",
            (ids, leases, n),
        )

    assert raised.value.sqlstate == sqlstate
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'queued'") == 1


def test_heartbeat_many_extends_the_leases_still_held_and_leaves_out_the_rest(db: Db) -> None:
    held, reaped, finished = fill(db, 3)
    complete_and_claim(db, [], 3)
    make_stale(db, reaped)
    db.execute("SELECT * FROM jobq.reap()")
    db.execute("SELECT jobq.complete(%s, 1)", (finished,))
    make_stale(db, held, "30 seconds")

    extended = [
        row["heartbeat_many"]
        for row in db.execute(
            "SELECT jobq.heartbeat_many(%s::bigint[], %s::bigint[])", ([held, reaped, finished], [1, 1, 1])
        )
    ]

    assert extended == [held]
    assert scalar(db, "SELECT locked_at > now() - interval '5 seconds' FROM jobq.jobs WHERE id = %s", (held,))


def test_heartbeat_many_refuses_arrays_of_different_lengths_naming_them(db: Db) -> None:
    with pytest.raises(
        psycopg.errors.InvalidParameterValue, match="ids and leases must have the same length"
    ):
        db.execute("SELECT jobq.heartbeat_many(ARRAY[1, 2]::bigint[], ARRAY[1]::bigint[])")
