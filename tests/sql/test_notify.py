"""Wake-ups: the NOTIFY trigger on jobq.jobs and jobq.channel."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, scalar


def listener(connect: Connect, *queues: str) -> psycopg.Connection[Any]:
    """A separate autocommit connection listening on the channels of queues."""
    conn = connect()
    for queue in queues:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"jobq_{queue}")))
    return conn


def channels_heard(conn: psycopg.Connection[Any], seconds: float = 1.0) -> Counter[str]:
    """How many notifications arrived on each channel within seconds."""
    return Counter(notify.channel for notify in conn.notifies(timeout=seconds))


def test_an_enqueue_notifies_the_queue_channel_when_it_commits(connect: Connect) -> None:
    ears = listener(connect, "default")
    producer = connect(autocommit=False)
    enqueue(producer)

    producer.commit()

    heard = list(ears.notifies(timeout=2, stop_after=1))
    assert [(notify.channel, notify.payload) for notify in heard] == [("jobq_default", "")]


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


@pytest.mark.slow
def test_enqueue_many_of_100000_jobs_sends_one_notification(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default", "other")

    db.execute(
        "SELECT jobq.enqueue_many('default', array_agg(jsonb_build_object('n', g)))"
        " FROM generate_series(1, 100000) AS g"
    )

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 100_000
    assert channels_heard(ears) == Counter({"jobq_default": 1})


def test_one_insert_into_several_queues_notifies_each_queue_once(db: Db, connect: Connect) -> None:
    ears = listener(connect, "alpha", "beta", "gamma")

    db.execute(
        "INSERT INTO jobq.jobs (queue, payload)"
        " SELECT queue, '{}' FROM unnest(ARRAY['alpha', 'beta', 'alpha', 'beta', 'alpha']) AS queue"
    )

    assert channels_heard(ears) == Counter({"jobq_alpha": 1, "jobq_beta": 1})


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
    ears = listener(connect, "emails", "default")

    db.execute("SELECT jobq.retry_failed()")

    assert channels_heard(ears) == Counter({"jobq_emails": 1})


def test_claim_and_complete_notify_nobody(db: Db, connect: Connect) -> None:
    job_id = enqueue(db)
    ears = listener(connect, "default")

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, claim_one(db)["lease"]))

    assert channels_heard(ears, 0.5) == Counter()


def test_channel_of_a_queue_is_jobq_underscore_queue(db: Db) -> None:
    assert scalar(db, "SELECT jobq.channel('emails')") == "jobq_emails"


def test_the_channel_of_the_longest_queue_name_is_a_valid_identifier(db: Db, connect: Connect) -> None:
    queue = "q" * 58
    channel = scalar(db, "SELECT jobq.channel(%s)", (queue,))
    ears = listener(connect, queue)

    enqueue(db, queue)

    assert len(channel) == 63  # NAMEDATALEN - 1: LISTEN would truncate anything longer
    assert channels_heard(ears) == Counter({channel: 1})


def test_a_statement_inserting_many_jobs_runs_the_notify_trigger_once(connect: Connect) -> None:
    # Notifications are folded at commit, so only the function-call counters show per-row firing.
    producer = connect(autocommit=False)
    producer.execute("SET LOCAL track_functions = 'all'")

    producer.execute(
        "INSERT INTO jobq.jobs (queue, payload)"
        " SELECT (ARRAY['alpha', 'beta'])[g % 2 + 1], '{}' FROM generate_series(1, 1000) AS g"
    )

    calls = dict(
        producer.execute(
            "SELECT funcname, calls FROM pg_stat_xact_user_functions"
            " WHERE schemaname = 'jobq' AND funcname = ANY(ARRAY['_notify_inserted', 'channel'])"
        ).fetchall()
    )
    assert calls == {"_notify_inserted": 1, "channel": 2}
