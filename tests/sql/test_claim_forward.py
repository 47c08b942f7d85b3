"""jobq.claim's forward mode: a flat claim cost while a long-open transaction holds vacuum back.

Every claimed job leaves a dead entry at the start of the claim index until
vacuum clears it.  A claim that walked more than 1,000 of them in vain puts
the queue in forward mode: for a millisecond per entry walked in vain (at
least 2 seconds, at most 30) the claims of that queue, from any session,
scan on from the last job that claim took.  When it ends, the one claim that
takes the queue's lock scans from the start and decides anew.  The position
lives in the table jobq._claim_hints, one row per queue, never in a session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, fill


def claim_ids(db: psycopg.Connection[Any], n: int, queue: str = "default") -> list[int]:
    rows = db.execute("SELECT id FROM jobq.claim(%s, %s, 'w1')", (queue, n)).fetchall()
    return [row["id"] if isinstance(row, dict) else row[0] for row in rows]


def claim_and_complete(db: Db, n: int) -> list[int]:
    rows = db.execute("SELECT id, lease FROM jobq.claim('default', %s, 'w1')", (n,)).fetchall()
    ids, leases = [row["id"] for row in rows], [row["lease"] for row in rows]
    db.execute("SELECT count(*) FROM jobq.complete_many(%s, %s)", (ids, leases))
    return [row["id"] for row in rows]


def hint(db: Db, queue: str = "default") -> dict[str, Any] | None:
    """The queue's forward-mode position: the job it is at, and whether it is still in force."""
    return db.execute(
        "SELECT id, until > now() AS in_force FROM jobq._claim_hints WHERE queue = %s", (queue,)
    ).fetchone()


def position_at(db: Db, job_id: int, *, in_force: bool = True) -> None:
    """Put the job's queue in forward mode after job_id, as a bloated claim would."""
    db.execute(
        "WITH gone AS (DELETE FROM jobq._claim_hints"
        "               WHERE queue = (SELECT queue FROM jobq.jobs WHERE id = %(id)s))"
        " INSERT INTO jobq._claim_hints (queue, priority, run_at, id, until)"
        " SELECT queue, priority, run_at, id, now() + %(until)s::interval FROM jobq.jobs WHERE id = %(id)s",
        {"id": job_id, "until": "1 hour" if in_force else "-1 second"},
    )


@pytest.fixture
def snapshot_held(connect: Connect) -> Iterator[None]:
    """Another session holds a snapshot open, so vacuum can clear nothing the test leaves dead."""
    holder: psycopg.Connection[Any] = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM jobq.jobs").fetchone()
    yield
    holder.rollback()


def test_without_dead_entries_to_walk_claims_keep_no_position(db: Db) -> None:
    fill(db, 30)

    for _ in range(3):
        claim_and_complete(db, 10)

    assert hint(db) is None


@pytest.mark.usefixtures("snapshot_held")
def test_a_claim_that_walks_past_many_dead_entries_keeps_its_position(db: Db) -> None:
    ids = fill(db, 2_100)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)

    claimed = claim_ids(db, 10)

    assert claimed == ids[2_000:2_010]
    assert hint(db) == {"id": ids[2_009], "in_force": True}


@pytest.mark.usefixtures("snapshot_held")
def test_in_forward_mode_claims_go_on_in_order(db: Db) -> None:
    ids = fill(db, 2_100)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)

    claimed = [claim_and_complete(db, 10) for _ in range(5)]

    assert claimed == [ids[start : start + 10] for start in range(2_000, 2_050, 10)]


@pytest.mark.usefixtures("snapshot_held")
def test_the_position_is_shared_by_every_session_claiming_the_queue(db: Db, connect: Connect) -> None:
    ids = fill(db, 2_100)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)
    claim_ids(db, 10)  # walks the dead entries: the queue goes into forward mode
    position_at(db, ids[2_009])
    early = ids[2_005]
    db.execute("SELECT jobq.release(id, lease) FROM jobq.jobs WHERE id = %s", (early,))

    # another session scans on from the position: the released job, before it, waits
    assert claim_ids(connect(), 1) == [ids[2_010]]


@pytest.mark.usefixtures("snapshot_held")
def test_forward_scans_that_walk_far_move_the_position_on(db: Db) -> None:
    ids = fill(db, 3_200)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 10)  # in forward mode from ids[2_009]
    position_at(db, ids[1_000])  # as if the position had stayed behind while 1,009 more jobs were claimed

    claimed = claim_ids(db, 10)

    assert claimed == ids[2_010:2_020]
    assert hint(db) == {"id": ids[2_019], "in_force": True}


def dead_entries(db: Db, count: int) -> None:
    """count dead entries at the start of the claim index (jobs claimed and completed while the snapshot
    is held), in claims of at most 1,000 that leave the queue out of forward mode."""
    fill(db, count)
    while count:
        claim_and_complete(db, min(count, 1_000))
        db.execute("DELETE FROM jobq._claim_hints")
        count -= min(count, 1_000)


