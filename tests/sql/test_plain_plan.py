"""Plain jobs pay nothing for job control: the plain claim's pick still walks jobs_claim_idx in order, and a
plain enqueue writes no entry into jobs_unique_idx."""

from __future__ import annotations

import sys

from psycopg.types.json import Jsonb

from helpers.fixtures import REPO_ROOT
from helpers.sqlhelpers import Db, enqueue, fill, scalar

sys.path.insert(0, str(REPO_ROOT / "bench"))
from contenders._util import explain_nested  # bench/ is not on the tests' path


def pick_plan(db: Db) -> str:
    """The plan of the statement inside jobq.claim that picks the jobs from the start of the index."""
    notices = explain_nested(db)
    claimed = db.execute("SELECT id FROM jobq.claim('default', 10, 'w1')").fetchall()
    assert len(claimed) == 10
    picks = [n for n in notices if "FOR NO KEY UPDATE SKIP LOCKED" in n and "FROM jobq.jobs AS p" in n]
    assert len(picks) == 1, notices
    return picks[0]


def plan_lines(plan: str) -> list[str]:
    """The plan's own lines, without the statement's text that auto_explain prints before them."""
    return plan[plan.index("\n", plan.index("Query Text")) :].splitlines() if "Query Text" in plan else []


def entries(db: Db) -> dict[str, int]:
    """The live entries of each index of jobq.jobs (pgstattuple), and the rows of each other table of jobq."""
    counts: dict[str, int] = {}
    for row in db.execute(
        "SELECT i.indexrelid::regclass::text AS name, (pgstattuple(i.indexrelid)).tuple_count AS n"
        " FROM pg_index AS i WHERE i.indrelid = 'jobq.jobs'::regclass"
    ):
        counts[row["name"]] = row["n"]
    for row in db.execute(
        "SELECT c.oid::regclass::text AS name FROM pg_class AS c"
        " WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = 'r' AND c.oid <> 'jobq.jobs'::regclass"
    ).fetchall():
        counts[row["name"]] = scalar(db, f"SELECT count(*) FROM {row['name']}")
    return counts


def growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What grew, and by how much."""
    return {name: after[name] - before[name] for name in after if after[name] != before[name]}


def test_the_plain_claim_picks_by_an_index_scan_of_jobs_claim_idx_without_sort_or_seq_scan(db: Db) -> None:
    fill(db, 3000)
    fill(db, 500, queue="other")
    db.execute("ANALYZE jobq.jobs")

    plan = pick_plan(db)

    lines = plan_lines(plan) or plan.splitlines()
    assert any("Index Scan using jobs_claim_idx on jobs" in line for line in lines), plan
    assert not any("Sort" in line for line in lines), plan
    assert not any("Seq Scan on jobs" in line for line in lines), plan


def test_the_plan_check_sees_a_seq_scan_and_a_sort_when_index_scans_are_off(db: Db) -> None:
    """The assertions above can fail: kept off the claim index, the same pick scans and sorts."""
    fill(db, 3000)
    db.execute("ANALYZE jobq.jobs")
    db.execute("SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off")

    lines = plan_lines(pick_plan(db))

    assert any("Sort" in line for line in lines), lines
    assert any("Seq Scan on jobs" in line for line in lines), lines
    assert not any("jobs_claim_idx" in line for line in lines), lines


def test_a_plain_enqueue_writes_no_entry_into_jobs_unique_idx(db: Db) -> None:
    """Nor into anything else that serves unique jobs: of all of jobq, only the jobs_pkey and jobs_claim_idx
    entries of the new jobs are written (jobs_unique_idx, or whatever keeps the keys, stays as it was)."""
    db.execute("CREATE EXTENSION pgstattuple")
    before = entries(db)

    enqueue(db)
    fill(db, 1000)
    enqueue(db, priority=5, headers=Jsonb({"h": 1}), max_attempts=2)

    assert growth(before, entries(db)) == {"jobq.jobs_pkey": 1002, "jobq.jobs_claim_idx": 1002}


def test_the_entry_count_sees_the_entry_of_a_keyed_enqueue(db: Db) -> None:
    """The check above can fail: a job with a unique key has one entry more, where the keys are kept."""
    db.execute("CREATE EXTENSION pgstattuple")
    before = entries(db)

    enqueue(db, unique_key="k")

    grown = growth(before, entries(db))
    assert grown.pop("jobq.jobs_pkey") == grown.pop("jobq.jobs_claim_idx") == 1
    assert list(grown.values()) == [1], grown
