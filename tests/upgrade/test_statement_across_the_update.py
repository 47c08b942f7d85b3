"""A worker's statement caught by ``ALTER EXTENSION pgjobq UPDATE``: what PostgreSQL does, and what a worker
does about it.

The 0.8.0 -> 0.9.0 step adds a column (task) to jobq.jobs, whose rows jobq.claim and jobq._acknowledge
return.  Its ALTER TABLE holds jobq.jobs' ACCESS EXCLUSIVE lock until the update commits, and a statement
sent meanwhile waits for it.  In a session that has run the statement before, PostgreSQL plans it with the
row type it knows, 0.8.0's 17 columns, without taking the table's lock; the lock is first asked for by the
query inside the PL/pgSQL function that updates the table (claim's, _acknowledge's).  When it is granted,
the update's commit reaches the session, that query is planned again and returns 0.9.0's 18 columns to a
caller that expects 17: SQLSTATE 42804, "structure of query does not match function result type".  The
statement did nothing (its transaction is undone), and the session's next statement is planned with the
new row type and succeeds.  In a session that has not run it, the statement waits for the lock as it is
planned (the first read of a table's row type in a session locks the table), is planned after the commit,
and succeeds.  The step's re-definition of complete_and_claim, claim_any and complete_many (for sessions
that ran them before the update: test_sessions_across_the_update.py) cannot reach a statement in flight.

The first tests show this on plain sessions, with the statements a worker sends to 0.8.0 (STATEMENTS_0_8,
which pgjobq-py 1.0.0 and 1.1.0 sent; this release no longer accepts 0.8.0), so that they fail loudly
should PostgreSQL or the step ever behave otherwise.  The rest show a real worker of the release made for
0.9.0 (pgjobq-py 1.1.0: the last release that accepts 0.8.0, and whose worker therefore meets this step,
found in git history and installed in a venv as the upgrade fixtures do) whose acknowledgement is caught
so: it logs that the database's pgjobq changed under a statement (pgjobq._worker.connections.CHANGED_UNDER,
which this release keeps), keeps running, reconnects, sends the acknowledgement again, every job ends done
and run once, and it exits 0 on SIGTERM.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres
from upgrade.handlers import RUNS_DDL
from upgrade.releases import PreviousReleaseMissing, ReleaseVenv, release_made_for, release_venv

from pgjobq._queries import query

from helpers.databases import connect_as, fresh_database
from helpers.processes import process_env, wait_until
from helpers.sqlhelpers import Db, scalar

# the step whose jobq.jobs gained a column: released history, so these tests keep to it whatever comes after
FROM_VERSION = "0.8.0"
TO_VERSION = "0.9.0"
UPDATE = sql.SQL("ALTER EXTENSION pgjobq UPDATE TO {}").format(sql.Literal(TO_VERSION))
QUEUE = "q"
BLOCKED_TIMEOUT = 10.0  # seconds a statement is given to reach the update's lock

Held = tuple[int, int]  # a running job's (id, lease)
CAUGHT = (
    "42804: structure of query does not match function result type"
    " (Number of returned columns (18) does not match expected column count (17).)"
)
ACKNOWLEDGE = "jobq._acknowledge(bigint[],bigint[],jsonb[])"
CLAIM = "jobq.claim(text,integer,text,interval)"

# The statements pgjobq-py 1.0.0 and 1.1.0 sent to extension 0.8.0, whose jobs have no task (they were
# in queries.sql until pgjobq-py 1.2.0 dropped 0.8.0); complete_many is still this release's own.
CLAIMED_0_8 = """id, queue, payload, priority, attempts, coalesce(max_attempts, 3), lease,
       extract(epoch FROM lease_expires_at - locked_at)::float8,
       extract(epoch FROM locked_at - run_at)::float8,
       headers"""
STATEMENTS_0_8 = {
    "claim_0_8": f"SELECT {CLAIMED_0_8}"
    " FROM jobq.claim(%(queue)s, %(n)s, %(worker)s, %(lease_timeout)s::interval)",
    "claim_any_0_8": f"SELECT {CLAIMED_0_8}"
    " FROM jobq.claim_any(%(queues)s::text[], %(n)s, %(worker)s, %(lease_timeout)s::interval)",
    "complete_and_claim_0_8": """
