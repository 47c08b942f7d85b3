"""jobq.enqueue and jobq.enqueue_many: what a new job looks like, options, transactions, triggers."""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Connect, Db, enqueue, job, scalar


def test_enqueue_returns_the_id_of_a_new_queued_job_with_defaults(db: Db) -> None:
    job_id = enqueue(db, "default", {"to": "ada@example.com"})

    row = db.execute(
        """
        SELECT queue, payload, status, priority, max_attempts, attempts, lease,
               locked_by, locked_at, last_error, finished_at,
               run_at = created_at AS runnable_from_creation,
               created_at <= now() AS created_in_the_past
          FROM jobq.jobs WHERE id = %s
        """,
        (job_id,),
    ).fetchone()

    assert row == {
        "queue": "default",
        "payload": {"to": "ada@example.com"},
        "status": "queued",
        "priority": 0,
        "max_attempts": None,  # the queue's, else 3: claim writes it
        "attempts": 0,
        "lease": 0,
        "locked_by": None,
        "locked_at": None,
        "last_error": None,
        "finished_at": None,
        "runnable_from_creation": True,
        "created_in_the_past": True,
    }


def test_enqueue_gives_every_job_a_new_larger_id(db: Db) -> None:
    first = enqueue(db)
    second = enqueue(db)

    assert second > first


def test_enqueue_stores_its_options(db: Db) -> None:
    job_id = scalar(
        db,
        """
        SELECT jobq.enqueue('reports', '{"day": "monday"}', priority => -7,
                            run_at => now() + interval '1 hour', max_attempts => 5)
        """,
    )

    row = db.execute(
        """
        SELECT priority, max_attempts, status, run_at = created_at + interval '1 hour' AS run_at_kept
          FROM jobq.jobs WHERE id = %s
        """,
        (job_id,),
    ).fetchone()
    assert row == {"priority": -7, "max_attempts": 5, "status": "queued", "run_at_kept": True}


def test_enqueue_accepts_the_boundary_values(db: Db) -> None:
    queue = "q" * 58
    job_id = scalar(
        db,
        """
        SELECT jobq.enqueue(%s, '{}', priority => 32767,
                            run_at => now() + interval '9 years', max_attempts => 1000)
        """,
        (queue,),
    )
    low_id = scalar(db, "SELECT jobq.enqueue('a', '{}', priority => -32768, max_attempts => 1)")

    assert (job(db, job_id)["queue"], job(db, job_id)["priority"]) == (queue, 32767)
    assert (job(db, low_id)["priority"], job(db, low_id)["max_attempts"]) == (-32768, 1)


def test_enqueue_accepts_a_payload_just_under_1_mib(db: Db) -> None:
    payload = {"data": "x" * 1_000_000}

    job_id = enqueue(db, "default", payload)

    assert scalar(db, "SELECT payload = %s FROM jobq.jobs WHERE id = %s", (Jsonb(payload), job_id)) is True


def test_enqueue_measures_a_payload_read_from_a_table_uncompressed(db: Db) -> None:
    db.execute("CREATE TABLE documents (body jsonb)")
    db.execute("INSERT INTO documents SELECT jsonb_build_object('data', repeat('x', 3000000))")
    assert scalar(db, "SELECT pg_column_size(body) < 1048576 FROM documents") is True  # stored compressed

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.enqueue('default', body) FROM documents")

    assert raised.value.sqlstate == "54000"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_a_rolled_back_enqueue_leaves_no_job(db: Db, connect: Connect) -> None:
    producer = connect(autocommit=False)
    enqueue(producer)
    assert scalar(producer, "SELECT count(*) FROM jobq.jobs") == 1  # visible inside its transaction

    producer.rollback()

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_an_enqueue_is_visible_to_others_only_after_commit(db: Db, connect: Connect) -> None:
    producer = connect(autocommit=False)
    enqueue(producer)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0

    producer.commit()

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


ORDERS_WITH_TRIGGER = """
    CREATE TABLE orders (id serial PRIMARY KEY, email text NOT NULL);
    CREATE FUNCTION orders_enqueue_email() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM jobq.enqueue('emails', jsonb_build_object('order_id', NEW.id));
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER orders_enqueue_email AFTER INSERT ON orders
        FOR EACH ROW EXECUTE FUNCTION orders_enqueue_email();
"""


def test_enqueue_from_a_trigger_on_a_user_table_commits_with_the_row(db: Db) -> None:
    db.execute(ORDERS_WITH_TRIGGER)

    order_id = scalar(db, "INSERT INTO orders (email) VALUES ('ada@example.com') RETURNING id")

    jobs = db.execute("SELECT queue, payload, status FROM jobq.jobs").fetchall()
    assert jobs == [{"queue": "emails", "payload": {"order_id": order_id}, "status": "queued"}]


def test_enqueue_from_a_trigger_on_a_user_table_rolls_back_with_the_row(db: Db, connect: Connect) -> None:
    db.execute(ORDERS_WITH_TRIGGER)
    shop = connect(autocommit=False)
    shop.execute("INSERT INTO orders (email) VALUES ('ada@example.com')")
    assert scalar(shop, "SELECT count(*) FROM jobq.jobs") == 1

    shop.rollback()

    assert scalar(db, "SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM jobq.jobs)") == 0


def test_enqueue_many_returns_ids_in_the_order_of_the_payloads(db: Db) -> None:
    numbers = list(range(500))
    random.Random(7).shuffle(numbers)
    payloads = [{"n": n} for n in numbers]

    ids = scalar(db, "SELECT jobq.enqueue_many('bulk', %s)", ([Jsonb(p) for p in payloads],))

    assert len(set(ids)) == len(payloads)
    rows = db.execute("SELECT id, payload FROM jobq.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    payload_by_id = {row["id"]: row["payload"] for row in rows}
    assert [payload_by_id[job_id] for job_id in ids] == payloads


def test_enqueue_many_creates_queued_jobs_with_its_options(db: Db) -> None:
    ids = scalar(
        db,
        """
        SELECT jobq.enqueue_many('bulk', ARRAY['{"a": 1}', '{"b": 2}']::jsonb[], priority => 4,
                                 run_at => now() + interval '1 minute', max_attempts => 9)
        """,
    )

    rows = db.execute(
        """
        SELECT queue, status, priority, max_attempts, attempts, lease,
               run_at = created_at + interval '1 minute' AS run_at_kept
          FROM jobq.jobs WHERE id = ANY(%s) ORDER BY id
        """,
        (ids,),
    ).fetchall()
    expected = {
        "queue": "bulk",
        "status": "queued",
        "priority": 4,
        "max_attempts": 9,
        "attempts": 0,
        "lease": 0,
        "run_at_kept": True,
    }
    assert rows == [expected, expected]


def test_enqueue_many_of_an_empty_array_returns_an_empty_array(db: Db) -> None:
    ids = scalar(db, "SELECT jobq.enqueue_many('bulk', '{}'::jsonb[])")

    assert ids == []
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0
