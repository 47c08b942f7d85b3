"""Where the time goes: the server-side measurements behind the targets the benchmark misses.

    .venv/bin/python bench/profile.py      # make bench-profile: about 4 minutes -> bench/results/profile.md

On a throwaway PostgreSQL of its own, with the benchmark's settings (fsync
and synchronous_commit on), it measures, each rate the median of 3
interleaved repeats, pgbench with 4 clients and prepared statements (no
Python) unless said otherwise:

1. One job per transaction, claimed and marked done, so that a table's cost
   and a function's cost show apart: the article's two statements (its
   claim ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)
   RETURNING``, then its done ``UPDATE``) on the article's own table and on
   ``jobq.jobs`` (adapted to its columns: status text, the lease
   incremented and its expiry set as jobq.claim does, done under the lease);
   pgjobq's ``jobq.claim`` + ``jobq.complete``; and one
   ``jobq.complete_and_claim`` per job (batch 1, the Worker's path).  With
   synchronous_commit on, as bench/ runs them, and off, which leaves the CPU
   cost alone.  Every run starts from a fresh backlog in an emptied table.
2. Where a batch-1 job's server time goes: ``pg_stat_statements`` with
   ``track = all`` (the statements inside the functions too) during a run of
   each path on jobq.jobs, and ``EXPLAIN (ANALYZE, BUFFERS)`` of the claims
   (auto_explain for the statements inside ``jobq.claim``).
3. Single-row enqueue: ``jobq.enqueue`` (no worker waiting, and with one
   registered as waiting by ``jobq.register_waiter``, so that every enqueue notifies),
   the article's INSERT into its table, a plain INSERT into ``jobq.jobs``.
4. 100,000 rows in one statement: ``jobq.enqueue_many`` with the payloads
   built by the server, the same rows by a plain ``INSERT ... SELECT`` into
   ``jobq.jobs``, into the article's table, and into a copy of ``jobq.jobs``
   without indexes or constraints.
5. The parts of the latency, from Python over one connection: SELECT 1
   right after another statement and after 10 ms idle, and jobq.claim of
   the one job just enqueued.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from throwaway_pg import ThrowawayPostgres, find_bindir  # noqa: E402

from contenders._pgbench import CLAIM_COMPLETE, ENQUEUE_ONE, ONE_TRIP, run_pgbench  # noqa: E402
from contenders._util import explain_nested, insert_queued  # noqa: E402
from contenders.article import CLAIM_SQL, DDL, DONE_SQL  # noqa: E402
from contenders.article import QUEUE as ARTICLE_QUEUE  # noqa: E402
from contenders.pgjobq_sql import ENQUEUE_MANY_SQL, QUEUE  # noqa: E402
from report import table  # noqa: E402

REPEATS = 3
SECONDS = 3  # per claim run (pgbench -T)
ENQUEUE_SECONDS = 2  # per enqueue run
CLIENTS = 4
ROWS = 100_000
MIN_BACKLOG = 40_000  # jobs queued before a claim run, or 2.5 times the most an earlier run of it did
TIMES = "\u00d7"

# The databases: the article's table; jobq.jobs driven by plain statements; jobq.jobs driven by pgjobq.
ARTICLE_DB, PLAIN_DB, PGJOBQ_DB = "profile_article", "profile_plain", "profile_pgjobq"

# The article's worker on one job: its claim (batch 1), then its done, its own statements (article.py).
ARTICLE_ONE = (
    CLAIM_SQL.strip() % {"w": "'w'", "q": f"'{ARTICLE_QUEUE}'", "n": 1}
    + " \\gset\n"
    + DONE_SQL % ":id"
    + ";\n"
)
# The same two statements on jobq.jobs, adapted to its columns: status is text, the claim increments the
# lease and sets its expiry as jobq.claim does (the table's CHECK wants one on a running row), and the
# done, as jobq.complete does, presents the lease and keeps locked_by and locked_at.
PLAIN_ONE = f"""UPDATE jobq.jobs
   SET status = 'running', locked_by = 'w', locked_at = now(), attempts = attempts + 1,
       lease = lease + 1, lease_expires_at = now() + interval '60 seconds'
 WHERE id IN (SELECT id FROM jobq.jobs
               WHERE queue = '{QUEUE}' AND status = 'queued' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT 1
               FOR UPDATE SKIP LOCKED)