SELECT status, id, queue, CASE WHEN status = 'running' THEN payload END AS payload,
       priority, attempts, coalesce(max_attempts, 3), lease,
       CASE WHEN status = 'running' THEN extract(epoch FROM lease_expires_at - locked_at)::float8 END,
       CASE WHEN status = 'running' THEN extract(epoch FROM locked_at - run_at)::float8 END,
       CASE WHEN status = 'running' THEN headers END AS headers
  FROM jobq.complete_and_claim(%(ids)s::bigint[], %(leases)s::bigint[], %(queue)s, %(n)s, %(worker)s,
                               %(lease_timeout)s::interval, results => %(results)s::jsonb[])""",
}


@dataclass(frozen=True)
class Case:
    """A statement a worker sends to extension 0.8.0 (STATEMENTS_0_8, else queries.sql), its parameters
    (held: a job claimed for it to settle), and what it gets when caught by the update in a session that
    ran it before: "ok", or the error and the innermost function that raised it."""

    statement: str
    parameters: Callable[[Held], dict[str, Any]]
    caught: str


CASES = {
    "complete_and_claim": Case(
        "complete_and_claim_0_8",
        lambda held: {
            "ids": [held[0]], "leases": [held[1]], "queue": QUEUE, "n": 2, "worker": "w",
            "lease_timeout": None, "results": None,
        },
        f"{CAUGHT} in {ACKNOWLEDGE}",
    ),
    "complete_and_claim, nothing to acknowledge": Case(
        "complete_and_claim_0_8",
        lambda held: {
            "ids": [], "leases": [], "queue": QUEUE, "n": 2, "worker": "w", "lease_timeout": None,
            "results": None,
        },
        f"{CAUGHT} in {CLAIM}",
    ),
    "complete_many": Case(
        "complete_many", lambda held: {"ids": [held[0]], "leases": [held[1]], "results": None},
        f"{CAUGHT} in {ACKNOWLEDGE}",
    ),
    "claim": Case(
        "claim_0_8", lambda held: {"queue": QUEUE, "n": 2, "worker": "w", "lease_timeout": None},
        f"{CAUGHT} in {CLAIM}",
    ),
    # over several queues (a worker given --queue more than once) claim_any reads jobq.jobs itself, for
    # each queue's share, before it calls claim: it waits for the lock there, and succeeds
    "claim_any": Case(
        "claim_any_0_8",
        lambda held: {"queues": [QUEUE, "r"], "n": 2, "worker": "w", "lease_timeout": None},
        "ok",
    ),
}  # fmt: skip


@pytest.fixture
def old_database(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A new database with pgjobq at FROM_VERSION and 50 queued jobs in QUEUE; its name."""
    with connect_as(pg_server, "postgres") as admin, fresh_database(admin) as dbname:
        with connect_as(pg_server, dbname) as db:
            db.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(FROM_VERSION)))
            db.execute("SELECT jobq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[50]))", (QUEUE,))
        yield dbname


def claim(db: Db) -> Held:
    row = db.execute("SELECT id, lease FROM jobq.claim(%s, 1, 'holder')", (QUEUE,)).fetchone()
    assert row is not None
    return int(row["id"]), int(row["lease"])


def outcome(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> str:
    """ "ok", or the error the statement raised: its SQLSTATE, first line and detail, and the innermost
    PL/pgSQL function it was raised in."""
    try:
        conn.execute(STATEMENTS_0_8.get(statement) or query(statement), params).fetchall()
    except psycopg.Error as exc:
        context = exc.diag.context or ""
        where = context.split("PL/pgSQL function ", 1)[1].split(" ", 1)[0] if "PL/pgSQL" in context else "?"
        return f"{exc.sqlstate}: {str(exc).splitlines()[0]} ({exc.diag.message_detail}) in {where}"
    return "ok"


def waits_on_a_lock(db: Db, pid: int) -> bool:
    return bool(scalar(db, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)))


