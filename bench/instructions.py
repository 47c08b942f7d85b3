"""Server instructions per job on the hot paths, two pgjobq versions side by side (make bench-instructions).

    .venv/bin/python bench/instructions.py                      # the current version against the previous
    .venv/bin/python bench/instructions.py --compare-with 0.2.0

Seconds on a shared machine drift by more than the 3% a version may cost a
plain queue; instructions do not.  For each version this makes a throwaway
cluster, a database with `CREATE EXTENSION pgjobq VERSION '<v>'`, jobs to
claim and 20,000 more in another queue (analyzed, so that the plans are those
of a real table), then runs a PostgreSQL backend in single-user mode under valgrind's
callgrind (which counts the instructions it executes, whatever else the
machine does) on a script that prepares the path's statement and executes it
N times, and again 2N times: the difference over N is the cost of one
execution, free of start-up, as a client with prepared statements (psycopg's
default for statements it repeats) pays it.  The paths:

- claim + complete: ``SELECT jobq.complete(c.id, c.lease) FROM jobq.claim('q', 1, 'w') AS c`` (one job);
- the worker's path: ``jobq.complete_and_claim`` of the jobs claimed by the statement before, batch 1
  and batch 50 (the latter reported per job);
- single-row enqueue: ``SELECT jobq.enqueue('q', '{}')``.

The planning and execution inside the functions are included; the client,
the protocol and commits to disk are not (single-user mode, fsync off).  Prints a Markdown
table; writes it to bench/results/instructions.md with --write.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from throwaway_pg import ThrowawayPostgres  # noqa: E402

from workloads import COMPARE_WITH_ENV, previous_version  # noqa: E402

STATEMENTS = 200  # N; every run also does 2N
JOBS = 3 * STATEMENTS + 10  # enough to claim in both runs of a path, and then some
OTHER_JOBS = 20_000  # queued in another queue, as the benchmark's backlog


@dataclass(frozen=True)
class HotPath:
    name: str
    hot: bool  # one of the two paths a version must keep within 3% of the previous one
    setup: str  # run once, on a live server, before the counted runs
    statement: str  # repeated; {i} is its number
    per: int = 1  # jobs per statement: the figure reported is per job


PATHS = (
    HotPath(
        "claim + complete, one job",
        True,
        f"SELECT jobq.enqueue_many('q', array_fill('{{}}'::jsonb, ARRAY[{JOBS}]))",
        "SELECT jobq.complete(c.id, c.lease) FROM jobq.claim('q', 1, 'w') AS c",
    ),
    HotPath(
        "complete_and_claim, batch 1",
        False,
        f"SELECT jobq.enqueue_many('q', array_fill('{{}}'::jsonb, ARRAY[{JOBS}]))",
        # acknowledges the job the previous statement claimed (by id and lease), claims the next
        "SELECT count(*) FROM jobq.complete_and_claim("
        "ARRAY(SELECT id FROM jobq.jobs WHERE status = 'running'),"
        " ARRAY(SELECT lease FROM jobq.jobs WHERE status = 'running'), 'q', 1, 'w')",
    ),
    HotPath(
        "complete_and_claim, batch 50 (per job)",
        False,
        f"SELECT jobq.enqueue_many('q', array_fill('{{}}'::jsonb, ARRAY[{JOBS * 50}]))",
        "SELECT count(*) FROM jobq.complete_and_claim("
        "ARRAY(SELECT id FROM jobq.jobs WHERE status = 'running'),"
        " ARRAY(SELECT lease FROM jobq.jobs WHERE status = 'running'), 'q', 50, 'w')",
        per=50,
    ),
    HotPath("single-row enqueue", True, "SELECT 1", "SELECT jobq.enqueue('q', '{}')"),
)


def collected(server: ThrowawayPostgres, dbname: str, script: str, work: Path) -> int:
    """Instructions callgrind counts for a single-user backend (of the stopped server) that runs script."""
    script_file = work / "script.sql"
    script_file.write_text(script)
    script_file.chmod(0o644)
    postgres = [str(server.bindir / "postgres"), "--single", "-D", str(server.data_dir), "-c", "fsync=off"]
    with script_file.open() as stdin:
        result = server.run(
            "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *postgres, dbname, stdin=stdin
        )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None or "ERROR" in result.stdout:
        raise RuntimeError(f"single-user run failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return int(found.group(1))


def per_statement(version: str, path: HotPath, work: Path) -> float:
    """Instructions of one statement of path on a database at version."""
    with ThrowawayPostgres(work / f"pg-{version}-{PATHS.index(path)}", fast=True) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        with psycopg.connect(server.dsn("bench"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(version)))
            conn.execute(path.setup)
            # a table of a realistic size, analyzed: with a few hundred rows the planner's choices
            # (sequential scans, custom against generic plans) are not the ones a real queue gets
            conn.execute(f"SELECT jobq.enqueue_many('other', array_fill('{{}}'::jsonb, ARRAY[{OTHER_JOBS}]))")
            conn.execute("ANALYZE jobq.jobs")
            conn.execute("SELECT * FROM jobq.claim('q', 1, 'w')")  # the first job complete_and_claim acks
            conn.execute("CHECKPOINT")
        server.stop()
        prepared = f"PREPARE measured AS {path.statement}\n"
        counts = [
            collected(server, "bench", prepared + "EXECUTE measured;\n" * n, work)
            for n in (STATEMENTS, 2 * STATEMENTS)
        ]
    return (counts[1] - counts[0]) / STATEMENTS / path.per


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--compare-with",
        default=os.environ.get(COMPARE_WITH_ENV),
        help=f"the version to compare with [default: the one before the current; env {COMPARE_WITH_ENV}]",
    )
    parser.add_argument("--write", action="store_true", help="also write bench/results/instructions.md")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="pgjobq-instructions-") as folder:
        work = Path(folder)
        work.chmod(0o755)
        with ThrowawayPostgres(work / "probe", fast=True) as probe, psycopg.connect(probe.dsn()) as conn:
            previous = previous_version(conn, args.compare_with)
            row = conn.execute(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'pgjobq'"
            ).fetchone()
            assert row is not None  # previous_version found the extension
            current = str(row[0])
        rows = []
        for path in PATHS:
            try:
                before = per_statement(previous, path, work)
            except RuntimeError as exc:
                if "does not exist" not in str(exc):
                    raise
                rows.append(f"| {path.name} | not in {previous} | | | |")
                continue
            now = per_statement(current, path, work)
            verdict = ("yes" if now <= before * 1.03 else "**no**") if path.hot else "(not a hot path)"
            rows.append(f"| {path.name} | {before:,.0f} | {now:,.0f} | {now / before:.3f}x | {verdict} |")
    table = "\n".join(
        [
            f"Server instructions per statement (callgrind, single-user backend, {STATEMENTS} vs "
            f"{2 * STATEMENTS} statements), pgjobq {previous} and {current}:",
            "",
            f"| path | {previous} | {current} | ratio | within 3% |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        (BENCH / "results" / "instructions.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
