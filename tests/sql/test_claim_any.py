"""jobq.claim_any (0.7.0): one claim over several queues, best first across them, each queue's rules kept."""

from __future__ import annotations

import pytest

from helpers.sqlhelpers import Db, enqueue, fill

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major, fresh and
# upgraded; on every other major the isolation specs (tests/isolation) and the bad-input table
# (tests/sql/test_bad_input.py) run these functions, and each major is where locking and plans differ.
pytestmark = pytest.mark.main_targets


def claimed(db: Db, queues: list[str], n: int = 10) -> list[int]:
    return [row["id"] for row in db.execute("SELECT id FROM jobq.claim_any(%s, %s, 'w1')", (queues, n))]


def test_claim_any_takes_jobs_of_every_queue_named(db: Db) -> None:
    a = enqueue(db, "a")
    b = enqueue(db, "b")
    enqueue(db, "c")

    assert claimed(db, ["a", "b"]) == [a, b]


def test_claim_any_takes_the_best_jobs_across_the_queues(db: Db) -> None:
    low = enqueue(db, "a", priority=0)
    high = enqueue(db, "b", priority=5)
    middle = enqueue(db, "a", priority=3)

    assert claimed(db, ["a", "b"], n=2) == [high, middle]
    assert claimed(db, ["a", "b"], n=2) == [low]


def test_claim_any_returns_the_jobs_in_claim_order(db: Db) -> None:
    first = enqueue(db, "b")
    second = enqueue(db, "a")

    assert claimed(db, ["a", "b"]) == [first, second]


def test_claim_any_skips_a_paused_queue(db: Db) -> None:
    enqueue(db, "a", priority=9)
    b = enqueue(db, "b")
    db.execute("SELECT jobq.pause('a')")

    assert claimed(db, ["a", "b"], n=1) == [b]


def test_claim_any_respects_each_queues_concurrency_and_fills_from_the_others(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('a', concurrency => 1)")
    a = fill(db, 3, queue="a", priority=5)
    b = fill(db, 3, queue="b")

    assert claimed(db, ["a", "b"], n=3) == [a[0], b[0], b[1]]


def test_claim_any_of_one_queue_is_a_claim(db: Db) -> None:
    ids = fill(db, 2, queue="a")

    assert claimed(db, ["a", "a"]) == ids


def test_claim_any_sets_the_lease_of_every_job(db: Db) -> None:
    enqueue(db, "a")
    enqueue(db, "b")

    rows = db.execute(
        "SELECT status, lease, lease_expires_at - locked_at AS length"
        " FROM jobq.claim_any(ARRAY['a', 'b'], 5, 'w1', '30 seconds')"
    ).fetchall()

    assert [(row["status"], row["lease"], row["length"].total_seconds()) for row in rows] == [
        ("running", 1, 30.0),
        ("running", 1, 30.0),
    ]
