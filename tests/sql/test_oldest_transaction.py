"""The oldest open transaction's age (jobq.health, jobq.metrics()) where pgjobq's owner is not a superuser.

pg_stat_activity hides the start of other roles' transactions from a role that is neither a superuser
nor a member of pg_read_all_stats, as the owner of a database usually is on a managed PostgreSQL; but
every role sees each session's transaction id and snapshot (backend_xid, backend_xmin).  pgjobq dates
those by its xid clock (jobq._xid_clock, marked by jobq.reap), so the age reads right there too.  Each
test installs pgjobq as the owner of a database of its own, a role without superuser, and holds a
transaction open as a third role; the marks are moved an hour back in time, so that a right answer is
told from a wrong one without waiting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, fresh_database, login_role
from helpers.sqlhelpers import Db, scalar


class Installed(NamedTuple):
    superuser: Db  # to move the clock's marks
    owner: Db  # the extension's owner, not a superuser
    other_role: str
    server: ThrowawayPostgres
    dbname: str


@pytest.fixture
def installed(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Installed]:
    with (
        login_role(db) as owner_role,
        login_role(db) as other_role,
        fresh_database(db, owner=owner_role) as dbname,
        connect_as(pg_server, dbname, owner_role) as owner,
        connect_as(pg_server, dbname) as superuser,
    ):
        owner.execute("CREATE EXTENSION pgjobq")
        yield Installed(superuser, owner, other_role, pg_server, dbname)
        superuser.execute("DROP EXTENSION pgjobq")


HOLD = {
    "an id": "SELECT pg_current_xact_id()",  # a transaction that wrote: backend_xid
    "a snapshot": "SELECT 1",  # a read-only one at REPEATABLE READ: backend_xmin
}


def hold_open(installed: Installed, how: str) -> psycopg.Connection[Any]:
    """A transaction of the other role, left open holding an id or a snapshot (HOLD[how])."""
    server = installed.server
    conn = psycopg.connect(
        host=server.host,
        port=server.port,
        user=installed.other_role,
        dbname=installed.dbname,
        autocommit=False,
    )
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute(HOLD[how])
    return conn


def ages(owner: Db) -> tuple[float, float]:
    """The metric oldest_transaction_age_seconds and jobq.health's oldest_transaction_age, in seconds."""
    metric = scalar(owner, "SELECT value FROM jobq.metrics() WHERE metric = 'oldest_transaction_age_seconds'")
    health = scalar(owner, "SELECT coalesce(extract(epoch FROM oldest_transaction_age), 0) FROM jobq.health")
    return float(metric), float(health)


def test_the_owner_is_no_superuser_and_pg_stat_activity_hides_the_other_roles_start(
    installed: Installed,
) -> None:
    held = hold_open(installed, "an id")
    try:
        row = installed.owner.execute(
            "SELECT xact_start IS NULL AS hidden, backend_xid IS NOT NULL AS id_shown"
            " FROM pg_stat_activity WHERE usename = %s",
            (installed.other_role,),
        ).fetchone()
    finally:
        held.rollback()

    assert scalar(installed.owner, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
    assert row == {"hidden": True, "id_shown": True}


@pytest.mark.parametrize("how", HOLD)
def test_a_transaction_of_another_role_is_dated_by_the_xid_clock(installed: Installed, how: str) -> None:
    installed.owner.execute("SELECT * FROM jobq.reap()")  # a mark, before the transaction
    installed.superuser.execute("UPDATE jobq._xid_clock SET at = at - interval '1 hour'")
    held = hold_open(installed, how)
    try:
        metric, health = ages(installed.owner)
    finally:
        held.rollback()

    assert (metric > 3000, health > 3000) == (True, True)


def test_without_another_transaction_the_age_reads_0(installed: Installed) -> None:
    installed.owner.execute("SELECT * FROM jobq.reap()")
    installed.superuser.execute("UPDATE jobq._xid_clock SET at = at - interval '1 hour'")

    assert ages(installed.owner) == (0.0, 0.0)


def test_the_age_is_never_negative_even_from_a_mark_ahead_of_the_clock(installed: Installed) -> None:
    installed.owner.execute("SELECT * FROM jobq.reap()")
    installed.superuser.execute("UPDATE jobq._xid_clock SET at = at + interval '1 hour'")
    held = hold_open(installed, "an id")
    try:
        metric, health = ages(installed.owner)
    finally:
        held.rollback()

    assert (metric, health) == (0.0, 0.0)


def test_a_transaction_older_than_every_mark_counts_from_the_oldest(installed: Installed) -> None:
    held = hold_open(installed, "an id")
    try:
        installed.owner.execute("SELECT * FROM jobq.reap()")  # a mark after the transaction took its id
        installed.superuser.execute("UPDATE jobq._xid_clock SET at = at - interval '1 hour'")
        metric, health = ages(installed.owner)
    finally:
        held.rollback()

    assert (metric > 3000, health > 3000) == (True, True)


def test_reap_marks_the_clock_at_most_once_every_10_seconds(installed: Installed) -> None:
    for _ in range(3):
        installed.owner.execute("SELECT * FROM jobq.reap()")

    assert scalar(installed.superuser, "SELECT count(*) FROM jobq._xid_clock") == 1