RETURNING id, payload, attempts, max_attempts, lease \\gset
UPDATE jobq.jobs SET status = 'done', finished_at = now()
 WHERE id = :id AND lease = :lease AND status = 'running';
"""
ARTICLE_INSERT = "INSERT INTO jobs (payload) VALUES ('{}');\n"
PLAIN_INSERT = f"INSERT INTO jobq.jobs (queue, payload) VALUES ('{QUEUE}', '{{}}');\n"


@dataclass(frozen=True)
class Variant:
    """One way to claim and finish a job, or to enqueue one: a pgbench script on a database's table."""

    name: str
    label: str
    dbname: str
    table: str  # the table it works on, emptied (and filled, for a claim) before each run
    queue: str
    script: str


CLAIM_PATHS = (
    Variant(
        "article", "article's statements, article's table", ARTICLE_DB, "jobs", ARTICLE_QUEUE, ARTICLE_ONE
    ),
    Variant("plain", "article's statements, jobq.jobs", PLAIN_DB, "jobq.jobs", QUEUE, PLAIN_ONE),
    Variant("claim_complete", "jobq.claim + jobq.complete", PGJOBQ_DB, "jobq.jobs", QUEUE, CLAIM_COMPLETE),
    Variant("one_trip", "jobq.complete_and_claim, batch 1", PGJOBQ_DB, "jobq.jobs", QUEUE, ONE_TRIP),
)
ENQUEUE_PATHS = (
    Variant("enqueue", "jobq.enqueue, no worker waiting", PGJOBQ_DB, "jobq.jobs", QUEUE, ENQUEUE_ONE),
    Variant("enqueue_waiter", "jobq.enqueue, a worker waiting", PGJOBQ_DB, "jobq.jobs", QUEUE, ENQUEUE_ONE),
    Variant(
        "article", "article's INSERT, article's table", ARTICLE_DB, "jobs", ARTICLE_QUEUE, ARTICLE_INSERT
    ),
    Variant("plain", "plain INSERT into jobq.jobs", PLAIN_DB, "jobq.jobs", QUEUE, PLAIN_INSERT),
)


def pgbench(
    server: ThrowawayPostgres, path: Variant, *, durable: bool, seconds: int, options: str = ""
) -> Any:
    """One pgbench run of path: CLIENTS clients for seconds, synchronous_commit on or off."""
    return run_pgbench(
        server.bindir,
        server.dsn(path.dbname),
        path.script,
        clients=CLIENTS,
        seconds=seconds,
        options=f"-c synchronous_commit={'on' if durable else 'off'} {options}".strip(),
    )


