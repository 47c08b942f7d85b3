"""jobq.claim's forward mode: a flat claim cost while a long-open transaction holds vacuum back.

Every claimed job leaves a dead entry at the start of the claim index until
vacuum clears it.  A claim that walked more than 1,000 of them in vain puts
its session in forward mode: for 2 seconds its claims scan on from the last
job it claimed.  The session's position is the setting jobq.claim_hint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, fill, scalar

FAR = 4_000_000_000_000_000  # an "until" long after the test (microseconds since 1970)


def claim_ids(db: Db, n: int) -> list[int]:
    return [row["id"] for row in db.execute("SELECT id FROM jobq.claim('default', %s, 'w1')", (n,))]


def claim_and_complete(db: Db, n: int) -> list[int]:
    rows = db.execute("SELECT id, lease FROM jobq.claim('default', %s, 'w1')", (n,)).fetchall()
    ids, leases = [row["id"] for row in rows], [row["lease"] for row in rows]
    db.execute("SELECT count(*) FROM jobq.complete_many(%s, %s)", (ids, leases))
    return [row["id"] for row in rows]


def hint(db: Db) -> str:
    return str(scalar(db, "SELECT coalesce(current_setting('jobq.claim_hint', true), '')"))


def position_at(db: Db, job_id: int, until: int = FAR) -> None:
    """Put the session in forward mode after job_id, as a bloated claim would."""
    row = db.execute(
        "SELECT priority, (extract(epoch FROM run_at) * 1000000)::bigint AS run_at_us"
        " FROM jobq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    db.execute(
        "SELECT set_config('jobq.claim_hint', %s, false)",
        (f"default|{row['priority']}|{row['run_at_us']}|{job_id}|{until}",),
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

    assert hint(db) == ""


@pytest.mark.usefixtures("snapshot_held")
def test_a_claim_that_walks_past_many_dead_entries_keeps_its_position(db: Db) -> None:
    ids = fill(db, 2_100)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)

    claimed = claim_ids(db, 10)

    assert claimed == ids[2_000:2_010]
    assert hint(db).startswith("default|0|")
    assert hint(db).split("|")[3] == str(ids[2_009])


@pytest.mark.usefixtures("snapshot_held")
def test_in_forward_mode_claims_go_on_in_order(db: Db) -> None:
    ids = fill(db, 2_100)
    claim_and_complete(db, 1_000)
    claim_and_complete(db, 1_000)

    claimed = [claim_and_complete(db, 10) for _ in range(5)]

    assert claimed == [ids[start : start + 10] for start in range(2_000, 2_050, 10)]


def test_in_forward_mode_a_job_that_sorts_before_the_position_waits_for_a_scan_from_the_start(db: Db) -> None:
    early, middle, late = fill(db, 3)
    position_at(db, middle)

    assert claim_ids(db, 1) == [late]
    position_at(db, late, until=0)  # forward mode over: the next claim scans from the start
    assert claim_ids(db, 1) == [early]


def test_a_higher_priority_job_waits_in_forward_mode_and_comes_first_after_it(db: Db) -> None:
    first, second, _ = fill(db, 3)
    position_at(db, first)
    (urgent,) = fill(db, 1, priority=5)

    assert claim_ids(db, 1) == [second]
    position_at(db, second, until=0)
    assert claim_ids(db, 1) == [urgent]


def test_a_forward_scan_that_comes_up_short_scans_from_the_start(db: Db) -> None:
    early, late = fill(db, 2)
    position_at(db, late)  # no job after late: the forward scan finds none

    assert claim_ids(db, 1) == [early]


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        "default|0|1|1",
        "default|99999999999|0|1|" + str(FAR),
        "default|0|9999999999999999|1|" + str(FAR),
        "default|0|-9999999999999999|1|" + str(FAR),
        "other|0|0|999999|" + str(FAR),
    ],
    ids=["garbage", "too-few-fields", "priority-out-of-range", "far-future", "far-past", "other-queue"],
)
def test_a_position_it_cannot_use_is_ignored(db: Db, value: str) -> None:
    ids = fill(db, 3)
    db.execute("SELECT set_config('jobq.claim_hint', %s, false)", (value,))

    assert claim_ids(db, 3) == ids
