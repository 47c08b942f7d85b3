"""Wake-ups: jobq.register_waiter registers a waiting worker; enqueues notify jobq_<queue> while one waits."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
from psycopg import sql

from helpers.sqlhelpers import (
    MARKER_CHANNEL,
    Connect,
    Db,
    claim_one,
    enqueue,
    notifications_before_marker,
    scalar,
)


def listener(
    connect: Connect, *queues: str, waiting: bool = True, up_to: str = "1 hour"
) -> psycopg.Connection[Any]:
    """A separate autocommit connection listening on the channels of queues, registered as waiting on each."""
    conn = connect()
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(MARKER_CHANNEL)))  # for channels_heard
    for queue in queues:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"jobq_{queue}")))
        if waiting:
            assert (
                scalar(conn, "SELECT registered FROM jobq.register_waiter(%s, 'ears', %s)", (queue, up_to))
                is True
            )
    return conn


def channels_heard(conn: psycopg.Connection[Any]) -> Counter[str]:
    """How many notifications committed so far reached conn, on each channel: all of them arrive before a
    marker conn sends itself now, so nothing is waited for on a guess."""
    return Counter(channel for channel, _ in notifications_before_marker(conn, conn))


def waiters(db: Db) -> list[tuple[str, str]]:
    return [
        (row["queue"], row["worker"])
        for row in db.execute("SELECT queue, worker FROM jobq._waiters ORDER BY 1, 2")
    ]


def test_an_enqueue_notifies_the_queue_channel_when_it_commits_while_a_worker_waits(connect: Connect) -> None:
    ears = listener(connect, "default")
    producer = connect(autocommit=False)
    enqueue(producer)

    producer.commit()

    heard = list(ears.notifies(timeout=2, stop_after=1))
    assert [(notify.channel, notify.payload) for notify in heard] == [("jobq_default", "")]


def test_an_enqueue_notifies_nobody_while_no_worker_waits(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default", waiting=False)

    enqueue(db)

    assert channels_heard(ears) == Counter()


def test_an_enqueue_notifies_nobody_once_the_wait_has_expired(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default", up_to="50 milliseconds")
    db.execute("SELECT pg_sleep(0.1)")

    enqueue(db)

    assert channels_heard(ears) == Counter()


def test_an_enqueue_notifies_nobody_once_the_waiting_worker_has_claimed_a_job(
    db: Db, connect: Connect
) -> None:
    enqueue(db)
    ears = listener(connect, "default")
    ears.execute("SELECT * FROM jobq.claim('default', 1, 'ears')")  # now busy

    enqueue(db)

    assert waiters(db) == []
    assert channels_heard(ears) == Counter()


def test_a_claim_that_finds_nothing_leaves_the_worker_waiting(db: Db, connect: Connect) -> None:
    # the claim a worker makes after registering, before it sleeps
    ears = listener(connect, "default")
    ears.execute("SELECT * FROM jobq.claim('default', 1, 'ears')")

    enqueue(db)

    assert waiters(db) == [("default", "ears")]
    assert channels_heard(ears) == Counter({"jobq_default": 1})


def test_a_claim_ends_only_the_claiming_workers_wait(db: Db, connect: Connect) -> None:
    enqueue(db)
    listener(connect, "default", "emails")
    db.execute("SELECT jobq.register_waiter('default', 'other', '1 hour')")

    db.execute("SELECT * FROM jobq.claim('default', 1, 'ears')")

    assert waiters(db) == [("default", "other"), ("emails", "ears")]


def test_waiting_again_extends_the_workers_one_registration(db: Db) -> None:
    db.execute("SELECT jobq.register_waiter('default', 'w1', '1 second')")

    db.execute("SELECT jobq.register_waiter('default', 'w1', '1 hour')")

    (row,) = db.execute(
        "SELECT until - statement_timestamp() > interval '59 minutes' AS long FROM jobq._waiters"
    ).fetchall()
    assert row == {"long": True}


def test_an_enqueue_notifies_nobody_before_it_commits(connect: Connect) -> None:
    ears = listener(connect, "default")
    producer = connect(autocommit=False)
    enqueue(producer)

    assert list(ears.notifies(timeout=0.5, stop_after=1)) == []
    producer.commit()
    assert len(list(ears.notifies(timeout=2, stop_after=1))) == 1


def test_a_rolled_back_enqueue_notifies_nobody(connect: Connect) -> None:
    ears = listener(connect, "default")
    producer = connect(autocommit=False)
    enqueue(producer)

    producer.rollback()

    assert list(ears.notifies(timeout=1, stop_after=1)) == []


def test_an_enqueue_notifies_only_its_own_queue(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default", "emails")

    enqueue(db, "emails")

    assert channels_heard(ears) == Counter({"jobq_emails": 1})


def test_a_repeatable_read_enqueue_notifies_without_looking_for_waiters(connect: Connect) -> None:
    # its snapshot may predate a registration, so it cannot trust what it sees
    ears = listener(connect, "default", waiting=False)
    producer = connect(autocommit=False)
    producer.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    enqueue(producer)

    producer.commit()

    assert channels_heard(ears) == Counter({"jobq_default": 1})


def test_a_wait_is_refused_while_a_producer_of_the_queue_is_in_flight(db: Db, connect: Connect) -> None:
    producer = connect(autocommit=False)
    enqueue(producer)

    in_flight = scalar(db, "SELECT registered FROM jobq.register_waiter('default', 'w1', '1 second')")
    producer.commit()
    after = scalar(db, "SELECT registered FROM jobq.register_waiter('default', 'w1', '1 second')")

    assert (in_flight, after) == (False, True)


def test_a_producer_of_another_queue_does_not_hold_a_wait_back(db: Db, connect: Connect) -> None:
    producer = connect(autocommit=False)
    enqueue(producer, "emails")

    assert scalar(db, "SELECT registered FROM jobq.register_waiter('default', 'w1', '1 second')") is True


def test_a_wait_tells_the_earliest_future_run_at_of_the_queue_across_priorities(db: Db) -> None:
    enqueue(db, priority=5, run_at=scalar(db, "SELECT now() + interval '1 hour'"))
    soonest = scalar(db, "SELECT now() + interval '10 minutes'")
    enqueue(db, priority=-3, run_at=soonest)
    enqueue(db, priority=7)  # runnable now: not in the future
    enqueue(db, "other", run_at=scalar(db, "SELECT now() + interval '1 minute'"))

    assert scalar(db, "SELECT next_run_at FROM jobq.register_waiter('default', 'w1', '1 second')") == soonest


def test_a_wait_on_a_queue_without_future_jobs_tells_no_run_at(db: Db) -> None:
    enqueue(db)

    assert scalar(db, "SELECT next_run_at FROM jobq.register_waiter('default', 'w1', '1 second')") is None


def test_enqueue_many_of_100000_jobs_sends_one_notification(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default", "other")

    db.execute(
        "SELECT jobq.enqueue_many('default', array_agg(jsonb_build_object('n', g)))"
        " FROM generate_series(1, 100000) AS g"
    )

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 100_000
    assert channels_heard(ears) == Counter({"jobq_default": 1})


def test_an_empty_enqueue_many_notifies_nobody(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default")

    db.execute("SELECT jobq.enqueue_many('default', '{}')")

    assert channels_heard(ears) == Counter()


def test_a_direct_insert_into_the_table_notifies_nobody(db: Db, connect: Connect) -> None:
    # the functions notify, not a trigger: the admin level's direct writes are found by polling
    ears = listener(connect, "default")

    db.execute("INSERT INTO jobq.jobs (queue, payload) VALUES ('default', '{}')")

    assert channels_heard(ears) == Counter()


def test_1000_enqueues_in_one_transaction_send_one_notification(connect: Connect) -> None:
    ears = listener(connect, "default")
    producer = connect(autocommit=False)
    with producer.cursor() as cur:
        cur.executemany(
            "SELECT jobq.enqueue('default', jsonb_build_object('n', %s::int))", [(n,) for n in range(1000)]
        )

    producer.commit()

    assert scalar(producer, "SELECT count(*) FROM jobq.jobs") == 1000
    assert channels_heard(ears) == Counter({"jobq_default": 1})


def test_retry_failed_notifies_the_queues_it_redrives(db: Db, connect: Connect) -> None:
    job_id = enqueue(db, "emails", max_attempts=1)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, claim_one(db, "emails")["lease"]))
    ears = listener(connect, "emails", "default", waiting=False)

    db.execute("SELECT jobq.retry_failed()")

    assert channels_heard(ears) == Counter({"jobq_emails": 1})


def test_claim_and_complete_notify_nobody(db: Db, connect: Connect) -> None:
    job_id = enqueue(db)
    ears = listener(connect, "default")

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, claim_one(db)["lease"]))

    assert channels_heard(ears) == Counter()


def test_channel_of_a_queue_is_jobq_underscore_queue(db: Db) -> None:
    assert scalar(db, "SELECT jobq.channel('emails')") == "jobq_emails"


def test_the_channel_of_the_longest_queue_name_is_a_valid_identifier(db: Db, connect: Connect) -> None:
    queue = "q" * 58
    channel = scalar(db, "SELECT jobq.channel(%s)", (queue,))
    ears = listener(connect, queue)

    enqueue(db, queue)

    assert len(channel) == 63  # NAMEDATALEN - 1: LISTEN would truncate anything longer
    assert channels_heard(ears) == Counter({channel: 1})


def test_the_three_argument_wait_deprecated_in_0_10_0_is_gone_and_the_wait_for_a_job_stays(db: Db) -> None:
    gone = scalar(db, "SELECT to_regprocedure('jobq.wait(text, text, interval)')")
    stays = scalar(db, "SELECT to_regprocedure('jobq.wait(bigint, interval)')")

    assert gone is None
    assert stays is not None
