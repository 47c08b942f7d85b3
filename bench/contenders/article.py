"""The reference article's queue, as written: our floor.

Source: "FOR UPDATE SKIP LOCKEDでジョブキュー | PostgreSQL実測" (the seed article of
pgjobq).  Its DDL (an enum status, one table, the two partial indexes), its
worker's claim, done and reap statements and its loop are copied unchanged:
an autocommit psycopg connection, a reap every 10 s, a claim of ``BATCH``
jobs (``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)
RETURNING``), the handler, then one ``DONE_SQL`` per job, each its own
commit; with nothing to claim it sleeps ``POLL_SEC`` (0.5 s).  psycopg's
defaults otherwise (statements prepared after 5 executions).

``ArticleBulkDone`` is the same queue with one change the article itself
points at ("batching matters most"): the jobs of a batch are marked done by
one UPDATE (``id = ANY(...)``), one commit per batch instead of one per job.

The article has no enqueue code; jobs are loaded with one INSERT of all
payloads (``unnest`` of a jsonb array), the same shape as
``jobq.enqueue_many``.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import psycopg

from ._util import do_work, idle, payload_texts
from .base import Contender, Target, WorkerHooks

__all__ = ["ArticleBulkDone", "ArticleQueue"]

# The article's DDL, verbatim.
DDL = """
CREATE TYPE job_status AS ENUM ('queued', 'running', 'done', 'failed');

CREATE TABLE jobs (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  payload      jsonb       NOT NULL,
  status       job_status  NOT NULL DEFAULT 'queued',
  priority     int         NOT NULL DEFAULT 0,
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 3,
  locked_by    text,
  locked_at    timestamptz,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz
);

CREATE INDEX jobs_dequeue_idx ON jobs (queue, priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_running_idx ON jobs (locked_at) WHERE status = 'running';
"""

# The article's worker statements, verbatim.
CLAIM_SQL = """
UPDATE jobs
   SET status = 'running', locked_by = %(w)s, locked_at = now(), attempts = attempts + 1
 WHERE id IN (SELECT id FROM jobs
               WHERE queue = %(q)s AND status = 'queued' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT %(n)s
               FOR UPDATE SKIP LOCKED)
RETURNING id, payload, attempts, max_attempts
"""
DONE_SQL = """UPDATE jobs SET status = 'done', finished_at = now(), locked_by = NULL, locked_at = NULL
               WHERE id = %s AND status = 'running'"""
REAP_SQL = """
UPDATE jobs
   SET status = CASE WHEN attempts >= max_attempts THEN 'failed'::job_status ELSE 'queued'::job_status END,
       last_error = concat_ws(E'\\n', last_error, 'stale running: ' || locked_by),
       locked_by = NULL, locked_at = NULL
 WHERE status = 'running' AND locked_at < now() - make_interval(secs => %s)
"""

# ArticleBulkDone's one change: DONE_SQL for a whole batch.
BULK_DONE_SQL = """UPDATE jobs SET status = 'done', finished_at = now(), locked_by = NULL, locked_at = NULL
                    WHERE id = ANY(%s) AND status = 'running'"""

ENQUEUE_SQL = "INSERT INTO jobs (payload) SELECT p FROM unnest(%s::jsonb[]) AS p"
SINGLE_INSERT_SQL = "INSERT INTO jobs (payload) VALUES (%s::jsonb)"  # the enqueue workload's reference
# the bulk enqueue's reference: the payloads as one JSON array, as pgjobq.enqueue_many sends them (the
# fastest plain multi-row INSERT into this table from Python: about twice ENQUEUE_SQL's rate)
BULK_INSERT_SQL = "INSERT INTO jobs (payload) SELECT p FROM jsonb_array_elements(%s::jsonb) AS p"
RESET_SQL = "TRUNCATE jobs"

QUEUE = "default"  # the article's queue name
POLL_SEC = 0.5
STALE_SEC = 60
REAP_EVERY = 10


class ArticleQueue(Contender):
    """The article's queue and worker as written: one commit per claim, one per job done."""

    name = "article"
    label = "article (per-job done)"
    batches: ClassVar[tuple[int, ...] | None] = (1, 10, 50)

    def setup(self, target: Target) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(DDL)

    def reset(self, target: Target) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(RESET_SQL)

    def enqueue(self, target: Target, count: int) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(ENQUEUE_SQL, (payload_texts(range(count)),))

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        worker = f"worker-{os.getpid()}"
        with psycopg.connect(target.dsn, autocommit=True, application_name=worker) as conn:
            hooks.ready()
            last_reap = 0.0
            while not hooks.should_stop():
                if time.time() - last_reap > REAP_EVERY:
                    conn.execute(REAP_SQL, (STALE_SEC,))
                    last_reap = time.time()
                rows = conn.execute(CLAIM_SQL, {"w": worker, "q": QUEUE, "n": batch}).fetchall()
                if not rows:
                    idle(hooks, POLL_SEC)
                    continue
                self.run_batch(conn, rows, work_seconds, hooks)

    def run_batch(
        self,
        conn: psycopg.Connection[Any],
        rows: list[tuple[Any, ...]],
        work_seconds: float,
        hooks: WorkerHooks,
    ) -> None:
        for job_id, _payload, _attempts, _max_attempts in rows:
            do_work(work_seconds)
            conn.execute(DONE_SQL, (job_id,))
            hooks.processed(1)


class ArticleBulkDone(ArticleQueue):
    """The article's queue with one bulk done per batch (one commit per claim, one per batch)."""

    name = "article_bulk"
    label = "article (bulk done per batch)"
    batches: ClassVar[tuple[int, ...] | None] = (10, 50)  # at batch 1 it is the article's queue itself

    def run_batch(
        self,
        conn: psycopg.Connection[Any],
        rows: list[tuple[Any, ...]],
        work_seconds: float,
        hooks: WorkerHooks,
    ) -> None:
        for _job_id, _payload, _attempts, _max_attempts in rows:
            do_work(work_seconds)
        conn.execute(BULK_DONE_SQL, ([row[0] for row in rows],))
        hooks.processed(len(rows))