def refill(server: ThrowawayPostgres, path: Variant, rows: int) -> None:
    """Empty path's table, queue rows jobs in it, and CHECKPOINT (no run pays an earlier one's writes)."""
    with psycopg.connect(server.dsn(path.dbname), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {path.table}")
        if rows:
            insert_queued(conn, path.table, path.queue, 1, rows)
            conn.execute(f"VACUUM (ANALYZE) {path.table}")
        conn.execute("CHECKPOINT")


def claim_run(server: ThrowawayPostgres, path: Variant, durable: bool, best: dict[str, float]) -> float:
    """Jobs/s of one claim run from a fresh backlog (big enough; a run that drains is run again)."""
    for _ in range(3):
        backlog = max(MIN_BACKLOG, math.ceil(2.5 * best.get(path.name, 0.0) * SECONDS))
        refill(server, path, backlog)
        run = pgbench(server, path, durable=durable, seconds=SECONDS)
        best[path.name] = max(best.get(path.name, 0.0), run.tps)
        if not run.drained:
            return float(run.tps)
    raise RuntimeError(f"the backlog of {path.name} ran out in every run")


def create_databases(server: ThrowawayPostgres) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for name in (ARTICLE_DB, PLAIN_DB, PGJOBQ_DB):
            admin.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(server.dsn(ARTICLE_DB), autocommit=True) as conn:
        conn.execute(DDL)
    for name in (PLAIN_DB, PGJOBQ_DB):
        with psycopg.connect(server.dsn(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgjobq")


def claim_and_done(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 1: jobs/s of one job per transaction, four ways, synchronous_commit on and off."""
    rows = []
    best: dict[str, float] = {}
    for durable in (True, False):
        rates: dict[str, list[float]] = {path.name: [] for path in CLAIM_PATHS}
        for repeat in range(REPEATS):
            for path in rotated(CLAIM_PATHS, repeat):
                rates[path.name].append(claim_run(server, path, durable, best))
        median = {name: statistics.median(values) for name, values in rates.items()}
        rows.append(
            ["on" if durable else "off"]
            + [f"{median[path.name]:,.0f}" for path in CLAIM_PATHS]
            + [
                f"{median['plain'] / median['article']:.2f}{TIMES}",
                f"{median['claim_complete'] / median['plain']:.2f}{TIMES}",
                f"{median['one_trip'] / median['plain']:.2f}{TIMES}",
                f"{median['one_trip'] / median['article']:.2f}{TIMES}",
            ]
        )
    return rows


def rotated(items: tuple[Variant, ...], repeat: int) -> list[Variant]:
    shift = repeat % len(items)
    return list(items[shift:] + items[:shift])


# -- section 2: inside a job ---------------------------------------------------------

STATEMENTS = """
SELECT {toplevel} AS toplevel, calls, total_exec_time, rows, shared_blks_hit + shared_blks_read AS buffers,
       wal_bytes, query
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0
 ORDER BY {toplevel} DESC, total_exec_time DESC
"""


def one_line(query: str, width: int = 140) -> str:
    """A statement on one line for a table cell: whitespace collapsed, pipes escaped, cut at width."""
    text = " ".join(query.split())
    text = text if len(text) <= width else text[: width - 1] + "\u2026"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def inside_a_job(server: ThrowawayPostgres, available: bool) -> list[str]:
    """Section 2: pg_stat_statements (track = all) over a durable run of each path on jobq.jobs, then
    the claim plans."""
    out: list[str] = []
    if not available:
        out += [
            "pg_stat_statements is not available in this PostgreSQL (its library is not installed), so "
            "the statements inside the functions are not broken down here.",
            "",
        ]
    else:
        for name in (PLAIN_DB, PGJOBQ_DB):
            with psycopg.connect(server.dsn(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for path in CLAIM_PATHS[1:]:
            out += statements_of(server, path)
    out += plans(server)
    return out


def statements_of(server: ThrowawayPostgres, path: Variant) -> list[str]:
    """The statements one run of path executed, per job: top-level ones, then those nested inside."""
    refill(server, path, MIN_BACKLOG)
    with psycopg.connect(server.dsn(path.dbname), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    run = pgbench(server, path, durable=True, seconds=SECONDS, options="-c pg_stat_statements.track=all")
    with psycopg.connect(server.dsn(path.dbname), autocommit=True) as conn:
        has_toplevel = conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'pg_stat_statements'::regclass"
            " AND attname = 'toplevel'"
        ).fetchone()
        toplevel = "toplevel" if has_toplevel and has_toplevel[0] else "NULL::boolean"
        found = conn.execute(STATEMENTS.format(toplevel=toplevel)).fetchall()
        done = conn.execute("SELECT count(*) FROM jobq.jobs WHERE status = 'done'").fetchone()
    jobs = int(done[0]) if done else 0
    if jobs == 0:
        return [f"### {path.label}", "", "No job was done in the run.", ""]
    rows = []
    top_ms = 0.0
    for level, calls, total_ms, _rows, buffers, wal, query in found:
        if "pg_stat_statements" in query:
            continue
        if level is not False:
            top_ms += float(total_ms)
        rows.append(
            [
                "top" if level else "inside" if level is False else "?",
                f"{calls / jobs:.2f}",
                f"{float(total_ms) * 1000 / jobs:,.1f}",
                f"{float(total_ms) * 1000 / calls:,.1f}",
                f"{buffers / calls:.1f}",
                f"{float(wal or 0) / jobs:,.0f}",
                one_line(query),
            ]
        )
    wall_us = CLIENTS / run.tps * 1e6  # a job's time on one client: what each of the 4 waited per job
    top_us = top_ms * 1000 / jobs
    return [
        f"### {path.label}",
        "",
        f"{jobs:,} jobs in {run.seconds:.1f} s ({run.tps:,.0f} jobs/s, one run, with the tracking's own "
        "cost: section 1 has the rates). Per job, one client waited "
        f"{wall_us:,.0f} \u00b5s; the top-level statements executed for {top_us:,.0f} \u00b5s of it "
        f"({top_us / wall_us * 100:.0f}%): the rest is parse/bind, the commit's WAL flush, the protocol and "
        "the wait for a CPU. An inside statement's time is part of the top-level statement that ran it.",
        "",
        table(
            [
                "level",
                "calls per job",
                "\u00b5s per job",
                "\u00b5s per call",
                "buffers per call",
                "WAL bytes per job",
                "statement",
            ],
            rows,
        ),
        "",
    ]


def plans(server: ThrowawayPostgres) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of a one-job claim, each in a transaction rolled back: the article's
    claim statement on jobq.jobs, and jobq.claim (with auto_explain for the statements inside it)."""
    plain, ours = CLAIM_PATHS[1], CLAIM_PATHS[2]
    refill(server, plain, 10_000)
    refill(server, ours, 10_000)
    claim = PLAIN_ONE.split(" \\gset")[0]
    out = []
    with psycopg.connect(server.dsn(plain.dbname), autocommit=True) as conn:
        for _ in range(5):  # warm: the plan and the pages, as in a run
            conn.execute("BEGIN")
            conn.execute(claim)
            conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim).fetchall()]
        conn.execute("ROLLBACK")
    out += details("EXPLAIN (ANALYZE, BUFFERS): the article's claim on jobq.jobs, one job", "\n".join(lines))
    with psycopg.connect(server.dsn(ours.dbname), autocommit=True) as conn:
        call = f"SELECT * FROM jobq.claim('{QUEUE}', 1, 'w')"
        for _ in range(5):
            conn.execute("BEGIN")
            conn.execute(call).fetchall()
            conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + call).fetchall()]
        conn.execute("ROLLBACK")
        out += details(f"EXPLAIN (ANALYZE, BUFFERS): `{call}`", "\n".join(lines))
        notices = explain_nested(conn)
        conn.execute("BEGIN")
        conn.execute(call).fetchall()
        conn.execute("ROLLBACK")
    out += details(
        "auto_explain: every statement jobq.claim ran for that call, the call itself last",
        "\n\n".join(n.strip() for n in notices if "set_config(" not in n),
    )
    return out


