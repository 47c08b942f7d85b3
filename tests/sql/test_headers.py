"""Headers: a JSON object stored with the job by enqueue(headers => ...) and handed to the worker by claim."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Db, claim_one, enqueue, scalar

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}


def test_claim_returns_the_headers_the_job_was_enqueued_with(db: Db) -> None:
    enqueue(db, payload={"to": "ada"}, headers=Jsonb(TRACE))

    claimed = claim_one(db)

    assert (claimed["payload"], claimed["headers"]) == ({"to": "ada"}, TRACE)


def test_a_job_enqueued_without_headers_has_none(db: Db) -> None:
    enqueue(db)

    assert claim_one(db)["headers"] is None


def test_enqueue_many_gives_the_headers_to_every_job(db: Db) -> None:
    db.execute(
        "SELECT jobq.enqueue_many('default', ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[], headers => %s)",
        (Jsonb(TRACE),),
    )

    rows = db.execute("SELECT payload, headers FROM jobq.claim('default', 10, 'w1')").fetchall()

    assert rows == [{"payload": {"n": 1}, "headers": TRACE}, {"payload": {"n": 2}, "headers": TRACE}]


def test_complete_and_claim_returns_the_headers_of_the_jobs_it_claims(db: Db) -> None:
    enqueue(db, headers=Jsonb(TRACE))

    row = db.execute("SELECT headers FROM jobq.complete_and_claim('{}', '{}', 'default', 1, 'w1')").fetchone()

    assert row == {"headers": TRACE}


def test_an_empty_object_is_a_valid_header(db: Db) -> None:
    enqueue(db, headers=Jsonb({}))

    assert claim_one(db)["headers"] == {}


def test_a_replacing_enqueue_gives_a_queued_holder_the_new_headers(db: Db) -> None:
    enqueue(db, unique_key="k", headers=Jsonb({"v": 1}))

    scalar(
        db,
        "SELECT jobq.enqueue('default', '{}', unique_key => 'k', on_conflict => 'replace', headers => %s)",
        (Jsonb({"v": 2}),),
    )

    assert claim_one(db)["headers"] == {"v": 2}


def test_enqueue_measures_headers_read_from_a_table_uncompressed(db: Db) -> None:
    db.execute("CREATE TABLE contexts (body jsonb)")
    db.execute("INSERT INTO contexts SELECT jsonb_build_object('data', repeat('x', 3000000))")
    assert scalar(db, "SELECT pg_column_size(body) < 1048576 FROM contexts") is True  # stored compressed

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.enqueue('default', '{}', headers => body) FROM contexts")

    assert raised.value.sqlstate == "54000"
    assert "headers" in (raised.value.diag.message_primary or "")
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0
