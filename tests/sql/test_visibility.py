"""Who may look jobs up with jobq.job, wait and watch: workers and admins, and producers only when granted
see_jobs (grant_producer(role, see_jobs => true)); whoever may look sees any job's state, not its payload."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.sqlhelpers import Db, enqueue, scalar

# role(level, member_of=..., group=..., see_jobs=...) -> the role's name; connect_as(role) -> a connection
MakeRole = Callable[..., str]
ConnectAs = Callable[[str], psycopg.Connection[Any]]

LOOKUPS = {
    "job": "SELECT * FROM jobq.job(%s)",
    "wait": "SELECT * FROM jobq.wait(%s, '0 s')",
    "watch": "SELECT * FROM jobq.watch(%s)",
}


@pytest.fixture
def role(db: Db) -> Iterator[MakeRole]:
    """Creates roles (LOGIN unless group), with a pgjobq level and memberships; drops them afterwards."""
    created: list[str] = []

    def create(
        level: str | None = None,
        *,
        member_of: tuple[str, ...] = (),
        group: bool = False,
        see_jobs: bool = False,
    ) -> str:
        name = f"jobq_{level or 'role'}_{uuid.uuid4().hex[:8]}"
        db.execute(
            sql.SQL("CREATE ROLE {} " + ("NOLOGIN" if group else "LOGIN")).format(sql.Identifier(name))
        )
        created.append(name)
        if level == "producer":
            db.execute("SELECT jobq.grant_producer(%s, see_jobs => %s)", (name, see_jobs))
        elif level is not None:
            db.execute(sql.SQL("SELECT jobq.{}(%s)").format(sql.Identifier(f"grant_{level}")), (name,))
        for parent in member_of:
            db.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(parent), sql.Identifier(name)))
        return name

    yield create
    for name in reversed(created):
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(name)))


@pytest.fixture
def connect_as(dsn: str) -> Iterator[ConnectAs]:
    opened: list[psycopg.Connection[Any]] = []

    def connect(user: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(dsn, user=user, autocommit=True)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


def refusal(conn: psycopg.Connection[Any], query: str, job_id: int) -> tuple[str | None, str]:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(query, (job_id,))
    return raised.value.sqlstate, raised.value.diag.message_primary or ""


def seen_status(conn: psycopg.Connection[Any], query: str, job_id: int) -> Any:
    row = conn.execute(query, (job_id,)).fetchone()
    assert row is not None
    return row[2]  # job_state's status


def complete_all(db: Db) -> None:
    """Claim and complete every queued job (so that wait returns at once)."""
    for claimed in db.execute("SELECT id, lease FROM jobq.claim('default', 100, 'w1')").fetchall():
        db.execute("SELECT jobq.complete(%s, %s)", (claimed["id"], claimed["lease"]))


# -- producers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_a_producer_without_see_jobs_may_not_look_up_even_its_own_jobs(
    role: MakeRole, connect_as: ConnectAs, lookup: str
) -> None:
    conn = connect_as(role("producer"))
    job_id = enqueue(conn)

    assert refusal(conn, LOOKUPS[lookup], job_id)[0] == "42501"


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_a_producer_with_see_jobs_sees_every_job(
    db: Db, role: MakeRole, connect_as: ConnectAs, lookup: str
) -> None:
    observer = connect_as(role("producer", see_jobs=True))
    jobs = [enqueue(observer), enqueue(connect_as(role("producer"))), enqueue(db)]
    complete_all(db)

    assert [seen_status(observer, LOOKUPS[lookup], job_id) for job_id in jobs] == ["done"] * 3


def test_what_a_lookup_shows_is_the_jobs_state_never_its_payload_or_headers(
    role: MakeRole, connect_as: ConnectAs
) -> None:
    observer = connect_as(role("producer", see_jobs=True))
    job_id = enqueue(observer, payload={"secret": 1})

    cursor = observer.execute(LOOKUPS["job"], (job_id,))

    assert cursor.description is not None
    columns = [column.name for column in cursor.description]
    assert "payload" not in columns and "headers" not in columns
    assert "secret" not in str(cursor.fetchone())


def test_grant_producer_refuses_a_null_see_jobs(db: Db, role: MakeRole) -> None:
    name = role()

    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="see_jobs"):
        db.execute("SELECT jobq.grant_producer(%s, see_jobs => NULL)", (name,))


def test_revoke_all_takes_see_jobs_back(db: Db, role: MakeRole, connect_as: ConnectAs) -> None:
    name = role("producer", see_jobs=True)
    job_id = enqueue(db)
    db.execute("SELECT jobq.revoke_all(%s)", (name,))

    assert refusal(connect_as(name), LOOKUPS["job"], job_id)[0] == "42501"


# -- unknown ids -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["producer-with-see-jobs", "worker", "admin"])
@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_an_unknown_id_raises_jq002_naming_it_at_every_level_that_may_look(
    db: Db, role: MakeRole, connect_as: ConnectAs, level: str, lookup: str
) -> None:
    name = role("producer", see_jobs=True) if level == "producer-with-see-jobs" else role(level)
    unknown = enqueue(db) + 1000

    assert refusal(connect_as(name), LOOKUPS[lookup], unknown) == ("JQ002", f"id {unknown}: no such job")


# -- workers and admins ------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["worker", "admin"])
@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_workers_and_admins_see_every_job(
    db: Db, role: MakeRole, connect_as: ConnectAs, level: str, lookup: str
) -> None:
    producer_job = enqueue(connect_as(role("producer")))
    admin_job = enqueue(db)
    complete_all(db)
    conn = connect_as(role(level))

    assert [seen_status(conn, LOOKUPS[lookup], job_id) for job_id in (producer_job, admin_job)] == [
        "done"
    ] * 2


# -- SET ROLE ----------------------------------------------------------------------------------------------


def test_under_set_role_a_session_may_look_up_as_that_role_may(role: MakeRole, connect_as: ConnectAs) -> None:
    observers = role("producer", group=True, see_jobs=True)
    producers = role("producer", group=True)
    member = role(member_of=(observers, producers))
    conn = connect_as(member)
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(producers)))
    job_id = enqueue(conn)

    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(observers)))
    assert seen_status(conn, LOOKUPS["job"], job_id) == "queued"


def test_a_member_of_a_plain_producer_group_under_set_role_may_not_look_up(
    role: MakeRole, connect_as: ConnectAs
) -> None:
    producers = role("producer", group=True)
    conn = connect_as(role(member_of=(producers,)))
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(producers)))
    job_id = enqueue(conn)

    assert refusal(conn, LOOKUPS["job"], job_id)[0] == "42501"
    assert scalar(conn, "SELECT current_user") == producers