def caught_by_the_update(
    admin: Db, session: psycopg.Connection[Any], statement: str, params: dict[str, Any]
) -> str:
    """The outcome of statement, sent on session (from a thread) while admin's update holds jobq.jobs'
    lock, uncommitted; admin commits once the session waits for the lock."""
    result: list[str] = []
    admin.execute("BEGIN")
    admin.execute(UPDATE)
    thread = threading.Thread(target=lambda: result.append(outcome(session, statement, params)))
    thread.start()
    try:
        waited = wait_until(lambda: waits_on_a_lock(admin, session.info.backend_pid), BLOCKED_TIMEOUT)
    finally:
        admin.execute("COMMIT")
        thread.join(BLOCKED_TIMEOUT)
    assert waited, f"the statement did not wait for the update's lock: {result}"
    assert not thread.is_alive(), "the statement still runs after the update committed"
    return result[0]


def run_before(admin: Db, session: psycopg.Connection[Any], case: Case) -> None:
    """Run case's statement once in session, at FROM_VERSION."""
    assert outcome(session, case.statement, case.parameters(claim(admin))) == "ok"


@pytest.mark.parametrize("case", list(CASES))
def test_a_statement_the_session_ran_before_meets_the_update_committing_under_it(
    case: str, old_database: str, pg_server: ThrowawayPostgres
) -> None:
    chosen = CASES[case]
    with connect_as(pg_server, old_database) as admin, connect_as(pg_server, old_database) as session:
        run_before(admin, session, chosen)
        got = caught_by_the_update(admin, session, chosen.statement, chosen.parameters(claim(admin)))

    assert got == chosen.caught


def jobs_now(db: Db) -> list[tuple[Any, ...]]:
    return [
        tuple(row.values())
        for row in db.execute(
            "SELECT id, status::text, lease, attempts, locked_by FROM jobq.jobs ORDER BY id"
        )
    ]


def test_the_caught_acknowledgement_changes_no_job(old_database: str, pg_server: ThrowawayPostgres) -> None:
    chosen = CASES["complete_and_claim"]
    with connect_as(pg_server, old_database) as admin, connect_as(pg_server, old_database) as session:
        run_before(admin, session, chosen)
        held = chosen.parameters(claim(admin))
        before = jobs_now(admin)
        got = caught_by_the_update(admin, session, chosen.statement, held)
        after = jobs_now(admin)

    assert got == chosen.caught
    assert after == before


def test_the_session_runs_the_statement_again_once_it_failed(
    old_database: str, pg_server: ThrowawayPostgres
) -> None:
    chosen = CASES["complete_and_claim"]
    with connect_as(pg_server, old_database) as admin, connect_as(pg_server, old_database) as session:
        run_before(admin, session, chosen)
        job_id, lease = claim(admin)
        held = chosen.parameters((job_id, lease))
        got = caught_by_the_update(admin, session, chosen.statement, held)
        again = outcome(session, chosen.statement, held)
        status = scalar(admin, "SELECT status::text FROM jobq.jobs WHERE id = %s", (job_id,))

    assert (got, again, status) == (chosen.caught, "ok", "done")


def test_a_statement_the_session_had_not_run_waits_for_the_update_and_succeeds(
    old_database: str, pg_server: ThrowawayPostgres
) -> None:
    chosen = CASES["complete_and_claim"]
    with connect_as(pg_server, old_database) as admin, connect_as(pg_server, old_database) as session:
        job_id, lease = claim(admin)
        got = caught_by_the_update(admin, session, chosen.statement, chosen.parameters((job_id, lease)))
        status = scalar(admin, "SELECT status::text FROM jobq.jobs WHERE id = %s", (job_id,))

    assert (got, status) == ("ok", "done")


# -- a real worker whose acknowledgement the update catches ---------------------------------------------

WORKER = "caught-1"  # its --name, and the worker column of its runs
HANDLER = "upgrade.handlers:record"
GATE = 7_350_001  # the advisory lock the test holds to keep a handler from finishing
WORKER_OPTIONS = (
    "--queue", QUEUE, "--concurrency", "1", "--batch", "1", "--poll-interval", "0.5", "--log-level", "INFO",
    "--name", WORKER,
    # no heartbeat nor reap while the update is held: the acknowledgement is the statement it catches
    "--lease-timeout", "600", "--reap-interval", "3600",
)  # fmt: skip
STEP_TIMEOUT = 10.0  # seconds each step of the run is given
# the handler's second record of a run waits while the test holds GATE
FINISH_GATE = f"""
CREATE FUNCTION finish_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.finished THEN
        PERFORM pg_advisory_xact_lock_shared({GATE});
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_finish_gate BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION finish_gate();
"""
CHANGED_UNDER = re.compile(
    r"the database's pgjobq changed under a statement \(structure of query does not match function result"
    r" type\); retrying in [0-9.]+ s: an upgrade may be under way"
)

