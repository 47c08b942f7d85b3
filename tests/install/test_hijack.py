"""A hostile role plants look-alike functions and operators in public; pgjobq's functions never run them.

Every pgjobq function pins search_path = pg_catalog, pg_temp and qualifies its
own objects, so a victim whose search_path puts public first still gets the
real now(), =, jsonb_typeof and friends.  Each planted object records that it
ran in public.pwned before doing the real work, so a hijack would show there
even where the results came out right.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from psycopg import sql

from helpers.databases import login_role
from helpers.sqlhelpers import Db, scalar

# Look-alikes of what pgjobq's functions call, each logging itself.  The
# planted functions do the real work afterwards, so nothing else gives them away.
PLANTED_FUNCTIONS = {
    "now()": ("timestamptz", "pg_catalog.now()"),
    "statement_timestamp()": ("timestamptz", "pg_catalog.statement_timestamp()"),
    "jsonb_typeof(jsonb)": ("text", "pg_catalog.jsonb_typeof($1)"),
    "jsonb_build_object(text, text)": ("jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    "length(text)": ("integer", "pg_catalog.length($1)"),
    "left(text, integer)": ("text", "pg_catalog.left($1, $2)"),
    "isfinite(timestamptz)": ("boolean", "pg_catalog.isfinite($1)"),
    "pg_notify(text, text)": ("void", "pg_catalog.pg_notify($1, $2)"),
    "nextval(regclass)": ("bigint", "pg_catalog.nextval($1)"),
    "quote_literal(text)": ("text", "pg_catalog.quote_literal($1)"),
    # what the functions of durable execution (0.11.0) call
    "jsonb_build_object(text, jsonb)": ("jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    "jsonb_build_object(text, timestamptz)": ("jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    "pg_column_size(jsonb)": ("integer", "pg_catalog.pg_column_size($1)"),
    "array_ndims(anyarray)": ("integer", "pg_catalog.array_ndims($1)"),
    "array_position(anyarray, anyelement)": ("integer", "pg_catalog.array_position($1, $2)"),
}
PLANTED_OPERATORS = {
    "=": [("text", "text"), ("bigint", "bigint"), ("integer", "integer")],
    "<>": [("text", "text")],
    "~": [("text", "text")],
    "<=": [("timestamptz", "timestamptz")],
    ">=": [("integer", "integer")],
    "?": [("jsonb", "text")],
}

HOSTILE_PATHS = {
    # public first; pg_catalog, not listed, is then searched implicitly before it
    "public_first": "public, pg_temp, jobq",
    # worse: public explicitly ahead of pg_catalog
    "public_before_pg_catalog": "public, pg_catalog, pg_temp, jobq",
}


def plant(db: Db, role: str) -> None:
    """As role: public.pwned, open to all, and the look-alikes that write to it."""
    db.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    db.execute("CREATE TABLE public.pwned (what text NOT NULL)")
    db.execute("GRANT INSERT, SELECT ON public.pwned TO PUBLIC")
    for signature, (returns, real) in PLANTED_FUNCTIONS.items():
        db.execute(
            f"CREATE FUNCTION public.{signature} RETURNS {returns} LANGUAGE sql AS $$"
            f" INSERT INTO public.pwned VALUES ('{signature}'); SELECT {real} $$"
        )
    for number, (operator, operand_types) in enumerate(
        (op, types) for op, all_types in PLANTED_OPERATORS.items() for types in all_types
    ):
        left, right = operand_types
        db.execute(
            f"CREATE FUNCTION public.hijack_{number}(a {left}, b {right}) RETURNS boolean LANGUAGE sql AS $$"
            f" INSERT INTO public.pwned VALUES ('{left} {operator} {right}');"
            f" SELECT a OPERATOR(pg_catalog.{operator}) b $$"
        )
        db.execute(
            f"CREATE OPERATOR public.{operator} (LEFTARG = {left}, RIGHTARG = {right},"
            f" FUNCTION = public.hijack_{number})"
        )
    db.execute("RESET ROLE")


@pytest.fixture
def hostile(db: Db) -> Iterator[str]:
    """A role that may create objects in public and has planted its look-alikes there."""
    with login_role(db) as role:
        db.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        plant(db, role)
        yield role
        db.execute("RESET search_path")


@pytest.fixture
def grantee(db: Db) -> Iterator[str]:
    """A role for the grant helpers to name."""
    with login_role(db) as role:
        yield role


def test_the_planted_objects_do_capture_unqualified_calls(db: Db, hostile: str) -> None:
    """The trap works: code without a pinned search_path runs the look-alikes."""
    db.execute(f"SET search_path = {HOSTILE_PATHS['public_before_pg_catalog']}")

    db.execute("SELECT now(), 'a'::text = 'a'::text")

    assert scalar(db, "SELECT count(*) FROM public.pwned") == 2


@pytest.mark.parametrize("path", list(HOSTILE_PATHS))
def test_every_api_call_under_a_hostile_search_path_is_correct_and_runs_no_planted_object(
    db: Db, hostile: str, grantee: str, path: str
) -> None:
    db.execute(f"SET search_path = {HOSTILE_PATHS[path]}")

    to_fail = scalar(db, "SELECT jobq.enqueue('emails', '{\"to\": \"ada\"}', max_attempts => 1)")
    to_finish = scalar(db, "SELECT jobq.enqueue_many('emails', ARRAY['{}', '{}', '{}']::jsonb[])")
    held = {
        row["id"]: row["lease"]
        for row in db.execute("SELECT * FROM jobq.claim('emails', 4, 'w1', lease_timeout => '5 minutes')")
    }
    heartbeat_moved = scalar(
        db, "SELECT jobq.heartbeat(%s, %s) IS NOT NULL", (to_finish[0], held[to_finish[0]])
    )
    extended = [
        row["id"]
        for row in db.execute(
            "SELECT id FROM jobq.heartbeat_many(%s, %s) AS id", (list(held), list(held.values()))
        )
    ]
    failed_status = scalar(db, "SELECT (jobq.fail(%s, 'boom', %s)).status", (to_fail, held[to_fail]))
    db.execute("SELECT jobq.complete(%s, %s)", (to_finish[0], held[to_finish[0]]))
    acknowledged = [
        row["complete_many"]
        for row in db.execute(
            "SELECT jobq.complete_many(%s, %s)", (to_finish[1:], [held[i] for i in to_finish[1:]])
        )
    ]
    scalar(db, "SELECT jobq.enqueue('emails', '{}')")
    db.execute("SELECT jobq.release(id, lease) FROM jobq.claim('emails', 1, 'w2')")
    stale_id = scalar(db, "SELECT id FROM jobq.claim('emails', 1, 'w3')")
    db.execute(  # the test's own statement must not trip the planted = either
        "UPDATE jobq.jobs SET locked_at = locked_at - interval '1 hour',"
        " lease_expires_at = lease_expires_at - interval '1 hour' WHERE id OPERATOR(pg_catalog.=) %s",
        (stale_id,),
    )
    reaped = db.execute("SELECT count(*) AS n FROM jobq.reap()").fetchone()
    redriven = [row["retry_failed"] for row in db.execute("SELECT jobq.retry_failed('emails')")]
    stats = db.execute("SELECT queue, done, failed FROM jobq.stats()").fetchall()
    channel = scalar(db, "SELECT jobq.channel('emails')")
    version = scalar(db, "SELECT jobq.version()")
    db.execute("SELECT jobq.grant_producer(%s), jobq.revoke_all(%s)", (grantee, grantee))
    with pytest.raises(Exception, match="queue must be 1 to 58 characters"):
        db.execute("SELECT jobq.enqueue('Not A Queue', '{}')")
    db.execute("RESET search_path")

    assert (heartbeat_moved, failed_status) == (True, "failed")
    assert sorted(extended) == sorted(held)
    assert acknowledged == to_finish[1:]
    assert reaped == {"n": 1}
    assert redriven == [to_fail]
    assert stats == [{"queue": "emails", "done": 3, "failed": 0}]
    assert channel == "jobq_emails"
    assert version == scalar(
        db, "SELECT extversion FROM pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pgjobq'"
    )
    assert scalar(db, "SELECT count(*) FROM public.pwned") == 0


@pytest.mark.parametrize("path", list(HOSTILE_PATHS))
def test_the_durable_calls_under_a_hostile_search_path_are_correct_and_run_no_planted_object(
    db: Db, hostile: str, path: str
) -> None:
    db.execute(f"SET search_path = {HOSTILE_PATHS[path]}")
    stepper, sleeper, waiter = scalar(
        db, "SELECT jobq.enqueue_many('emails', ARRAY['{}', '{}', '{}']::jsonb[])"
    )
    held = {row["id"]: row["lease"] for row in db.execute("SELECT * FROM jobq.claim('emails', 3, 'w1')")}
    first = scalar(db, "SELECT jobq.checkpoint(%s, %s, 'charge', '\"ch_1\"')", (stepper, held[stepper]))
    again = scalar(db, "SELECT jobq.checkpoint(%s, %s, 'charge', '\"ch_2\"')", (stepper, held[stepper]))
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 1}')", (stepper, held[stepper]))
    until = datetime.now(timezone.utc) + timedelta(hours=1)
    slept = scalar(db, "SELECT jobq.sleep(%s, %s, 'nap', %s)", (sleeper, held[sleeper], until))
    parked = scalar(
        db, "SELECT jobq.await_signal(%s, %s, 'approval', '1 hour') IS NULL", (waiter, held[waiter])
    )
    released = scalar(db, "SELECT jobq.signal('approval', '\"yes\"')")
    on_hold = scalar(db, "SELECT jobq.enqueue('emails', '{}', hold => true)")
    unheld = scalar(db, "SELECT jobq.unhold(ARRAY[%s]::bigint[])", (on_hold,))
    recorded = [
        (row["name"], row["attempt"]) for row in db.execute("SELECT * FROM jobq.steps(%s)", (stepper,))
    ]
    shown = db.execute("SELECT steps, progress FROM jobq.job(%s)", (stepper,)).fetchone()
    sleeping = scalar(db, "SELECT (jobq.job(%s)).waiting_for", (sleeper,))
    db.execute("SELECT jobq.tick()")
    with pytest.raises(Exception, match="step must be 1 to 200 characters"):
        db.execute("SELECT jobq.checkpoint(%s, %s, '', 'null')", (stepper, held[stepper]))
    db.execute("RESET search_path")

    assert (first, again, slept, parked, released, unheld) == ("ch_1", "ch_1", False, True, 1, 1)
    assert recorded == [("charge", 1)]
    assert shown == {"steps": {"charge": "ch_1"}, "progress": {"done": 1}}
    assert sleeping["sleep"] == "nap"
    assert scalar(db, "SELECT count(*) FROM public.pwned") == 0


@pytest.mark.parametrize("path", list(HOSTILE_PATHS))
def test_fan_out_and_parent_results_under_a_hostile_search_path_are_correct_and_run_no_planted_object(
    db: Db, hostile: str, path: str
) -> None:
    db.execute(f"SET search_path = {HOSTILE_PATHS[path]}")
    parent_id = scalar(db, "SELECT jobq.enqueue('emails', '{}')")
    lease = scalar(db, "SELECT lease FROM jobq.claim('emails', 1, 'w1')")
    fan_out = (
        'SELECT jobq.fan_out(%s, %s, \'split\', \'[{"payload": {"n": 1}}, {"payload": {"n": 2}}]\','
        ' \'{"payload": {"merge": true}}\')'
    )
    ids = scalar(db, fan_out, (parent_id, lease))
    again = scalar(db, fan_out, (parent_id, lease))
    first, second, continuation = ids
    waiting = scalar(db, "SELECT (jobq.job(%s)).waiting_for", (continuation,))
    children = {row["id"]: row["lease"] for row in db.execute("SELECT * FROM jobq.claim('emails', 2, 'w2')")}
    db.execute("SELECT jobq.complete(%s, %s, '\"one\"')", (first, children[first]))
    db.execute("SELECT jobq.fail(%s, 'boom', %s, retry => false)", (second, children[second]))
    released = scalar(db, "SELECT (jobq.job(%s)).status", (continuation,))
    results = [
        tuple(row.values()) for row in db.execute("SELECT * FROM jobq.parent_results(%s)", (continuation,))
    ]
    with pytest.raises(Exception, match="children must be a JSON array of 1 to 999 objects"):
        db.execute("SELECT jobq.fan_out(%s, %s, 'other', '[]')", (parent_id, lease))
    db.execute("RESET search_path")

    assert again == ids
    assert sorted(ids) == ids
    assert waiting == {"parents": [first, second]}
    assert sorted(children) == [first, second]
    assert released == "queued"
    assert results == [(first, "done", "one"), (second, "failed", None)]
    assert scalar(db, "SELECT count(*) FROM public.pwned") == 0