def details(summary: str, text: str) -> list[str]:
    return ["<details><summary>" + summary + "</summary>", "", "```", text.strip(), "```", "</details>", ""]


# -- section 3: single-row enqueue ---------------------------------------------------------


def has_wait(server: ThrowawayPostgres) -> bool:
    with psycopg.connect(server.dsn(PGJOBQ_DB), autocommit=True) as conn:
        row = conn.execute("SELECT to_regproc('jobq.register_waiter') IS NOT NULL").fetchone()
    return bool(row and row[0])


def waiting(server: ThrowawayPostgres, on: bool) -> None:
    """Register a worker as waiting on QUEUE for an hour (every enqueue then notifies), or forget it."""
    with psycopg.connect(server.dsn(PGJOBQ_DB), autocommit=True) as conn:
        if on:
            row = conn.execute(
                "SELECT registered FROM jobq.register_waiter(%s, 'profile', '1 hour')", (QUEUE,)
            ).fetchone()
            if not (row and row[0]):
                raise RuntimeError("jobq.register_waiter did not register the waiter")
        else:
            conn.execute("DELETE FROM jobq._waiters")


def single_enqueue(server: ThrowawayPostgres) -> tuple[list[list[str]], list[str]]:
    """Section 3: single-row enqueues per second, four ways, synchronous_commit on and off."""
    paths = [p for p in ENQUEUE_PATHS if p.name != "enqueue_waiter" or has_wait(server)]
    rows = []
    for durable in (True, False):
        rates: dict[str, list[float]] = {path.name: [] for path in paths}
        for repeat in range(REPEATS):
            for path in rotated(tuple(paths), repeat):
                refill(server, path, 0)
                if path.name == "enqueue_waiter":
                    waiting(server, True)
                try:
                    rates[path.name].append(
                        pgbench(server, path, durable=durable, seconds=ENQUEUE_SECONDS).tps
                    )
                finally:
                    if path.name == "enqueue_waiter":
                        waiting(server, False)
        median = {name: statistics.median(values) for name, values in rates.items()}
        waiter = median.get("enqueue_waiter")
        rows.append(
            ["on" if durable else "off"]
            + [f"{median[p.name]:,.0f}" if p.name in median else "\u2014" for p in ENQUEUE_PATHS]
            + [
                f"{median['enqueue'] / median['article']:.2f}{TIMES}",
                f"{waiter / median['article']:.2f}{TIMES}" if waiter else "\u2014",
                f"{median['enqueue'] / median['plain']:.2f}{TIMES}",
                f"{median['plain'] / median['article']:.2f}{TIMES}",
            ]
        )
    header = ["synchronous_commit", *(f"{p.label}, jobs/s" for p in ENQUEUE_PATHS)]
    header += ["enqueue / article", "enqueue with a waiter / article", "enqueue / plain", "plain / article"]
    return rows, header


