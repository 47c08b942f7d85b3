"""pgjobq through its SQL API, from Python worker processes.

Each process holds one autocommit psycopg connection with every statement
prepared at once (``prepare_threshold = 0``) and loops: ``jobq.claim`` up to
``batch`` jobs (one commit), runs the handler on each, then acknowledges the
whole batch with one ``jobq.complete_many`` (one commit).  With nothing to
claim it sleeps 10 ms.  This is what pgjobq costs without its Worker's
threads, heartbeats and LISTEN connection.

The statements are the two constants below: a new SQL fast path (say, one
function that acknowledges the previous batch and claims the next) is a
change of those lines.  ``PgjobqContender`` is the database side every
pgjobq contender shares (the extension, reset, bulk load).
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import sql

import pgjobq

from ._util import do_work, idle, payloads
from .base import Contender, Target, WorkerHooks

__all__ = [
    "ACK_SQL",
    "CLAIM_SQL",
    "ENQUEUE_MANY_SQL",
    "QUEUE",
    "PgjobqContender",
    "PgjobqSql",
    "pgjobq_reset",
    "pgjobq_setup",
]

QUEUE = "bench"

CLAIM_SQL = "SELECT id, lease, payload FROM jobq.claim(%s, %s, %s)"
ACK_SQL = "SELECT count(*) FROM jobq.complete_many(%s::bigint[], %s::bigint[])"

# jobs %(first)s..%(last)s of queue %(queue)s in one jobq.enqueue_many call, payloads built by the server
ENQUEUE_MANY_SQL = """
SELECT cardinality(jobq.enqueue_many(%(queue)s, array_agg(jsonb_build_object('i', g))))
  FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""

EMPTY_SLEEP = 0.01


def pgjobq_setup(target: Target, version: str | None = None) -> None:
    """CREATE EXTENSION pgjobq in the target database: its default version, or the one named."""
    statement = sql.SQL("CREATE EXTENSION pgjobq{}").format(
        sql.SQL("") if version is None else sql.SQL(" VERSION {}").format(sql.Literal(version))
    )
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute(statement)


def pgjobq_reset(target: Target) -> None:
    """Remove every job (TRUNCATE keeps the sequence; ids only grow)."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE jobq.jobs")


class PgjobqContender(Contender):
    """What every pgjobq contender does alike: the extension, TRUNCATE to reset, and a backlog loaded
    with one pgjobq.enqueue_many call (one jobq.enqueue_many statement)."""

    def setup(self, target: Target) -> None:
        pgjobq_setup(target)

    def reset(self, target: Target) -> None:
        pgjobq_reset(target)

    def enqueue(self, target: Target, count: int) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            pgjobq.enqueue_many(conn, QUEUE, payloads(range(count)))


class PgjobqSql(PgjobqContender):
    """pgjobq's SQL API: jobq.claim, then one jobq.complete_many per batch; prepared statements."""

    name = "pgjobq_sql"
    label = "pgjobq SQL API"

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        worker = f"bench-sql-{os.getpid()}"
        with psycopg.connect(target.dsn, autocommit=True, application_name=worker) as conn:
            conn.prepare_threshold = 0
            hooks.ready()
            while not hooks.should_stop():
                rows: list[tuple[Any, ...]] = conn.execute(CLAIM_SQL, (QUEUE, batch, worker)).fetchall()
                if not rows:
                    idle(hooks, EMPTY_SLEEP)
                    continue
                for _id, _lease, _payload in rows:
                    do_work(work_seconds)
                row = conn.execute(ACK_SQL, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
                hooks.processed(int(row[0]) if row else 0)
