"""Limits (0.7.0): concurrency, key_concurrency with key_order, rate_limit per rate_interval.

A queue's limits are set with jobq.configure_queue and enforced by jobq.claim (and everything that claims
through it: complete_and_claim, claim_any), counted from the running jobs themselves.  The races are in
tests/isolation/specs/limit_*.spec and rate_window.spec.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, enqueue, fill, scalar

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major, fresh and
# upgraded; on every other major the isolation specs (tests/isolation) and the bad-input table
# (tests/sql/test_bad_input.py) run these functions, and each major is where locking and plans differ.
pytestmark = pytest.mark.main_targets


def configure(db: Db, queue: str, **settings: Any) -> dict[str, Any]:
    named = ", ".join(f"{name} => %({name})s" for name in settings)
    row = db.execute(
        f"SELECT * FROM jobq.configure_queue(%(queue)s, {named})", {"queue": queue, **settings}
    ).fetchone()
    assert row is not None
    return row


def claimed(db: Db, queue: str = "default", n: int = 10, worker: str = "w1") -> list[int]:
    return [row["id"] for row in db.execute("SELECT id FROM jobq.claim(%s, %s, %s)", (queue, n, worker))]


def keyed(db: Db, keys: list[str | None], queue: str = "default", priority: int = 0) -> list[int]:
    ids = scalar(
        db,
        "SELECT jobq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]), priority => %s,"
        " concurrency_keys => %s)",
        (queue, len(keys), priority, keys),
    )
    assert isinstance(ids, list)
    return ids


def complete(db: Db, job_id: int) -> None:
    db.execute("SELECT jobq.complete(id, lease) FROM jobq.jobs WHERE id = %s", (job_id,))


def running(db: Db, queue: str = "default") -> int:
    count = scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status = 'running'", (queue,))
    assert isinstance(count, int)
    return count


# --- concurrency -------------------------------------------------------------------------------------------


def test_a_claim_takes_no_more_than_the_concurrency_leaves_room_for(db: Db) -> None:
    configure(db, "default", concurrency=3)
    ids = fill(db, 10)

    assert claimed(db, n=10) == ids[:3]
    assert claimed(db, n=10, worker="w2") == []


def test_a_completion_frees_a_place_for_the_next_claim(db: Db) -> None:
    configure(db, "default", concurrency=1)
    first, second = fill(db, 2)
    claimed(db)

    complete(db, first)

    assert claimed(db) == [second]


def test_a_failure_that_retries_frees_its_place(db: Db) -> None:
    configure(db, "default", concurrency=1)
    first, second = fill(db, 2)
    claimed(db)

    db.execute("SELECT jobq.fail(%s, 'boom', 1, retry_in => '1 hour')", (first,))

    assert claimed(db) == [second]


def test_a_running_job_whose_lease_expired_still_holds_its_place_until_reaped(db: Db) -> None:
    configure(db, "default", concurrency=1)
    first, second = fill(db, 2)
    claimed(db)
    db.execute("UPDATE jobq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (first,))

    assert claimed(db) == []
    db.execute("SELECT jobq.reap()")
    assert claimed(db) == [second]


def test_complete_and_claim_applies_the_limit(db: Db) -> None:
    configure(db, "default", concurrency=2)
    ids = fill(db, 5)
    held = db.execute("SELECT id, lease FROM jobq.claim('default', 2, 'w1')").fetchall()

    rows = db.execute(
        "SELECT id, status FROM jobq.complete_and_claim(%s, %s, 'default', 5, 'w1')",
        ([held[0]["id"]], [held[0]["lease"]]),
    ).fetchall()

    assert [(row["id"], row["status"]) for row in rows] == [(ids[0], "done"), (ids[2], "running")]


def test_a_queue_without_limits_is_not_gated(db: Db) -> None:
    configure(db, "default", max_attempts=5)
    fill(db, 5)

    assert len(claimed(db, n=5)) == 5
    assert scalar(db, "SELECT count(*) FROM jobq.queue_gates") == 0


def test_unsetting_the_concurrency_lifts_the_limit(db: Db) -> None:
    configure(db, "default", concurrency=1)
    fill(db, 3)
    claimed(db)

    configure(db, "default", unset=["concurrency"])

    assert len(claimed(db)) == 2


def test_a_limit_lowered_below_the_running_jobs_lets_them_finish_and_claims_nothing(db: Db) -> None:
    ids = fill(db, 4)
    claimed(db, n=3)
    configure(db, "default", concurrency=1)

    assert claimed(db) == []
    for job_id in ids[:3]:
        complete(db, job_id)
    assert claimed(db) == [ids[3]]


def test_the_limit_of_one_queue_leaves_the_others_alone(db: Db) -> None:
    configure(db, "default", concurrency=1)
    fill(db, 2)
    others = fill(db, 2, queue="other")
    claimed(db)

    assert claimed(db, "other") == others


def test_a_claim_of_a_limited_queue_in_a_repeatable_read_transaction_is_refused(
    connect: Connect, db: Db
) -> None:
    configure(db, "default", concurrency=1)
    fill(db, 1)
    conn = connect(autocommit=False)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")

    with pytest.raises(psycopg.errors.InvalidTransactionState) as refused:
        conn.execute("SELECT * FROM jobq.claim('default', 1, 'w1')")

    assert "READ COMMITTED" in str(refused.value)
    conn.rollback()
    assert running(db) == 0


def test_the_view_of_queues_shows_the_limits(db: Db) -> None:
    row = configure(db, "default", concurrency=4, key_concurrency=2, key_order="round_robin", rate_limit=10)

    assert (
        row["concurrency"],
        row["key_concurrency"],
        row["key_order"],
        row["rate_limit"],
        row["rate_interval"],
    ) == (
        4,
        2,
        "round_robin",
        10,
        timedelta(seconds=1),
    )


def test_a_queue_without_limits_shows_none_and_priority_order(db: Db) -> None:
    row = configure(db, "default", max_attempts=2)

    assert (row["concurrency"], row["key_concurrency"], row["key_order"], row["rate_limit"]) == (
        None,
        None,
        "priority",
        None,
    )


# --- concurrency keys -------------------------------------------------------------------------------------


def test_key_concurrency_of_one_serialises_each_key(db: Db) -> None:
    configure(db, "default", key_concurrency=1)
    a1, a2, b1 = keyed(db, ["a", "a", "b"])

    assert claimed(db) == [a1, b1]
    complete(db, a1)
    assert claimed(db) == [a2]


def test_key_concurrency_lets_that_many_of_a_key_run(db: Db) -> None:
    configure(db, "default", key_concurrency=2)
    ids = keyed(db, ["a", "a", "a", "b"])

    assert claimed(db) == [ids[0], ids[1], ids[3]]


def test_jobs_without_a_key_are_not_limited_per_key(db: Db) -> None:
    configure(db, "default", key_concurrency=1)
    ids = keyed(db, [None, None, "a", "a"])

    assert claimed(db) == ids[:3]


def test_the_keys_of_a_queue_without_key_concurrency_change_nothing(db: Db) -> None:
    ids = keyed(db, ["a", "a", "a"])

    assert claimed(db) == ids


def test_a_concurrency_and_a_key_concurrency_both_hold(db: Db) -> None:
    configure(db, "default", concurrency=2, key_concurrency=1)
    ids = keyed(db, ["a", "a", "b", "c"])

    assert claimed(db) == [ids[0], ids[2]]


def test_a_done_job_drops_its_key_and_a_failed_one_keeps_it(db: Db) -> None:
    configure(db, "default", key_concurrency=1, max_attempts=1)
    done, failed = keyed(db, ["a", "b"])
    claimed(db)

    complete(db, done)
    db.execute("SELECT jobq.fail(%s, 'boom', 1)", (failed,))

    keys = db.execute("SELECT id, concurrency_key FROM jobq.concurrency_keys ORDER BY id").fetchall()
    assert keys == [{"id": failed, "concurrency_key": "b"}]


def test_a_redriven_failed_job_keeps_its_key(db: Db) -> None:
    configure(db, "default", key_concurrency=1, max_attempts=1)
    failed, waiting = keyed(db, ["a", "a"])
    claimed(db)
    db.execute("SELECT jobq.fail(%s, 'boom', 1)", (failed,))
    assert claimed(db) == [waiting]

    db.execute("SELECT jobq.retry_failed(ids => ARRAY[%s]::bigint[])", (failed,))

    assert claimed(db) == []
    complete(db, waiting)
    assert claimed(db) == [failed]


def test_a_cancelled_job_drops_its_key(db: Db) -> None:
    (job_id,) = keyed(db, ["a"])

    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert scalar(db, "SELECT count(*) FROM jobq.concurrency_keys") == 0


def test_priority_order_passes_over_a_full_key_to_the_next_job_in_claim_order(db: Db) -> None:
    configure(db, "default", key_concurrency=1)
    urgent = keyed(db, ["hot", "hot", "hot"], priority=5)
    later = keyed(db, ["cold"], priority=0)

    assert claimed(db, n=1) == [urgent[0]]
    assert claimed(db, n=1) == later


def test_round_robin_gives_each_key_a_turn_before_a_second_job_of_any(db: Db) -> None:
    configure(db, "default", key_concurrency=10, key_order="round_robin")
    backlog = keyed(db, ["big"] * 50)
    small = keyed(db, ["small"])

    assert claimed(db, n=2) == [backlog[0], small[0]]


def test_round_robin_goes_on_after_the_key_served_last(db: Db) -> None:
    configure(db, "default", key_concurrency=10, key_order="round_robin")
    a = keyed(db, ["a"] * 3)
    b = keyed(db, ["b"] * 3)
    c = keyed(db, ["c"] * 3)

    turns = [claimed(db, n=1)[0] for _ in range(6)]

    assert turns == [a[0], b[0], c[0], a[1], b[1], c[1]]


def test_round_robin_takes_more_rounds_while_room_is_left(db: Db) -> None:
    configure(db, "default", key_concurrency=2, key_order="round_robin")
    a = keyed(db, ["a"] * 3)
    b = keyed(db, ["b"])

    assert sorted(claimed(db, n=10)) == sorted([a[0], a[1], b[0]])


def test_round_robin_serves_jobs_without_a_key_after_the_keys(db: Db) -> None:
    configure(db, "default", key_concurrency=1, key_order="round_robin")
    plain = keyed(db, [None])
    a = keyed(db, ["a", "a"])

    assert claimed(db, n=1) == [a[0]]
    assert claimed(db, n=1) == plain


def test_round_robin_takes_a_keys_jobs_by_priority(db: Db) -> None:
    configure(db, "default", key_concurrency=1, key_order="round_robin")
    low = keyed(db, ["a"], priority=0)
    high = keyed(db, ["a"], priority=9)

    assert claimed(db) == high
    complete(db, high[0])
    assert claimed(db) == low


def test_round_robin_skips_a_keys_delayed_jobs(db: Db) -> None:
    configure(db, "default", key_concurrency=1, key_order="round_robin")
    enqueue(db, concurrency_key="a", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    b = keyed(db, ["b"])

    assert claimed(db) == b


def test_a_backlog_of_one_tenant_does_not_starve_another_under_round_robin(db: Db) -> None:
    configure(db, "default", concurrency=1, key_concurrency=1, key_order="round_robin")
    big = keyed(db, ["big"] * 200)
    small = keyed(db, ["small"])
    order = []
    for _ in range(3):
        (got,) = claimed(db, n=1)
        order.append(got)
        complete(db, got)

    assert small[0] in order
    assert order[0] == big[0]


# --- rate limits -----------------------------------------------------------------------------------------


def test_a_rate_limited_claim_returns_fewer_jobs_and_no_error(db: Db) -> None:
    configure(db, "default", rate_limit=3, rate_interval="1 hour")
    ids = fill(db, 5)

    assert claimed(db, n=2) == ids[:2]
    assert claimed(db, n=2) == ids[2:3]
    assert claimed(db, n=2) == []


def test_completions_do_not_refill_the_rate_window(db: Db) -> None:
    configure(db, "default", rate_limit=1, rate_interval="1 hour")
    first, _ = fill(db, 2)
    claimed(db)

    complete(db, first)

    assert claimed(db) == []


def test_the_window_slides_claims_older_than_the_interval_out(db: Db) -> None:
    configure(db, "default", rate_limit=1, rate_interval="1 hour")
    _, second = fill(db, 2)
    claimed(db)
    db.execute("UPDATE jobq.queue_gates SET claim_times = ARRAY[now() - interval '61 minutes']")

    assert claimed(db) == [second]


def test_rate_limit_alone_gets_a_window_of_one_second(db: Db) -> None:
    row = configure(db, "default", rate_limit=5)

    assert row["rate_interval"] == timedelta(seconds=1)


def test_unsetting_the_rate_limit_unsets_its_window(db: Db) -> None:
    configure(db, "default", rate_limit=5, rate_interval="1 minute")

    row = configure(db, "default", unset=["rate_limit"])

    assert (row["rate_limit"], row["rate_interval"]) == (None, None)


def test_a_new_window_for_an_existing_rate_limit_is_kept(db: Db) -> None:
    configure(db, "default", rate_limit=5)

    row = configure(db, "default", rate_interval="10 minutes")

    assert (row["rate_limit"], row["rate_interval"]) == (5, timedelta(minutes=10))