# -- section 4: bulk ----------------------------------------------------------------------


def bulk_insert(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 4: rows per second of 100,000 jobs in one statement, four ways."""
    statements: dict[str, tuple[str, str, Callable[[psycopg.Connection[Any]], object]]] = {
        "jobq.enqueue_many, payloads built by the server": (
            PGJOBQ_DB,
            "jobq.jobs",
            lambda conn: conn.execute(ENQUEUE_MANY_SQL, {"queue": QUEUE, "first": 1, "last": ROWS}),
        ),
        "INSERT ... SELECT into jobq.jobs": (
            PLAIN_DB,
            "jobq.jobs",
            lambda conn: insert_queued(conn, "jobq.jobs", QUEUE, 1, ROWS),
        ),
        "INSERT ... SELECT into the article's table": (
            ARTICLE_DB,
            "jobs",
            lambda conn: insert_queued(conn, "jobs", ARTICLE_QUEUE, 1, ROWS),
        ),
        "INSERT ... SELECT into a copy of jobq.jobs without indexes or constraints": (
            PLAIN_DB,
            "bare_jobs",
            lambda conn: insert_queued(conn, "bare_jobs", QUEUE, 1, ROWS),
        ),
    }
    with psycopg.connect(server.dsn(PLAIN_DB), autocommit=True) as conn:
        conn.execute("CREATE TABLE bare_jobs (LIKE jobq.jobs INCLUDING DEFAULTS)")
    times: dict[str, list[float]] = {name: [] for name in statements}
    for repeat in range(REPEATS):
        names = list(statements)
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            dbname, target, insert = statements[name]
            with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                conn.execute(f"TRUNCATE {target}")
                conn.execute("CHECKPOINT")
                started = time.perf_counter()
                insert(conn)
                times[name].append(time.perf_counter() - started)
    rates = {name: ROWS / statistics.median(spent) for name, spent in times.items()}
    ours = rates["jobq.enqueue_many, payloads built by the server"]
    return [[name, f"{value:,.0f}", f"{ours / value:.2f}{TIMES}"] for name, value in rates.items()]


# -- section 5: latency ----------------------------------------------------------------------


def latency_parts(server: ThrowawayPostgres) -> list[list[str]]:
    """Section 5: milliseconds of the statements on the way from a notification to a handler."""
    samples: dict[str, list[float]] = {
        "SELECT 1, warm": [],
        "SELECT 1 after 10 ms idle": [],
        "jobq.claim of 1 job": [],
    }
    with (
        psycopg.connect(server.dsn(PGJOBQ_DB), autocommit=True) as producer,
        psycopg.connect(server.dsn(PGJOBQ_DB), autocommit=True) as worker,
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


# -- the profile -------------------------------------------------------------------------------


def stat_statements_available(bindir: Path) -> bool:
    """Whether this PostgreSQL has pg_stat_statements (its library, where pg_config says libraries are)."""
    pg_config = bindir / "pg_config"
    candidates = [bindir.parent / "lib"]
    if pg_config.exists():
        found = subprocess.run([str(pg_config), "--pkglibdir"], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            candidates.insert(0, Path(found.stdout.strip()))
    return any((folder / "pg_stat_statements.so").exists() for folder in candidates)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH / "results" / "profile.md",
        help="the file to write (default %(default)s)",
    )
    out: Path = parser.parse_args(argv).out
    began = time.perf_counter()
    available = stat_statements_available(find_bindir())
    # preloaded, but tracking nothing unless a session asks (section 2's pgbench runs): the other
    # sections pay no more than the hook's test
    settings = (
        {"shared_preload_libraries": "'pg_stat_statements'", "pg_stat_statements.track": "none"}
        if available
        else {}
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with ThrowawayPostgres(fast=False, settings=settings) as server:
        create_databases(server)
        parts = [
            "# Where the time goes",
            "",
            f"`bench/profile.py` on {os.cpu_count()} CPUs, {stamp}, "
            f"load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the start; one throwaway "
            "PostgreSQL with the benchmark's settings (fsync and synchronous_commit on unless a row says "
            f"otherwise); pgbench with {CLIENTS} clients and prepared statements unless said otherwise; each "
            f"rate the median of {REPEATS} interleaved repeats.",
        ]

        def section(title: str, note: str, body: list[str]) -> None:
            print(title, f"({time.perf_counter() - began:.0f} s)", flush=True)
            parts.extend(["", f"## {title}", "", note, "", *body])

        print("1. claim and done", flush=True)
        rows = claim_and_done(server)
        section(
            "1. One job per transaction: the table's cost and the function's",
            "Each run starts from a backlog queued into an emptied table. The article's statements (its "
            "claim `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`, batch 1, then its "
            "done `UPDATE`) run on the article's table and on `jobq.jobs`, adapted to its columns (status "
            "text; the claim increments the lease and sets its expiry as `jobq.claim` does; the done "
            "presents the lease and keeps locked_by and locked_at, as `jobq.complete` does). The article's "
            "statements, `claim` + `complete`, commit twice per job; `complete_and_claim` once (it "
            "acknowledges the last job and claims the next). *table*: the same statements on jobq.jobs "
            "against the article's table; *functions*: pgjobq's functions against those statements on the "
            "same table. With synchronous_commit off what is left is the CPU each job costs.",
            [
                table(
                    [
                        "synchronous_commit",
                        *(f"{p.label}, jobs/s" for p in CLAIM_PATHS),
                        "table: plain on jobq.jobs / article",
                        "functions: claim + complete / plain",
                        "complete_and_claim / plain",
                        "complete_and_claim / article",
                    ],
                    rows,
                )
            ],
        )
        section(
            "2. Inside a batch-1 job",
            "`pg_stat_statements` with `track = all`, so that the statements PL/pgSQL runs inside the "
            f"functions are counted as well, over one durable {SECONDS} s run of each path on jobq.jobs "
            "(server time only: execution, not planning, parse or commit). *µs per job* is the statement's "
            "total execution time over the jobs done, so the top-level rows add up to the server's "
            "execution time per job; *buffers* are shared hits and reads. Then the plans of a one-job "
            "claim, each in a transaction rolled back after 5 warm-up claims.",
            inside_a_job(server, available),
        )
        rows, header = single_enqueue(server)
        section(
            "3. Single-row enqueue",
            f"pgbench, {CLIENTS} clients, {ENQUEUE_SECONDS} s per run, `'{{}}'` payloads, from an empty "
            "table. *A worker waiting*: one registration by `jobq.register_waiter(queue, worker, '1 hour')` "
            "before the run that no one takes back (no one listens either), so every enqueue of the run "
            "notifies: the worst case, a worker that stays registered while the enqueues come. A notifying "
            "commit takes a cluster-wide lock and holds it through its WAL flush, so such commits cannot "
            "share one flush. "
            "The plain INSERT into jobq.jobs has the table's defaults, indexes and checks, without the "
            "function.",
            [table(header, rows)],
        )
        section(
            f"4. {ROWS:,} jobs in one statement",
            "Payloads built by the server (`jsonb_build_object('i', g)` over `generate_series`), one "
            "statement each, from an emptied table after a CHECKPOINT; the last column is enqueue_many's "
            "rate over the row's. The bare copy is the heap and WAL alone; the plain INSERT into jobq.jobs "
            "adds the primary key, the claim index and the checks; enqueue_many adds its function.",
            [table(["statement", "rows/s", "enqueue_many / this"], bulk_insert(server))],
        )
        section(
            "5. The parts of the latency",
            "What an idle worker does after a notification: its first statement after being idle, then "
            "the claim (from Python, one connection).",
            [table(["statement (one connection, from Python)", "ms, median of 100"], latency_parts(server))],
        )
    parts += ["", f"Wall time: {time.perf_counter() - began:.0f} s."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(re.sub(r"\n{3,}", "\n\n", "\n".join(parts)).rstrip() + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
