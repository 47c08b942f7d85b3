"""Where the time goes: the server-side measurements behind the targets the benchmark misses.

    .venv/bin/python bench/profile.py      # make bench-profile: about 3 minutes -> bench/results/profile.md

On a throwaway PostgreSQL of its own, with the benchmark's settings (fsync
and synchronous_commit on), it measures, each figure the median of 3
interleaved repeats:

1. One job per batch, claimed and acknowledged by pgbench (4 clients,
   prepared statements, no Python): the article's two statements (claim,
   then done: two commits per job) against one jobq.complete_and_claim per
   job (one commit), with synchronous_commit on, as bench/ runs them, and
   off, which leaves the CPU cost alone.
2. Single-row jobq.enqueue from 4 pgbench clients, with the NOTIFY trigger
   and without it, durable commits and not.
3. 100,000 rows at once: jobq.enqueue_many with the payloads built by the
   server, a plain INSERT into jobq.jobs (trigger disabled), and the same
   INSERT into a copy of the table without indexes or constraints.
4. The parts of the latency, from Python over one connection: SELECT 1
   right after another statement and after 10 ms idle, and jobq.claim of
   the one job just enqueued.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for folder in (BENCH, ROOT / "tools"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from contenders._pgbench import ENQUEUE_ONE, ONE_TRIP, run_pgbench  # noqa: E402
from contenders._util import insert_queued  # noqa: E402
from contenders.article import CLAIM_SQL, DDL, DONE_SQL  # noqa: E402
from contenders.article import QUEUE as ARTICLE_QUEUE  # noqa: E402
from contenders.pgjobq_sql import ENQUEUE_MANY_SQL, QUEUE  # noqa: E402
from report import table  # noqa: E402
from throwaway_pg import ThrowawayPostgres  # noqa: E402

REPEATS = 3
SECONDS = 3
CLIENTS = 4

# The article's worker on one job: its claim (batch 1), then its done, its own statements (article.py).
ARTICLE_ONE = (
    CLAIM_SQL.strip() % {"w": "'w'", "q": f"'{ARTICLE_QUEUE}'", "n": 1}
    + " \\gset\n"
    + DONE_SQL % ":id"
    + ";\n"
)
ROWS = 100_000


def pgbench(server: ThrowawayPostgres, dbname: str, script: str, *, durable: bool) -> float:
    """Transactions per second of CLIENTS pgbench clients looping over script for SECONDS."""
    run = run_pgbench(
        server.bindir,
        server.dsn(dbname),
        script,
        clients=CLIENTS,
        seconds=SECONDS,
        options=f"-c synchronous_commit={'on' if durable else 'off'}",
    )
    if run.drained:
        raise RuntimeError(f"the backlog of {dbname} ran out during a pgbench run: fill more jobs")
    return run.tps


def fill(dsn: str, table: str, queue: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert_queued(conn, table, queue, 1, rows)
        conn.execute("CHECKPOINT")


def claim_and_acknowledge(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 1: jobs/s of the article's claim + done against jobq.complete_and_claim, one job at a time."""
    admin = psycopg.connect(server.dsn(), autocommit=True)
    for name in ("profile_article", "profile_pgjobq"):
        admin.execute(f"CREATE DATABASE {name}")
    admin.close()
    with psycopg.connect(server.dsn("profile_article"), autocommit=True) as conn:
        conn.execute(DDL)
    with psycopg.connect(server.dsn("profile_pgjobq"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")
    fill(server.dsn("profile_article"), "jobs", ARTICLE_QUEUE, 400_000)
    fill(server.dsn("profile_pgjobq"), "jobq.jobs", QUEUE, 400_000)
    rows = []
    for durable in (True, False):
        rates: dict[str, list[float]] = {"article": [], "pgjobq": []}
        for _ in range(REPEATS):
            rates["article"].append(pgbench(server, "profile_article", ARTICLE_ONE, durable=durable))
            rates["pgjobq"].append(pgbench(server, "profile_pgjobq", ONE_TRIP, durable=durable))
        article, ours = statistics.median(rates["article"]), statistics.median(rates["pgjobq"])
        rows.append([
            "on" if durable else "off", f"{article:,.0f}", f"{ours:,.0f}", f"{ours / article:.2f}\u00d7",
        ])  # fmt: skip
    return rows


def enqueue_with_and_without_notify(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 2: single-row jobq.enqueue per second with the NOTIFY trigger and without."""
    dsn = server.dsn("profile_pgjobq")
    rows = []
    for durable in (True, False):
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(REPEATS):
            for trigger in (True, False):
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(
                        f"ALTER TABLE jobq.jobs {'ENABLE' if trigger else 'DISABLE'} TRIGGER jobs_notify_trg"
                    )
                rates[trigger].append(pgbench(server, "profile_pgjobq", ENQUEUE_ONE, durable=durable))
        with_trigger, without = statistics.median(rates[True]), statistics.median(rates[False])
        rows.append([
            "on" if durable else "off", f"{with_trigger:,.0f}", f"{without:,.0f}",
            f"{with_trigger / without:.2f}\u00d7",
        ])  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobq.jobs ENABLE TRIGGER jobs_notify_trg")
    return rows


def bulk_insert(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 3: rows per second of 100,000 jobs in one statement, three ways."""
    statements: Mapping[str, tuple[str, Callable[[psycopg.Connection[Any]], object]]] = {
        "jobq.enqueue_many, payloads built by the server": (
            "TRUNCATE jobq.jobs",
            lambda conn: conn.execute(ENQUEUE_MANY_SQL, {"queue": QUEUE, "first": 1, "last": ROWS}),
        ),
        "INSERT INTO jobq.jobs, trigger disabled": (
            "TRUNCATE jobq.jobs",
            lambda conn: insert_queued(conn, "jobq.jobs", QUEUE, 1, ROWS),
        ),
        "INSERT INTO a copy of jobq.jobs without indexes or constraints": (
            "TRUNCATE bare_jobs",
            lambda conn: insert_queued(conn, "bare_jobs", QUEUE, 1, ROWS),
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in statements}
    with psycopg.connect(server.dsn("profile_pgjobq"), autocommit=True) as conn:
        conn.execute("CREATE TABLE bare_jobs (LIKE jobq.jobs INCLUDING DEFAULTS)")
        for _ in range(REPEATS):
            for name, (reset, insert) in statements.items():
                conn.execute(reset)
                conn.execute("CHECKPOINT")
                trigger = "DISABLE" if "trigger disabled" in name else "ENABLE"
                conn.execute(f"ALTER TABLE jobq.jobs {trigger} TRIGGER jobs_notify_trg")
                started = time.perf_counter()
                insert(conn)
                times[name].append(time.perf_counter() - started)
        conn.execute("ALTER TABLE jobq.jobs ENABLE TRIGGER jobs_notify_trg")
    return [[name, f"{ROWS / statistics.median(spent):,.0f}"] for name, spent in times.items()]


def latency_parts(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 4: milliseconds of the statements on the way from a notification to a handler."""
    samples: dict[str, list[float]] = {
        "SELECT 1, warm": [],
        "SELECT 1 after 10 ms idle": [],
        "jobq.claim of 1 job": [],
    }
    with (
        psycopg.connect(server.dsn("profile_pgjobq"), autocommit=True) as producer,
        psycopg.connect(server.dsn("profile_pgjobq"), autocommit=True) as worker,
    ):
        producer.execute("TRUNCATE jobq.jobs")
        for _ in range(100):
            producer.execute("SELECT jobq.enqueue('latency', '{}')")
            time.sleep(0.01)
            for name, query in (
                ("SELECT 1 after 10 ms idle", "SELECT 1"),
                ("jobq.claim of 1 job", "SELECT * FROM jobq.claim('latency', 10, 'w')"),
                ("SELECT 1, warm", "SELECT 1"),
            ):
                started = time.perf_counter()
                worker.execute(query).fetchall()
                samples[name].append((time.perf_counter() - started) * 1000)
    return [[name, f"{statistics.median(values):.2f}"] for name, values in samples.items()]


def main() -> None:
    out = BENCH / "results" / "profile.md"
    with ThrowawayPostgres(fast=False) as server:
        sections: list[tuple[str, Callable[[ThrowawayPostgres], list[list[str]]], list[str], str]] = [
            (
                "1. One job per batch: the article's claim + done against jobq.complete_and_claim",
                claim_and_acknowledge,
                ["synchronous_commit", "article, jobs/s", "complete_and_claim, jobs/s", "ratio"],
                "pgbench, 4 clients, prepared statements, no Python. With durable commits the article pays "
                "two per job and pgjobq one; with synchronous_commit off what is left is the CPU each job "
                "costs.",
            ),
            (
                "2. Single-row enqueue with the NOTIFY trigger and without",
                enqueue_with_and_without_notify,
                ["synchronous_commit", "with trigger, jobs/s", "without, jobs/s", "ratio"],
                "pgbench, 4 clients. A transaction that notifies takes a cluster-wide lock at commit and "
                "holds it through its WAL flush, so notifying commits cannot share one flush; without "
                "durable commits the ratio shows the trigger's CPU alone.",
            ),
            (
                f"3. {ROWS:,} jobs in one statement",
                bulk_insert,
                ["statement", "rows/s"],
                "The INSERT into the bare copy is the heap and WAL alone; the difference to the plain "
                "INSERT is what the primary key, the claim index and the checks cost.",
            ),
            (
                "4. The parts of the latency",
                latency_parts,
                ["statement (one connection, from Python)", "ms, median of 100"],
                "What an idle worker does after a notification: its first statement after being idle, then "
                "the claim.",
            ),
        ]
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        parts = [
            "# Where the time goes",
            "",
            f"`bench/profile.py` on {os.cpu_count()} CPUs, {stamp},"
            f" one throwaway PostgreSQL with the benchmark's settings (fsync and synchronous_commit on"
            f" unless a row says otherwise); each figure the median of {REPEATS} repeats.",
        ]
        for title, measure, header, note in sections:
            print(title, flush=True)
            parts += ["", f"## {title}", "", note, "", table(header, measure(server))]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