# the tests of the worker's run (caught_run) stay on one pytest-xdist worker, so the run is made once
ONE_RUN = pytest.mark.xdist_group("statement-across-the-update-worker")


@dataclass
class CaughtRun:
    """What the worker of caught_run did, and what the database says of it."""

    caught: str  # the worker's statement seen waiting for the update's lock ("" if none was seen)
    log: str
    exited_unasked: int | None  # its exit status, had it exited before SIGTERM (None: it had not)
    exit_status: int | None  # after SIGTERM (None: still running after STEP_TIMEOUT, then killed)
    backends: tuple[int | None, int | None]  # its work connection's backend before and after the update
    enqueued: list[int]  # the ids of the jobs enqueued
    jobs: dict[int, tuple[str, int, int, int]]  # every job in the table -> status, attempts, starts, finishes


def work_backend(db: Db) -> int | None:
    """The backend of the worker's work connection (None if it has none now)."""
    found = scalar(
        db, "SELECT max(pid) FROM pg_stat_activity WHERE application_name = %s", (f"pgjobq worker {WORKER}",)
    )
    return None if found is None else int(found)


def waiting_statement(db: Db) -> str:
    """The statement the worker's work connection runs, if it waits for a lock ("" otherwise)."""
    found = scalar(
        db,
        "SELECT max(query) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (f"pgjobq worker {WORKER}",),
    )
    return "" if found is None else str(found)


def handler_at_the_gate(db: Db) -> bool:
    """Whether the handler's finish record waits for GATE."""
    return bool(
        scalar(
            db,
            "SELECT count(*) > 0 FROM pg_stat_activity"
            " WHERE application_name = 'upgrade handler' AND wait_event = 'advisory'",
        )
    )


def all_done(db: Db, ids: list[int]) -> bool:
    return bool(
        scalar(
            db, "SELECT count(*) = %s FROM jobq.jobs WHERE status = 'done' AND id = ANY(%s)", (len(ids), ids)
        )
    )


JOBS_AND_RUNS = """
    SELECT j.id, j.status::text AS status, j.attempts,
           count(r.*) FILTER (WHERE NOT r.finished) AS starts,
           count(r.*) FILTER (WHERE r.finished) AS finishes
      FROM jobq.jobs AS j LEFT JOIN runs AS r ON r.job_id = j.id
     GROUP BY j.id
"""


