"""The handler of the durable chaos run (``pgjobq worker chaos.chaos_durable_handlers:run``), and its tables.

Each job runs three steps, ``a``, ``b`` and ``c`` (``job.step``), and in
between, as its payload says, a durable sleep and a wait for a signal:

    a, [sleep "nap" of payload["sleep"] s], b, [await_signal("sig-<id>", payload["timeout"])], c

A step's function is the side effect the steps exist for, and it is counted
outside the job's statements: one row of ``chaos.effects`` (a token, the job,
the step, the lease of the run, the pid and the worker), written by the
handler process's own autocommit connection (chaos_handlers', per thread),
between two random pauses of ``payload["ms"]`` milliseconds, so that a
SIGKILL lands before the effect, between it and its checkpoint, and between
steps.  It returns ``{"token", "lease", "pid"}``: what ``job.step`` records
(``jobq.checkpoint``, under the lease) and returns, and on a later run
returns without calling it.  The job's result holds the three tokens the
steps returned, and the wait's outcome.

Besides the effects, the handler records (same connection, each row a token
of its own, so a retried insert never doubles it):

- ``chaos.runs``: every run of a job (lease, pid, worker) and how it ended:
  returned, suspended (the sleep or the wait gave the job back), refused
  (LeaseLost: a step or a sleep of a stale lease refused), or the error;
- ``chaos.sleep_requests``: before each ``job.sleep``, the duration asked and
  the wake time it asks for by the database's clock (``clock_timestamp()``
  plus the duration: ``jobq.sleep`` adds the duration to its own later
  statement's clock, so the end it records is no earlier);
- ``chaos.resumes``: each time a run passes the sleep (kind sleep), gets the
  signal's payload (kind signal) or its timeout (kind timeout,
  ``pgjobq.SignalTimeout``, after which the job goes on to step c), at the
  database's clock;
- ``chaos.refusals``: each LeaseLost, with the lease the run presented.

Connection errors of the evidence writes are retried (chaos_handlers'
``_retrying``); those of the durable calls fail the attempt (the job is
retried), as they would in any handler.  ``pgjobq.Suspended`` always
propagates.  The rest of the evidence is written by triggers
(chaos_durable.SCHEMA_DDL) and by the harness's signaller.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

import pgjobq
from pgjobq import Job

from chaos.chaos_handlers import _retrying, _worker_name

__all__ = ["HANDLER_GRANTS", "SLEEP", "STEPS", "handler_grants", "run", "signal_key"]

STEPS = ("a", "b", "c")
SLEEP = "nap"  # the name of a job's sleep

# What the handler needs of the evidence tables, on top of the worker level.
HANDLER_GRANTS = """
GRANT USAGE ON SCHEMA chaos TO {role};
GRANT SELECT, INSERT, UPDATE ON TABLE chaos.runs, chaos.effects, chaos.sleep_requests, chaos.resumes,
    chaos.refusals TO {role};
"""


def handler_grants(role: str) -> sql.Composed:
    """The statements that let role (a worker's login role) run this handler."""
    return sql.SQL(HANDLER_GRANTS).format(role=sql.Identifier(role))


def signal_key(job_id: int) -> str:
    """The key of the signal job_id awaits (one per job)."""
    return f"sig-{job_id}"


def _pause(payload: dict[str, Any]) -> None:
    low, high = payload.get("ms", (0, 0))
    time.sleep(random.uniform(float(low), float(high)) / 1000)


def _insert(query: str, params: tuple[Any, ...]) -> None:
    """Run an evidence insert (made idempotent by its token) on this thread's connection, retrying."""

    def action(conn: psycopg.Connection[Any]) -> None:
        conn.execute(query, params)

    _retrying(action)


def _effect(job: Job, step: str) -> dict[str, Any]:
    """A step's side effect: one row of chaos.effects, between two random pauses; what the step returns."""
    token = uuid.uuid4()
    _pause(job.payload)
    _insert(
        "INSERT INTO chaos.effects (token, job_id, step, lease, pid, worker) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (token) DO NOTHING",
        (token, job.id, step, job.lease, os.getpid(), _worker_name()),
    )
    _pause(job.payload)
    return {"token": str(token), "lease": job.lease, "pid": os.getpid()}


def _resume(job: Job, kind: str, name: str, payload: Any = None) -> None:
    _insert(
        "INSERT INTO chaos.resumes (token, job_id, lease, kind, name, payload)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (token) DO NOTHING",
        (uuid.uuid4(), job.id, job.lease, kind, name, Jsonb(payload)),
    )


def _steps(job: Job) -> dict[str, Any]:
    payload = job.payload
    done: dict[str, Any] = {}
    done["a"] = job.step("a", _effect, job, "a")["token"]
    _pause(payload)
    seconds = payload.get("sleep")
    if seconds is not None:
        _insert(
            "INSERT INTO chaos.sleep_requests (token, job_id, lease, name, seconds, requested_until)"
            " VALUES (%s, %s, %s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
            " ON CONFLICT (token) DO NOTHING",
            (uuid.uuid4(), job.id, job.lease, SLEEP, float(seconds), float(seconds)),
        )
        job.sleep(float(seconds), name=SLEEP)  # the first time: Suspended
        _resume(job, "sleep", SLEEP)
    done["b"] = job.step("b", _effect, job, "b")["token"]
    _pause(payload)
    if payload.get("signal"):
        key = signal_key(job.id)
        try:
            # the first time, unless the signal was sent already: Suspended
            received = job.await_signal(key, float(payload["timeout"]))
        except pgjobq.SignalTimeout:
            _resume(job, "timeout", key)
            done["signal"] = "timeout"
        else:
            _resume(job, "signal", key, received)
            done["signal"] = received
    done["c"] = job.step("c", _effect, job, "c")["token"]
    return done


def run(job: Job) -> dict[str, Any]:
    """The durable chaos run's handler: steps a, b, c, with a sleep and a wait between them (module doc)."""
    token = uuid.uuid4()
    _insert(
        "INSERT INTO chaos.runs (token, job_id, lease, pid, worker) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (token) DO NOTHING",
        (token, job.id, job.lease, os.getpid(), _worker_name()),
    )

    def ended(outcome: str) -> None:
        _insert(
            "UPDATE chaos.runs SET outcome = coalesce(outcome, %s),"
            " finished_at = coalesce(finished_at, clock_timestamp()) WHERE token = %s",
            (outcome, token),
        )

    try:
        result = _steps(job)
    except pgjobq.Suspended:
        ended("suspended")
        raise
    except pgjobq.LeaseLost:
        _insert(
            "INSERT INTO chaos.refusals (token, job_id, lease) VALUES (%s, %s, %s)"
            " ON CONFLICT (token) DO NOTHING",
            (uuid.uuid4(), job.id, job.lease),
        )
        ended("refused")
        raise
    except BaseException as exc:
        ended(f"error: {type(exc).__name__}")
        raise
    ended("returned")
    return result
