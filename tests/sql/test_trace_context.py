"""Trace context from SQL: a session's pgjobq.traceparent goes into the headers of the jobs it enqueues."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Db, claim_one, enqueue, scalar

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STATE = "vendor=opaque"


def trace(db: Db, parent: str = PARENT, state: str | None = None) -> None:
    db.execute("SELECT set_config('pgjobq.traceparent', %s, true)", (parent,))
    if state is not None:
        db.execute("SELECT set_config('pgjobq.tracestate', %s, true)", (state,))


def test_a_job_enqueued_in_a_traced_transaction_carries_its_traceparent(db: Db) -> None:
    with db.transaction():
        trace(db)
        enqueue(db)

    assert claim_one(db)["headers"] == {"traceparent": PARENT}


def test_the_tracestate_travels_with_the_traceparent(db: Db) -> None:
    with db.transaction():
        trace(db, state=STATE)
        enqueue(db)

    assert claim_one(db)["headers"] == {"traceparent": PARENT, "tracestate": STATE}


def test_the_trace_context_joins_the_headers_the_caller_gave(db: Db) -> None:
    with db.transaction():
        trace(db)
        enqueue(db, headers=Jsonb({"tenant": "acme"}))

    assert claim_one(db)["headers"] == {"tenant": "acme", "traceparent": PARENT}


def test_headers_with_a_traceparent_of_their_own_keep_it(db: Db) -> None:
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    with db.transaction():
        trace(db)
        enqueue(db, headers=Jsonb({"traceparent": own}))

    assert claim_one(db)["headers"] == {"traceparent": own}


def test_a_trigger_enqueue_joins_the_trace_of_the_transaction_that_fired_it(db: Db) -> None:
    db.execute("CREATE TABLE orders (id integer)")
    db.execute(
        """
        CREATE FUNCTION order_placed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM jobq.enqueue('default', jsonb_build_object('order', NEW.id));
            RETURN NEW;
        END $$
        """
    )
    db.execute("CREATE TRIGGER placed AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION order_placed()")

    with db.transaction():
        trace(db)
        db.execute("INSERT INTO orders VALUES (7)")

    claimed = claim_one(db)
    assert (claimed["payload"], claimed["headers"]) == ({"order": 7}, {"traceparent": PARENT})


def test_enqueue_many_and_enqueue_flow_carry_the_trace_context_too(db: Db) -> None:
    with db.transaction():
        trace(db)
        db.execute("SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[])")
        db.execute("""SELECT jobq.enqueue_flow('default', '[{"name": "a", "payload": {}}]')""")

    headers = [row["headers"] for row in db.execute("SELECT headers FROM jobq.jobs ORDER BY id").fetchall()]
    assert headers == [{"traceparent": PARENT}] * 3


def test_once_the_transaction_ends_the_session_enqueues_plain_jobs_again(db: Db) -> None:
    with db.transaction():
        trace(db)
    # SET LOCAL leaves the setting defined, as '', for the rest of the session
    assert scalar(db, "SELECT current_setting('pgjobq.traceparent', true)") == ""

    enqueue(db)

    assert claim_one(db)["headers"] is None