def run_caught_worker(server: ThrowawayPostgres, log_path: Path, pgjobq: Path) -> CaughtRun:
    """A worker (the pgjobq command pgjobq) at FROM_VERSION whose acknowledgement the update catches, then
    jobs after it.

    In a database of its own (with the handler's table runs, and FINISH_GATE): two jobs, so that the
    worker's session has run complete_and_claim; then, with GATE held, a job whose handler starts and waits
    at its finish record; the update, begun and not committed (it holds jobq.jobs' lock); GATE released,
    the handler finishes and the worker's acknowledgement waits for the lock; the update commits.  Then two
    jobs enqueued after it, SIGTERM.  Each step waits for what it needs up to STEP_TIMEOUT and goes on
    either way: the tests assert what was seen.  The worker's log goes to log_path.
    """
    with (
        connect_as(server, "postgres") as root,
        fresh_database(root) as dbname,
        connect_as(server, dbname) as db,
        connect_as(server, dbname) as gate,
        connect_as(server, dbname) as updater,
        log_path.open("wb") as log,
    ):
        db.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(FROM_VERSION)))
        db.execute(RUNS_DDL)
        db.execute(FINISH_GATE)
        updater.execute("SET lock_timeout = '10s'")  # nothing should hold the update back: fail, not hang

        def log_text() -> str:
            log.flush()
            return log_path.read_bytes().decode(errors="replace")

        enqueued: list[int] = []

        def enqueue(n: int) -> list[int]:
            ids = [
                int(i)
                for i in scalar(
                    db, "SELECT jobq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]))", (QUEUE, n)
                )
            ]
            enqueued.extend(ids)
            return ids

        process = subprocess.Popen(
            [str(pgjobq), "worker", HANDLER, *WORKER_OPTIONS],
            env=process_env(server.dsn(dbname), PGJOBQ_WORKER_NAME=WORKER),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            warm = enqueue(2)
            wait_until(lambda: all_done(db, warm), STEP_TIMEOUT)
            before = work_backend(db)

            gate.execute("SELECT pg_advisory_lock(%s)", (GATE,))
            held = enqueue(1)
            wait_until(lambda: handler_at_the_gate(db), STEP_TIMEOUT)
            updater.execute("BEGIN")
            updater.execute(UPDATE)
            gate.execute("SELECT pg_advisory_unlock(%s)", (GATE,))
            wait_until(lambda: bool(waiting_statement(db)), STEP_TIMEOUT)
            caught = waiting_statement(db)
            updater.execute("COMMIT")

            wait_until(
                lambda: all_done(db, held) and CHANGED_UNDER.search(log_text()) is not None, STEP_TIMEOUT
            )
            after_update = enqueue(2)
            wait_until(lambda: all_done(db, after_update), STEP_TIMEOUT)
            after = work_backend(db)

            exited_unasked = process.poll()
            process.send_signal(signal.SIGTERM)
            try:
                exit_status: int | None = process.wait(STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                exit_status = None
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        jobs = {
            int(row["id"]): (
                str(row["status"]),
                int(row["attempts"]),
                int(row["starts"]),
                int(row["finishes"]),
            )
            for row in db.execute(JOBS_AND_RUNS)
        }
        return CaughtRun(
            caught=caught,
            log=log_text(),
            exited_unasked=exited_unasked,
            exit_status=exit_status,
            backends=(before, after),
            enqueued=enqueued,
            jobs=jobs,
        )


@pytest.fixture(scope="session")
def venv_meeting_the_step() -> ReleaseVenv:
    """A venv with the release made for TO_VERSION, which accepts FROM_VERSION too, so that its worker
    meets this step (built once, cached); fails, as the upgrade fixtures do, where it cannot be built."""
    try:
        return release_venv(release_made_for(TO_VERSION))
    except PreviousReleaseMissing as exc:
        pytest.fail(f"the release of pgjobq-py made for {TO_VERSION} is needed here: {exc}")


@pytest.fixture(scope="module")
def caught_run(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory, venv_meeting_the_step: ReleaseVenv
) -> CaughtRun:
    """The run of run_caught_worker, with the worker of the release made for TO_VERSION, made once for the
    tests below."""
    log_path = tmp_path_factory.mktemp("caught") / f"worker-{WORKER}.log"
    return run_caught_worker(pg_server, log_path, venv_meeting_the_step.pgjobq)


@ONE_RUN
def test_the_worker_acknowledgement_waits_for_the_update(caught_run: CaughtRun) -> None:
    assert "FROM jobq.complete_and_claim(" in caught_run.caught, caught_run.log


@ONE_RUN
def test_the_worker_logs_that_pgjobq_changed_under_a_statement(caught_run: CaughtRun) -> None:
    assert CHANGED_UNDER.search(caught_run.log), caught_run.log


@ONE_RUN
def test_the_worker_keeps_running(caught_run: CaughtRun) -> None:
    assert caught_run.exited_unasked is None, caught_run.log


@ONE_RUN
def test_the_worker_reconnects(caught_run: CaughtRun) -> None:
    before, after = caught_run.backends
    assert None not in (before, after), caught_run.log
    assert before != after, caught_run.log


@ONE_RUN
def test_every_job_ends_done_run_once(caught_run: CaughtRun) -> None:
    assert caught_run.jobs == {job_id: ("done", 1, 1, 1) for job_id in caught_run.enqueued}, caught_run.log


@ONE_RUN
def test_the_worker_exits_0_on_sigterm(caught_run: CaughtRun) -> None:
    assert caught_run.exit_status == 0, caught_run.log
