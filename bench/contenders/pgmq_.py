"""PGMQ through its Python client ``pgmq``, installed as plain SQL (no extension).

Installing it: "the official Python client for PGMQ" (its README), published
on PyPI as ``pgmq``, bundles a pinned release of PGMQ's SQL
(``pgmq/sql/pgmq.sql``: PGMQ 1.13.0 in pgmq 1.1.4) and
``install_pgmq_from_sql()``, the "SQL only" install its README describes for
servers without the extension.  (The older client, ``tembo-pgmq-python``
0.10, ships no SQL.)  So the bench extra's ``pgmq`` package is all this
contender needs: nothing is downloaded at bench time, no C or Rust
extension is built, and no third-party SQL is committed here.

Settings, and why (the client's README and docs, pgmq.github.io/pgmq-py):
- Read ``qty = batch`` messages per ``read`` and delete them with one
  ``delete_batch`` call: "Batch operations for high throughput" is the
  README's own advice.  ``batch = 1`` uses ``read`` and ``delete`` of one
  message, the quick-start's loop.
- ``delete`` rather than ``archive``: the quick start archives, which keeps
  history by moving every message to the archive table (an extra insert);
  deleting is the lighter of the two documented ways to finish a message.
- A logged, non-partitioned queue (``create_queue``), like every other
  PostgreSQL contender; ``vt`` (visibility timeout) 30 s, the client default.
- One connection per worker in autocommit, handed to every call with
  ``conn=`` (the docs' "manual connection injection"): one round trip per
  call, where the client's default pool path wraps each call in its own
  BEGIN/COMMIT.
- With nothing to read the worker sleeps 10 ms and reads again (PGMQ's
  ``read_with_poll`` would hold the connection up to a whole second, which
  would delay stopping).
- Enqueue: one ``send_batch`` of all messages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from pgmq import PGMQueue, install_pgmq_from_sql
from psycopg_pool import ConnectionPool

from ._util import chunks, do_work, payloads
from .base import Contender, Target, WorkerHooks

__all__ = ["Pgmq"]

QUEUE = "bench"
VISIBILITY_TIMEOUT = 30
IDLE_SLEEP = 0.01
SEND_CHUNK = 100_000


@contextlib.contextmanager
def _opened(dsn: str) -> Iterator[tuple[PGMQueue, psycopg.Connection[Any]]]:
    """A PGMQ client over a one-connection autocommit pool, and that connection; closed on exit."""
    with (
        ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True) as pool,
        pool.connection() as conn,
    ):
        yield PGMQueue(conn_string=dsn, pool=pool, init_extension=False, vt=VISIBILITY_TIMEOUT), conn


class Pgmq(Contender):
    name = "pgmq"
    label = "PGMQ (pgmq client)"
    batches = None

    def setup(self, target: Target) -> None:
        with psycopg.connect(target.dsn) as conn:
            installed = conn.execute("SELECT to_regnamespace('pgmq') IS NOT NULL").fetchone()
            conn.commit()
            if not (installed and installed[0]):
                install_pgmq_from_sql(conn=conn)
        with _opened(target.dsn) as (queue, conn):
            queue.create_queue(QUEUE, conn=conn)

    def reset(self, target: Target) -> None:
        with _opened(target.dsn) as (queue, conn):
            queue.purge(QUEUE, conn=conn)

    def enqueue(self, target: Target, count: int) -> None:
        with _opened(target.dsn) as (queue, conn):
            for numbers in chunks(count, SEND_CHUNK):
                queue.send_batch(QUEUE, payloads(numbers), conn=conn)

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        with _opened(target.dsn) as (queue, conn):
            hooks.ready()
            while not hooks.should_stop():
                messages = queue.read_batch(QUEUE, vt=VISIBILITY_TIMEOUT, batch_size=batch, conn=conn)
                if not messages:
                    time.sleep(IDLE_SLEEP)
                    continue
                for message in messages:
                    _ = message.message["i"]  # the handler reads its payload
                    do_work(work_seconds)
                if len(messages) == 1:
                    queue.delete(QUEUE, messages[0].msg_id, conn=conn)
                else:
                    queue.delete_batch(QUEUE, [message.msg_id for message in messages], conn=conn)
                hooks.processed(len(messages))
