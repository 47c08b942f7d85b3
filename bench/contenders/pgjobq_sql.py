"""pgjobq through its SQL API, from Python worker processes.

Each process holds one autocommit psycopg connection with every statement
prepared at once (``prepare_threshold = 0``) and loops: ``jobq.claim`` up to
``batch`` jobs (one commit), runs the handler on each, then acknowledges the
whole batch with one ``jobq.complete_many`` (one commit).  With nothing to
claim it sleeps 10 ms.  This is what pgjobq costs without its Worker's
threads, heartbeats and LISTEN connection.

The statements are the two constants below: a new SQL fast path (say, one
function that acknowledges the previous batch and claims the next) is a
change of those lines.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import pgjobq

from ._util import idle
from .base import Contender, Target, WorkerHooks

__all__ = ["ACK_SQL", "CLAIM_SQL", "QUEUE", "PgjobqSql", "pgjobq_reset", "pgjobq_setup"]

QUEUE = "bench"

CLAIM_SQL = "SELECT id, lease, payload FROM jobq.claim(%s, %s, %s)"
ACK_SQL = "SELECT count(*) FROM jobq.complete_many(%s::bigint[], %s::bigint[])"

EMPTY_SLEEP = 0.01


def pgjobq_setup(target: Target) -> None:
    """CREATE EXTENSION pgjobq in the target database."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")


def pgjobq_reset(target: Target) -> None:
    """Remove every job (TRUNCATE keeps the sequence; ids only grow)."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE jobq.jobs")


def pgjobq_enqueue(target: Target, count: int) -> None:
    """count jobs in one pgjobq.enqueue_many call (one jobq.enqueue_many statement)."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        pgjobq.enqueue_many(conn, QUEUE, [{"i": i} for i in range(count)])


class PgjobqSql(Contender):
    """pgjobq's SQL API: jobq.claim, then one jobq.complete_many per batch; prepared statements."""

    name = "pgjobq_sql"
    label = "pgjobq SQL API"

    def setup(self, target: Target) -> None:
        pgjobq_setup(target)

    def reset(self, target: Target) -> None:
        pgjobq_reset(target)

    def enqueue(self, target: Target, count: int) -> None:
        pgjobq_enqueue(target, count)

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
                    if work_seconds > 0:
                        time.sleep(work_seconds)
                row = conn.execute(ACK_SQL, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
                hooks.processed(int(row[0]) if row else 0)