def forward_mode_left(db: Db) -> float:
    """How many seconds the queue's forward mode has left."""
    left = db.execute(
        "SELECT extract(epoch FROM until - statement_timestamp()) AS s"
        "  FROM jobq._claim_hints WHERE queue = 'default'"
    ).fetchone()
    assert left is not None
    return float(left["s"])


@pytest.mark.parametrize(
    ("walked", "seconds"),
    [(1_500, 2.0), (6_000, 6.0), (32_000, 30.0)],
    ids=["at-least-2-seconds", "a-millisecond-per-entry", "at-most-30-seconds"],
)
@pytest.mark.usefixtures("snapshot_held")
def test_forward_mode_lasts_a_millisecond_per_entry_walked_in_vain_from_2_to_30_seconds(
    db: Db, walked: int, seconds: float
) -> None:
    dead_entries(db, walked)
    fill(db, 10)

    claim_ids(db, 10)  # walks the dead entries in vain

    assert seconds - 0.5 < forward_mode_left(db) <= seconds


def test_dead_entries_that_scans_skip_without_returning_them_put_the_queue_in_forward_mode_too(
    db: Db,
) -> None:
    """No snapshot held: the first scan finds the rows of the dead entries dead to every transaction and
    marks the entries, which later scans skip unreturned, but still read their index pages."""
    dead_entries(db, 4_000)
    fill(db, 10)
    claim_ids(db, 1)  # returns the dead entries and marks them
    db.execute("DELETE FROM jobq._claim_hints")

    with db.transaction():
        returned = "SELECT pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass) AS n"
        before = db.execute(returned).fetchone()
        claim_ids(db, 1)
        after = db.execute(returned).fetchone()

    assert before is not None and after is not None
    assert after["n"] - before["n"] < 1_000  # the marked entries were skipped, not returned
    position = hint(db)
    assert position is not None and position["in_force"]


def test_when_forward_mode_ends_and_the_scan_from_the_start_walks_no_bloat_the_queue_leaves_it(
    db: Db,
) -> None:
    early, late = fill(db, 3)[:2]
    position_at(db, early, in_force=False)

    assert claim_ids(db, 1) == [early]
    assert hint(db) == {"id": None, "in_force": None}
    assert claim_ids(db, 1) == [late]


def test_while_one_claim_decides_at_the_end_of_forward_mode_the_others_go_on_forward(
    db: Db, connect: Connect
) -> None:
    early, middle, late = fill(db, 3)
    position_at(db, middle, in_force=False)
    deciding = connect(autocommit=False)  # a claim deciding anew holds the queue's lock to its commit
    deciding.execute("SELECT pg_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext('default'))")

    assert claim_ids(db, 1) == [late]
    deciding.rollback()
    assert claim_ids(db, 1) == [early]


def test_in_forward_mode_a_job_that_sorts_before_the_position_waits_for_a_scan_from_the_start(db: Db) -> None:
    early, middle, late = fill(db, 3)
    position_at(db, middle)

    assert claim_ids(db, 1) == [late]
    position_at(db, late, in_force=False)  # forward mode over: the next claim scans from the start
    assert claim_ids(db, 1) == [early]


def test_a_higher_priority_job_waits_in_forward_mode_and_comes_first_after_it(db: Db) -> None:
    first, second, _ = fill(db, 3)
    position_at(db, first)
    (urgent,) = fill(db, 1, priority=5)

    assert claim_ids(db, 1) == [second]
    position_at(db, second, in_force=False)
    assert claim_ids(db, 1) == [urgent]


def test_a_forward_scan_that_comes_up_short_scans_from_the_start(db: Db) -> None:
    early, late = fill(db, 2)
    position_at(db, late)  # no job after late: the forward scan finds none

    assert claim_ids(db, 1) == [early]


def test_the_position_of_one_queue_does_not_touch_another(db: Db) -> None:
    (other,) = fill(db, 1, queue="other")
    ids = fill(db, 3)
    position_at(db, other)

    assert claim_ids(db, 3) == ids


def test_no_function_leaves_a_setting_in_the_session(db: Db, connect: Connect) -> None:
    """Nothing passes from one client to the next on a server connection a pooler shares."""
    session = connect()
    fill(db, 5)
    position_at(db, fill(db, 1)[0], in_force=False)
    for statement in (
        "SELECT count(*) FROM jobq.claim('default', 2, 'w1')",
        "SELECT count(*) FROM jobq.complete_and_claim('{}', '{}', 'default', 2, 'w1')",
        "SELECT count(*) FROM jobq.reap()",
        "SELECT jobq.enqueue('default', '{}')",
    ):
        session.execute(statement)

    settings = session.execute("SELECT name FROM pg_settings WHERE name LIKE 'jobq.%'").fetchall()

    assert settings == []
