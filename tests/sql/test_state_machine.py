"""Property test of the SQL API: a Hypothesis state machine against a model of the queue.

The rules call jobq.enqueue, claim, complete, complete_many, complete_and_claim, fail, heartbeat,
release, snooze, reap and retry_failed on one connection: with the current lease, with stale ones (from
before a later claim, a reap, a failure, a release or a snooze), with leases never issued and with
unknown ids.  The job control of 0.6.0 has rules too: enqueue with a unique key (scope active or
until_done, on_conflict return or skip), cancel (with force or not; queued, running, finished and
unknown jobs), snooze, complete and complete_many with results (any JSON value, JSON null included),
pause and resume.  A plain Python model predicts every outcome (success, JQ001 lease not current,
JQ002 no such job) and every row.  After every step the invariants compare the whole table with the
model (status, lease, attempts, the exact run_at, locked_at and lease expiry, the unique key and
scope, the cancel request, ...), prove that only the current lease of a job is accepted, check that
every change was an allowed transition (the lease only ever grows, by one, at a claim; done and
cancelled are final; attempts stay within max_attempts), and compare jobq.stats() with the model.
The invariants of job control: no two jobs of the queue share a unique key inside their scope
(queued or running, or done for until_done); a cancelled job never changes again (its whole row,
every column, stays as it was when it became cancelled); a snoozed job has the attempts it had
before the claim it was snoozed from; a claim of the paused queue returns nothing (tried in a
transaction rolled back) and jobq.queues says it is paused; every stored result, read through
jobq.job, is the one the model completed the job with.

Time is real (claim, heartbeat, fail, snooze and reap use statement_timestamp()) and nothing sleeps.  A
rule moves time forward by backdating the run_at, locked_at and lease_expires_at of every row but the
cancelled ones (which must never change).  Claims take
leases of different lengths, so the reaper must judge each job by its own.  A time the database sets is read
back and checked to lie within the window of the call that set it ([just before the call, just after
it], give or take a millisecond of rounding); from then on the model knows it exactly.  A comparison
with "now" is judged against the window of the call that makes it: only a time inside that window
(milliseconds) leaves the outcome open, and then either answer is accepted.

Hypothesis runs the machine on fresh random sequences every time.  Scripted runs drive the same
machine, invariants and all, through fixed sequences: a job failed for good at max_attempts by fail
and by the reaper, its old leases refused, redriven by retry_failed; and the paths of job control (a
key held until done, cancel requested then honoured by snooze, fail and the reaper, a force cancel
fencing the lease, a paused queue, a redrive refused because a newer job holds the key).  The random
run reaches those paths in most runs but not in every one, so they are proven on every run by the
scripts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeAlias, TypeVar

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from helpers.fixtures import Target
from helpers.sqlhelpers import Db

Pair: TypeAlias = tuple[int, int]
"""A job id and a lease, as claim hands them out."""
T = TypeVar("T")

QUEUE = "alpha"
EMPTY_QUEUE = "beta"  # never has a job: retry_failed naming it redrives nothing
WORKERS = ("w1", "w2")
OPERATIONS = ("complete", "fail", "heartbeat", "release", "snooze")
MAX_JOBS = 6
# No job ever has these ids: 0 and negatives are never drawn from the sequence, and the largest
# bigint is far beyond anything this test enqueues.
UNKNOWN_IDS = (0, -7, 2**63 - 1)
# The lease lengths claims ask for (None: claim's default, 60 seconds).
LEASE_SECONDS = (None, 5, 60, 300)
DEFAULT_LEASE = timedelta(seconds=60)
# Unique keys: two, so that enqueues collide often.
KEYS = ("k1", "k2")
# Snooze delays, in seconds (0: runnable again at once).
SNOOZE_SECONDS = (0, 2, 30)
# Python and PostgreSQL read the same clock, each rounded to the microsecond.
ROUNDING = timedelta(milliseconds=1)

# The random run: this many examples of at most this many steps.  Long examples reach deep states (a
# job reaped, claimed again, failed for good, redriven); Hypothesis disables a random subset of the
# rules in each example ("swarm testing"), so many short ones would mostly stay shallow.
EXAMPLES = 20
STEPS = 100
# On the other majors, fewer: the same code on another server, where a difference shows in any example.
EXAMPLES_ON_OTHER_MAJORS = 6


def clock() -> datetime:
    return datetime.now(timezone.utc)


def backoff(attempts: int) -> timedelta:
    """The retry delay after this many attempts, as jobq._backoff computes it."""
    return timedelta(seconds=min(300, 2**attempts))


@dataclass(frozen=True)
class Unique:
    """The unique options of an enqueue: the key, its scope and what a conflict does."""

    key: str
    scope: str  # 'active' or 'until_done'
    on_conflict: str  # 'return' or 'skip'


@dataclass(frozen=True)
class NewJob:
    """The options of a job to enqueue; delay: seconds from now, or None for the default run_at (now())."""

    priority: int
    max_attempts: int
    delay: int | None
    unique: Unique | None = None


NEW_JOBS = st.builds(
    NewJob,
    priority=st.sampled_from((0, 1)),
    max_attempts=st.integers(1, 3),
    delay=st.sampled_from((None, -5, 30)),
)
UNIQUE_JOBS = st.builds(
    NewJob,
    priority=st.sampled_from((0, 1)),
    max_attempts=st.integers(1, 3),
    delay=st.sampled_from((None, -5, 30)),
    unique=st.builds(
        Unique,
        key=st.sampled_from(KEYS),
        scope=st.sampled_from(("active", "until_done")),
        on_conflict=st.sampled_from(("return", "skip")),
    ),
)


@dataclass(frozen=True)
class Result:
    """A JSON value a job was completed with, as canonical JSON text, so that true and 1 differ, and JSON
    null (Result.of(None)) is a result, unlike SQL NULL (no Result at all)."""

    text: str

    @classmethod
    def of(cls, value: Any) -> Result:
        return cls(json.dumps(value, sort_keys=True))

    def jsonb(self) -> Jsonb:
        return Jsonb(json.loads(self.text))


JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(alphabet='ab "\\é', max_size=4),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet="xyz", max_size=2), children, max_size=3)
    ),
    max_leaves=6,
)
# What complete is given: no result (SQL NULL), or a JSON value (JSON null included).
RESULTS: st.SearchStrategy[Result | None] = st.none() | JSON_VALUES.map(Result.of)


@dataclass(frozen=True)
class Call:
    """The outcome of one statement and the window its statement_timestamp() lies in."""

    rows: list[dict[str, Any]]
    sqlstate: str | None
    error: str | None
    earliest: datetime
    latest: datetime


@dataclass
class ModelJob:
    """What the model knows about one job."""

    id: int
    priority: int
    max_attempts: int
    run_at: datetime
    status: str = "queued"
    attempts: int = 0
    lease: int = 0
    locked_at: datetime | None = None
    locked_by: str | None = None
    lease_expires_at: datetime | None = None
    unique_key: str | None = None
    unique_scope: str | None = None  # the key's, while the job owns it: 'until_done' or None ('active')
    owns_key: bool = False  # jobq.unique_keys names the job: no other job took its key since
    result: Result | None = None
    cancel_requested: bool = False
    attempts_before_claim: int = 0  # when the current lease was claimed
    snoozed: bool = False  # queued again by a snooze, not claimed since

    def holds(self, lease: int) -> bool:
        """Whether a call presenting lease acts on this job."""
        return self.status == "running" and self.lease == lease

    def holds_key(self, key: str) -> bool:
        """Whether the job holds the unique key: it owns it, and is queued or running, or done when the
        scope is until_done."""
        return (
            self.owns_key
            and self.unique_key == key
            and (
                self.status in ("queued", "running")
                or (self.status == "done" and self.unique_scope == "until_done")
            )
        )

    def row(self) -> dict[str, Any]:
        """The row the table must hold (columns of TABLE_QUERY)."""
        return {
            "id": self.id,
            "queue": QUEUE,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "status": self.status,
            "attempts": self.attempts,
            "lease": self.lease,
            "run_at": self.run_at,
            "locked_at": self.locked_at,
            "locked_by": self.locked_by,
            "lease_expires_at": self.lease_expires_at,
            "finished": self.status in ("done", "failed", "cancelled"),
            "cancel_requested": self.cancel_requested,
        }


# The columns the model predicts (ModelJob.row), then the whole row (for a_cancelled_job_never_changes_again)
# and what the public lookup jobq.job reports (for every_stored_result_is_the_one_completed_with).  Where
# the job control keeps its data (a unique key, a result, a cancel request) is the SQL's own business:
# only jobq.job and the calls' outcomes are read.
TABLE_QUERY = """
    SELECT j.id, j.queue, j.priority, j.max_attempts, j.status, j.attempts, j.lease, j.run_at, j.locked_at,
           j.locked_by, j.lease_expires_at, j.finished_at IS NOT NULL AS finished, s.cancel_requested,
           to_jsonb(j) AS whole,
           s.status AS looked_up_status, s.result IS NULL AS looked_up_no_result,
           s.result AS looked_up_result, s.cancel_requested AS looked_up_cancel_requested
      FROM jobq.jobs AS j
      CROSS JOIN LATERAL jobq.job(j.id) AS s
     ORDER BY j.id
"""
MODEL_COLUMNS = tuple(ModelJob(0, 0, 0, datetime.now(timezone.utc)).row())

# (status before, status after) of every change a single call may make, besides a claim
# (queued -> running, the only change of the lease, by exactly one).
ALLOWED_WITHOUT_CLAIM = {
    ("running", "done"),
    ("running", "queued"),
    ("running", "failed"),
    ("failed", "queued"),
    ("queued", "cancelled"),
    ("running", "cancelled"),
}


class QueueMachine(RuleBasedStateMachine):
    """Drives the SQL API on one connection and keeps the model in step."""

    job_ids: Bundle[int] = Bundle("job_ids")
    # Every (id, lease) claim ever handed out: the current lease of a job or a stale one.
    leases: Bundle[Pair] = Bundle("leases")

    def __init__(self, db: Db) -> None:
        super().__init__()
        self.db = db
        self.jobs: dict[int, ModelJob] = {}
        self.observed: dict[int, tuple[str, int]] = {}
        self.paused = False
        # Every cancelled job's whole row (to_jsonb), as first seen cancelled.
        self.cancelled_rows: dict[int, Any] = {}
        self.rows: list[dict[str, Any]] | None = None  # TABLE_QUERY's, read since the last change

    def table(self) -> list[dict[str, Any]]:
        """The rows of TABLE_QUERY, read once after each step that changed the database (self.call, unless
        told it only reads, and the rules' own statements forget them), for all the invariants."""
        if self.rows is None:
            self.rows = self.db.execute(TABLE_QUERY).fetchall()
        return self.rows

    # -- calling the database ---------------------------------------------------

    def call(self, query: str, params: Any = None, *, reads_only: bool = False) -> Call:
        if not reads_only:
            self.rows = None
        earliest = clock() - ROUNDING
        try:
            rows = self.db.execute(query, params).fetchall()
            sqlstate = error = None
        except psycopg.Error as raised:
            rows, sqlstate, error = [], raised.sqlstate, str(raised)
        return Call(rows, sqlstate, error, earliest, clock() + ROUNDING)

    @staticmethod
    def accepted(result: Call) -> dict[str, Any]:
        assert result.error is None, f"refused unexpectedly: {result.sqlstate} {result.error}"
        assert len(result.rows) == 1
        return result.rows[0]

    def refused(self, result: Call, job_id: int) -> None:
        """The call presented a lease that is not current: JQ001, or JQ002 for an unknown id."""
        expected = "JQ001" if job_id in self.jobs else "JQ002"
        assert result.sqlstate == expected, f"expected {expected}, got {result.sqlstate} {result.error}"

    @staticmethod
    def within(value: datetime, result: Call, offset: timedelta = timedelta(0)) -> datetime:
        """value, checked to be the call's statement_timestamp() plus offset."""
        assert result.earliest + offset <= value <= result.latest + offset, (
            f"{value} is not within [{result.earliest}, {result.latest}] + {offset}"
        )
        return value

    # -- the calls, each checked against the model and then applied to it -----------

    def complete(self, job_id: int, lease: int, given: Result | None = None) -> None:
        """jobq.complete, with the result given (None: no result); done also when a cancel was requested."""
        if given is None:
            result = self.call("SELECT jobq.complete(%s, %s)", (job_id, lease))
        else:
            result = self.call("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, given.jsonb()))
        job = self.jobs.get(job_id)
        if job is not None and job.holds(lease):
            self.accepted(result)
            job.status = "done"
            job.result = given
        elif job is not None and job.status == "done" and job.lease == lease:
            self.accepted(result)  # a repeat: the first result stays
        else:
            self.refused(result, job_id)

    def fail(self, job_id: int, lease: int) -> None:
        result = self.call("SELECT * FROM jobq.fail(%s, 'boom', %s)", (job_id, lease))
        job = self.jobs.get(job_id)
        if job is None or not job.holds(lease):
            self.refused(result, job_id)
            return
        row = self.accepted(result)
        if job.cancel_requested:
            job.status = "cancelled"  # never retried; run_at is kept
        elif job.attempts >= job.max_attempts:
            job.status = "failed"  # run_at is kept
        else:
            job.status = "queued"
            job.run_at = self.within(row["run_at"], result, backoff(job.attempts))
        assert (row["status"], row["attempts"], row["lease"], row["run_at"]) == (
            job.status,
            job.attempts,
            job.lease,
            job.run_at,
        )

    def heartbeat(self, job_id: int, lease: int) -> None:
        result = self.call("SELECT jobq.heartbeat(%s, %s) AS locked_at", (job_id, lease))
        job = self.jobs.get(job_id)
        if job is None or not job.holds(lease):
            self.refused(result, job_id)
            return
        assert job.locked_at is not None and job.lease_expires_at is not None
        length = job.lease_expires_at - job.locked_at  # the lease's own length, again
        job.locked_at = self.within(self.accepted(result)["locked_at"], result)
        job.lease_expires_at = job.locked_at + length

    def release(self, job_id: int, lease: int) -> None:
        result = self.call("SELECT jobq.release(%s, %s)", (job_id, lease))
        job = self.jobs.get(job_id)
        if job is None or not job.holds(lease):
            self.refused(result, job_id)
            return
        self.accepted(result)
        if job.cancel_requested:
            job.status = "cancelled"  # the attempt counted
        else:
            job.status = "queued"  # run_at, locked_at and locked_by are kept; the lease is spent
            job.attempts -= 1

    def snooze(self, job_id: int, lease: int, seconds: int = 0) -> None:
        """jobq.snooze: queued again after the delay, the attempt not counted; cancelled (NULL) when a
        cancel was requested."""
        result = self.call(
            "SELECT jobq.snooze(%s, %s, %s) AS run_at", (job_id, lease, timedelta(seconds=seconds))
        )
        job = self.jobs.get(job_id)
        if job is None or not job.holds(lease):
            self.refused(result, job_id)
            return
        run_at = self.accepted(result)["run_at"]
        if job.cancel_requested:
            assert run_at is None
            job.status = "cancelled"  # run_at and attempts are kept
        else:
            job.status = "queued"
            job.run_at = self.within(run_at, result, timedelta(seconds=seconds))
            job.attempts -= 1
            job.snoozed = True

    def holder(self, key: str) -> ModelJob | None:
        """The job holding the unique key, if any (at most one: see no_two_jobs_share_a_unique_key)."""
        return next((job for job in self.jobs.values() if job.holds_key(key)), None)

    def take_key(self, job: ModelJob, key: str, scope: str | None) -> None:
        """The job takes the key (a new job, or a failed one redriven): no other job owns it from now on."""
        for other in self.jobs.values():
            if other.unique_key == key and other.owns_key and other is not job:
                other.owns_key, other.unique_scope = False, None
        job.unique_key, job.unique_scope, job.owns_key = key, scope, True

    def enqueue(self, new: NewJob) -> int | None:
        """jobq.enqueue with new's options; the id of the job inserted, None when a unique key's holder
        was returned (checked to be its id) or the enqueue skipped (checked to return NULL)."""
        run_at = None if new.delay is None else clock() + timedelta(seconds=new.delay)
        options: dict[str, Any] = {"priority": new.priority, "max_attempts": new.max_attempts}
        if run_at is not None:
            options["run_at"] = run_at
        if new.unique is not None:
            options |= {
                "unique_key": new.unique.key,
                "unique_scope": new.unique.scope,
                "on_conflict": new.unique.on_conflict,
            }
        named = ", ".join(f"{name} => %({name})s" for name in options)
        result = self.call(
            f"SELECT jobq.enqueue(%(queue)s, %(payload)s, {named}) AS id",
            {"queue": QUEUE, "payload": Jsonb({}), **options},
        )
        job_id = self.accepted(result)["id"]
        holder = None if new.unique is None else self.holder(new.unique.key)
        if holder is not None:
            assert new.unique is not None
            assert job_id == (holder.id if new.unique.on_conflict == "return" else None), (
                f"enqueue of key {new.unique.key} held by job {holder.id} returned {job_id}"
            )
            return None
        assert isinstance(job_id, int) and job_id not in self.jobs
        stored = self.db.execute("SELECT run_at FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
        assert stored is not None
        if run_at is None:  # the default, now()
            run_at = self.within(stored["run_at"], result)
        job = ModelJob(job_id, new.priority, new.max_attempts, run_at)
        if new.unique is not None:
            self.take_key(job, new.unique.key, None if new.unique.scope == "active" else new.unique.scope)
        self.jobs[job_id] = job
        return job_id

    def start(self, jobs: list[NewJob]) -> list[int]:
        """An empty table and no queue settings (so not paused), then these jobs enqueued; their ids."""
        self.db.execute("DELETE FROM jobq.jobs")
        self.db.execute("DELETE FROM jobq.queue_settings")
        self.jobs, self.observed, self.cancelled_rows, self.paused, self.rows = {}, {}, {}, False, None
        ids = [self.enqueue(new) for new in jobs]
        return [job_id for job_id in ids if job_id is not None]

    def claim_jobs(self, n: int, worker: str, lease_seconds: int | None = None) -> list[Pair]:
        """jobq.claim(QUEUE, n, worker[, lease_timeout]); the (id, lease) pairs handed out."""
        waiting = self.waiting()
        if lease_seconds is None:
            result = self.call("SELECT * FROM jobq.claim(%s, %s, %s)", (QUEUE, n, worker))
        else:
            result = self.call(
                "SELECT * FROM jobq.claim(%s, %s, %s, lease_timeout => %s)",
                (QUEUE, n, worker, timedelta(seconds=lease_seconds)),
            )
        assert result.error is None, result.error
        return self.claimed(result.rows, result, waiting, n, worker, lease_seconds)

    def waiting(self) -> list[ModelJob]:
        """The queued jobs, in claim order (priority desc, run_at, id)."""
        queued = (job for job in self.jobs.values() if job.status == "queued")
        return sorted(queued, key=lambda job: (-job.priority, job.run_at, job.id))

    def claimed(
        self,
        rows: list[dict[str, Any]],
        result: Call,
        waiting: list[ModelJob],
        n: int,
        worker: str,
        lease_seconds: int | None,
    ) -> list[Pair]:
        """Checks the rows a claim returned against the model and applies them; the new (id, lease) pairs."""
        claimed = [row["id"] for row in rows]
        runnable = [
            job.id
            for job in waiting
            if not self.paused
            and (job.run_at <= result.earliest or (job.run_at <= result.latest and job.id in claimed))
        ]
        assert claimed == runnable[:n], f"claimed {claimed}, expected the first {n} of {runnable}"

        pairs: list[Pair] = []
        for row in rows:
            job = self.jobs[row["id"]]
            job.attempts_before_claim, job.snoozed = job.attempts, False
            job.status = "running"
            job.attempts += 1
            job.lease += 1
            job.locked_by = worker
            job.locked_at = self.within(row["locked_at"], result)
            job.lease_expires_at = job.locked_at + (
                DEFAULT_LEASE if lease_seconds is None else timedelta(seconds=lease_seconds)
            )
            assert (row["status"], row["attempts"], row["lease"], row["locked_by"]) == (
                "running",
                job.attempts,
                job.lease,
                worker,
            )
            pairs.append((job.id, job.lease))
        return pairs

    def acknowledgeable(self, pairs: list[Pair]) -> list[int]:
        """The ids complete_many must acknowledge, ascending: running, or done, under the lease given."""
        return sorted(
            {
                job_id
                for job_id, lease in pairs
                if job_id in self.jobs
                and self.jobs[job_id].lease == lease
                and self.jobs[job_id].status in ("running", "done")
            }
        )

    def reap(self, stale: timedelta | None) -> None:
        """jobq.reap(stale): the jobs whose own lease expired, and, when stale is given, older than stale."""
        running = sorted(
            (job for job in self.jobs.values() if job.status == "running"), key=lambda job: job.id
        )
        result = self.call("SELECT * FROM jobq.reap(%s)", (stale,))
        assert result.error is None, result.error
        reaped = [row["id"] for row in result.rows]

        def expired(job: ModelJob) -> bool:
            locked_at, expires_at = job.locked_at, job.lease_expires_at
            assert locked_at is not None and expires_at is not None

            def at(moment: datetime) -> bool:
                return expires_at < moment and (stale is None or locked_at < moment - stale)

            return at(result.earliest) or (at(result.latest) and job.id in reaped)

        assert reaped == [job.id for job in running if expired(job)]

        for row in result.rows:
            job = self.jobs[row["id"]]
            if job.cancel_requested:
                job.status = "cancelled"  # run_at is kept
            elif job.attempts >= job.max_attempts:
                job.status = "failed"  # run_at is kept
            else:
                job.status = "queued"
                job.run_at = self.within(row["run_at"], result, backoff(job.attempts))
            assert (row["status"], row["attempts"], row["lease"], row["run_at"], row["locked_at"]) == (
                job.status,
                job.attempts,
                job.lease,
                job.run_at,
                job.locked_at,
            )

    def operation(self, name: str) -> Callable[[int, int], None]:
        operations: dict[str, Callable[[int, int], None]] = {
            "complete": self.complete,
            "fail": self.fail,
            "heartbeat": self.heartbeat,
            "release": self.release,
            "snooze": self.snooze,  # for 0 seconds
        }
        return operations[name]

    # -- rules --------------------------------------------------------------------

    @initialize(target=job_ids, jobs=st.lists(NEW_JOBS, min_size=1, max_size=3))
    def start_from_a_few_queued_jobs(self, jobs: list[NewJob]) -> MultipleResults[int]:
        return multiple(*self.start(jobs))

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(target=job_ids, new=NEW_JOBS)
    def enqueue_a_job(self, new: NewJob) -> int:
        job_id = self.enqueue(new)
        assert job_id is not None
        return job_id

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(target=job_ids, new=UNIQUE_JOBS)
    def enqueue_a_unique_job(self, new: NewJob) -> MultipleResults[int]:
        """A key held (queued, running, or done until_done) returns the holder or skips; else a new job."""
        job_id = self.enqueue(new)
        return multiple() if job_id is None else multiple(job_id)

    @rule(
        target=leases,
        n=st.integers(1, 3),
        worker=st.sampled_from(WORKERS),
        lease_seconds=st.sampled_from(LEASE_SECONDS),
    )
    def claim(self, n: int, worker: str, lease_seconds: int | None) -> MultipleResults[Pair]:
        return multiple(*self.claim_jobs(n, worker, lease_seconds))

    @rule(pair=leases, operation=st.sampled_from(OPERATIONS))
    def act_with_a_claimed_lease(self, pair: Pair, operation: str) -> None:
        """The current lease of the job, or a stale one: from before a reap, a failure, a release."""
        self.operation(operation)(*pair)

    @rule(
        job_id=job_ids | st.sampled_from(UNKNOWN_IDS),
        operation=st.sampled_from(OPERATIONS),
        offset=st.sampled_from((-1, 0, 1)),
    )
    def act_with_a_lease_near_the_current_one(self, job_id: int, operation: str, offset: int) -> None:
        """The current lease of a job in any state, the one before it (-1 before any claim), the next one
        (never issued yet), or an id no job has."""
        job = self.jobs.get(job_id)
        self.operation(operation)(job_id, (job.lease if job is not None else 1) + offset)

    @precondition(lambda self: any(job.status == "running" for job in self.jobs.values()))
    @rule(which=st.integers(0, MAX_JOBS - 1), operation=st.sampled_from(OPERATIONS))
    def act_on_a_running_job(self, which: int, operation: str) -> None:
        """The current lease of a running job: the bundle of leases holds mostly stale ones, so this is what
        takes a job whose cancel was requested on to its end (cancelled by fail, release and snooze)."""
        running = sorted(job.id for job in self.jobs.values() if job.status == "running")
        job = self.jobs[running[which % len(running)]]
        self.operation(operation)(job.id, job.lease)

    @rule(pair=leases, given=RESULTS)
    def complete_with_a_result(self, pair: Pair, given: Result | None) -> None:
        self.complete(*pair, given)

    @rule(pair=leases, seconds=st.sampled_from(SNOOZE_SECONDS))
    def snooze_a_claimed_job(self, pair: Pair, seconds: int) -> None:
        self.snooze(*pair, seconds)

    @rule(
        pairs=st.lists(leases, max_size=4),
        with_unknown_id=st.booleans(),
        results=st.none() | st.lists(RESULTS, min_size=5, max_size=5),
    )
    def complete_many(
        self, pairs: list[Pair], with_unknown_id: bool, results: list[Result | None] | None = None
    ) -> None:
        """Without results, or with one for each pair (some NULL: no result)."""
        if with_unknown_id:
            pairs = [*pairs, (UNKNOWN_IDS[-1], 1)]
        acknowledged = self.acknowledgeable(pairs)
        ids, presented = [job_id for job_id, _ in pairs], [lease for _, lease in pairs]
        if results is None:
            result = self.call(
                "SELECT c.id FROM jobq.complete_many(%s::bigint[], %s::bigint[]) AS c(id)", (ids, presented)
            )
        else:
            results = results[: len(pairs)]
            result = self.call(
                "SELECT c.id FROM jobq.complete_many(%s::bigint[], %s::bigint[], %s::jsonb[]) AS c(id)",
                (ids, presented, [None if given is None else given.jsonb() for given in results]),
            )
        assert result.error is None, result.error
        assert [row["id"] for row in result.rows] == acknowledged
        for job_id in acknowledged:
            job = self.jobs[job_id]
            if job.status == "done":
                continue  # a repeat: the first result stays
            job.status = "done"
            # A job named twice under its lease is done once, with one of the results given for it.
            candidates = {
                None if results is None else results[position]
                for position, pair in enumerate(pairs)
                if pair == (job_id, job.lease)
            }
            if len(candidates) == 1:
                [job.result] = candidates
            else:
                [stored] = self.db.execute(
                    "SELECT s.result IS NULL AS no_result, s.result FROM jobq.job(%s) AS s", (job_id,)
                ).fetchall()
                job.result = None if stored["no_result"] else Result.of(stored["result"])
                assert job.result in candidates, (
                    f"job {job_id} stored {job.result}, given one of {candidates}"
                )

    @rule(
        ids=st.lists(job_ids | st.sampled_from(UNKNOWN_IDS), max_size=3),
        force=st.booleans(),
        running=st.none() | st.integers(0, MAX_JOBS - 1),
    )
    def cancel(self, ids: list[int], force: bool, running: int | None = None) -> None:
        """Queued jobs cancelled; running ones asked (or cancelled, with force); finished ones unchanged.
        running: also a running job, if any (the bundle's jobs are mostly queued or finished)."""
        held = sorted(job.id for job in self.jobs.values() if job.status == "running")
        if running is not None and held:
            ids = [*ids, held[running % len(held)]]
        result = self.call("SELECT id, status FROM jobq.cancel(%s::bigint[], force => %s)", (ids, force))
        assert result.error is None, result.error
        expected = []
        for job_id in sorted(set(ids) & set(self.jobs)):  # unknown ids are left out
            job = self.jobs[job_id]
            if job.status == "running":
                job.cancel_requested = True  # only a running job is asked (force: as it is cancelled)
            if job.status == "queued" or (job.status == "running" and force):
                job.status = "cancelled"
            expected.append((job_id, "cancel_requested" if job.status == "running" else job.status))
        assert [(row["id"], row["status"]) for row in result.rows] == expected

    def pause(self) -> None:
        self.accepted(self.call("SELECT jobq.pause(%s)", (QUEUE,)))
        self.paused = True

    def resume(self) -> None:
        self.accepted(self.call("SELECT jobq.resume(%s)", (QUEUE,)))
        self.paused = False

    # One rule for both, so that no example pauses the queue for good (Hypothesis leaves a random subset
    # of the rules out of each example), and resuming twice as likely, so that the queue is paused in a
    # third of the steps at most and the claims still reach deep states.  Pausing a paused queue and
    # resuming a running one are no-ops.
    @rule(pausing=st.sampled_from((True, False, False)))
    def pause_or_resume(self, pausing: bool) -> None:
        if pausing:
            self.pause()
        else:
            self.resume()

    @rule(
        target=leases,
        pairs=st.lists(leases, max_size=3),
        n=st.integers(1, 3),
        worker=st.sampled_from(WORKERS),
        lease_seconds=st.sampled_from(LEASE_SECONDS),
    )
    def complete_and_claim(
        self, pairs: list[Pair], n: int, worker: str, lease_seconds: int | None
    ) -> MultipleResults[Pair]:
        """A worker's loop: acknowledge finished jobs (stale pairs are left out), claim the next ones."""
        acknowledged = self.acknowledgeable(pairs)
        waiting = self.waiting()
        result = self.call(
            "SELECT * FROM jobq.complete_and_claim(%s::bigint[], %s::bigint[], %s, %s, %s, %s)",
            (
                [job_id for job_id, _ in pairs],
                [lease for _, lease in pairs],
                QUEUE,
                n,
                worker,
                timedelta(seconds=lease_seconds if lease_seconds is not None else 60),
            ),
        )
        assert result.error is None, result.error
        acks, claims = result.rows[: len(acknowledged)], result.rows[len(acknowledged) :]
        assert [(row["id"], row["status"]) for row in acks] == [(job_id, "done") for job_id in acknowledged]
        for job_id in acknowledged:
            self.jobs[job_id].status = "done"
        return multiple(*self.claimed(claims, result, waiting, n, worker, lease_seconds))

    @rule(queue=st.sampled_from((None, QUEUE, EMPTY_QUEUE)))
    def retry_failed(self, queue: str | None) -> None:
        """Failed jobs back to queued; one enqueued with a unique key only while the key is still its own (no
        newer job took it since, even one that no longer holds it): it stays failed for good otherwise."""
        expected = [
            job.id
            for job in sorted(self.jobs.values(), key=lambda job: job.id)
            if job.status == "failed" and queue in (None, QUEUE) and (job.unique_key is None or job.owns_key)
        ]
        result = self.call("SELECT r.id FROM jobq.retry_failed(queue => %s::text) AS r(id)", (queue,))
        assert result.error is None, result.error
        assert [row["id"] for row in result.rows] == expected
        redriven = self.db.execute(
            "SELECT id, run_at FROM jobq.jobs WHERE id = ANY(%s::bigint[]) ORDER BY id", (expected,)
        ).fetchall()
        for row in redriven:
            job = self.jobs[row["id"]]
            job.status = "queued"  # the lease is kept, so the old leases stay refused
            job.attempts = 0
            job.run_at = self.within(row["run_at"], result)

    @rule(
        seconds=st.sampled_from((0, 1, 3, 10, 60, 400)),
        reaper=st.sampled_from((None, "by expiry", 2, 100)),
    )
    def time_passes(self, seconds: int, reaper: str | int | None) -> None:
        """Every job moves that many seconds into the past (backoffs run out, leases age), then the reaper
        may run: jobq.reap() ("by expiry"), or jobq.reap(stale) with stale that many seconds."""
        shift = timedelta(seconds=seconds)
        self.rows = None
        self.db.execute(
            "UPDATE jobq.jobs SET run_at = run_at - %(shift)s, locked_at = locked_at - %(shift)s,"
            " lease_expires_at = lease_expires_at - %(shift)s WHERE status <> 'cancelled'",
            {"shift": shift},
        )
        for job in self.jobs.values():
            if job.status == "cancelled":
                continue  # left alone: a cancelled job never changes again
            job.run_at -= shift
            if job.locked_at is not None and job.lease_expires_at is not None:
                job.locked_at -= shift
                job.lease_expires_at -= shift
        if reaper is not None:
            self.reap(None if reaper == "by expiry" else timedelta(seconds=int(reaper)))

    # -- invariants -----------------------------------------------------------------

    def check_every_invariant(self) -> None:
        """What Hypothesis runs after every step, for scripted runs."""
        self.the_table_equals_the_model()
        self.only_the_current_lease_of_a_job_is_accepted()
        self.every_change_is_an_allowed_transition()
        self.stats_count_what_the_model_holds()
        self.no_two_jobs_share_a_unique_key_in_its_scope()
        self.a_cancelled_job_never_changes_again()
        self.a_snoozed_job_has_the_attempts_it_had_before_its_claim()
        self.a_paused_queue_hands_out_nothing()
        self.every_stored_result_is_the_one_completed_with()

    @invariant()
    def the_table_equals_the_model(self) -> None:
        rows = [{column: row[column] for column in MODEL_COLUMNS} for row in self.table()]
        assert rows == [self.jobs[job_id].row() for job_id in sorted(self.jobs)]

    @invariant()
    def only_the_current_lease_of_a_job_is_accepted(self) -> None:
        """Of every lease ever issued, 0 and the next one, complete_many accepts none but the current one of a
        running or done job (which the rules present).  Refusing changes nothing: no transaction needed."""
        others = [
            (job.id, lease)
            for job in self.jobs.values()
            for lease in range(job.lease + 2)
            if lease != job.lease or job.status not in ("running", "done")
        ]
        acknowledged = self.db.execute(
            "SELECT c.id FROM jobq.complete_many(%s::bigint[], %s::bigint[]) AS c(id)",
            ([job_id for job_id, _ in others], [lease for _, lease in others]),
        ).fetchall()
        assert acknowledged == []

    @invariant()
    def every_change_is_an_allowed_transition(self) -> None:
        """Against the states after the previous step.  Judged on the model, which the_table_equals_the_model
        holds equal to the table after every step, so a wrong transition made by both is caught here."""
        now = {job.id: (job.status, job.lease) for job in self.jobs.values()}
        assert set(self.observed) <= set(now), "a job disappeared"
        for job_id, (status, lease) in now.items():
            before_status, before_lease = self.observed.get(job_id, ("queued", 0))
            if lease != before_lease:
                assert (before_status, status, lease) == ("queued", "running", before_lease + 1)
            elif status != before_status:
                assert (before_status, status) in ALLOWED_WITHOUT_CLAIM
        for job in self.jobs.values():
            if job.status in ("queued", "running"):
                assert 0 <= job.attempts <= job.max_attempts
        self.observed = now

    @invariant()
    def stats_count_what_the_model_holds(self) -> None:
        result = self.call(
            "SELECT queue, queued, runnable, running, done, failed, cancelled"
            " FROM jobq.stats() ORDER BY queue",
            reads_only=True,
        )
        assert result.error is None, result.error
        assert [row["queue"] for row in result.rows] == ([QUEUE] if self.jobs else [])
        for row in result.rows:
            counts = Counter(job.status for job in self.jobs.values())
            assert (row["queued"], row["running"], row["done"], row["failed"], row["cancelled"]) == (
                counts["queued"],
                counts["running"],
                counts["done"],
                counts["failed"],
                counts["cancelled"],
            )
            queued = [job for job in self.jobs.values() if job.status == "queued"]
            surely = sum(job.run_at <= result.earliest for job in queued)
            possibly = sum(job.run_at <= result.latest for job in queued)
            assert surely <= row["runnable"] <= possibly

    @invariant()
    def no_two_jobs_share_a_unique_key_in_its_scope(self) -> None:
        """In the model (what the rules expect), and in the database by its behaviour: an enqueue of each key,
        rolled back, returns the model's holder (on_conflict 'return'), or a new job when the key is free."""
        holders = [
            (job.unique_key, job.id)
            for job in self.jobs.values()
            if job.unique_key and job.holds_key(job.unique_key)
        ]
        assert all(count == 1 for count in Counter(key for key, _ in holders).values()), sorted(holders)
        if not any(job.unique_key for job in self.jobs.values()):
            return
        with self.db.transaction(force_rollback=True):
            [row] = self.db.execute(
                "SELECT "
                + ", ".join(
                    f"jobq.enqueue(%(queue)s, '{{}}', unique_key => '{key}') AS {key}" for key in KEYS
                ),
                {"queue": QUEUE},
            ).fetchall()
        for key in KEYS:
            holder = self.holder(key)
            if holder is None:
                assert row[key] not in self.jobs, f"key {key} is free, yet enqueue returned job {row[key]}"
            else:
                assert row[key] == holder.id, (
                    f"key {key} is held by job {holder.id}, enqueue returned {row[key]}"
                )

    @invariant()
    def a_cancelled_job_never_changes_again(self) -> None:
        """Every column of a cancelled job's row stays as it was when it was first seen cancelled."""
        now = {row["id"]: row["whole"] for row in self.table() if row["status"] == "cancelled"}
        for job_id, before in self.cancelled_rows.items():
            assert now.get(job_id) == before, f"cancelled job {job_id} changed: {before} -> {now.get(job_id)}"
        self.cancelled_rows = now

    @invariant()
    def a_snoozed_job_has_the_attempts_it_had_before_its_claim(self) -> None:
        """Until it is claimed again (queued, or cancelled since); attempts_before_claim is the model's
        attempts, which the_table_equals_the_model held equal to the table's, when the claim was made."""
        for row in self.table():
            job = self.jobs[row["id"]]
            if job.snoozed:
                assert row["status"] in ("queued", "cancelled")
                assert row["attempts"] == job.attempts_before_claim, (
                    f"job {job.id} snoozed: attempts {row['attempts']},"
                    f" {job.attempts_before_claim} before the claim it was snoozed from"
                )

    @invariant()
    def a_paused_queue_hands_out_nothing(self) -> None:
        """jobq.queues shows the flag; while it is set, a claim returns nothing, whatever is queued (a claim
        that returns nothing changes nothing, so the probe needs no transaction)."""
        probe = "(SELECT count(*) FROM jobq.claim(%(queue)s, 1000, 'probe'))" if self.paused else "NULL"
        [row] = self.db.execute(
            "SELECT (SELECT q.paused FROM jobq.queues AS q WHERE q.queue = %(queue)s) AS paused,"
            f" {probe}::bigint AS claimed",
            {"queue": QUEUE},
        ).fetchall()
        # NULL when the queue is not listed: neither configured (paused or resumed) nor holding jobs
        assert row["paused"] is True if self.paused else row["paused"] in (None, False)
        assert row["claimed"] == (0 if self.paused else None)

    @invariant()
    def every_stored_result_is_the_one_completed_with(self) -> None:
        """Read through jobq.job, the public lookup, which also reports the status and the cancel request."""
        assert [
            (
                row["id"],
                row["looked_up_status"],
                None if row["looked_up_no_result"] else Result.of(row["looked_up_result"]),
                row["looked_up_cancel_requested"],
            )
            for row in self.table()
        ] == [(job.id, job.status, job.result, job.cancel_requested) for _, job in sorted(self.jobs.items())]


def test_random_sequences_of_calls_agree_with_the_model(dsn: str, target: Target) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:

        class Machine(QueueMachine):
            def __init__(self) -> None:
                super().__init__(db)

        run_state_machine_as_test(
            Machine,
            settings=settings(
                database=None,
                max_examples=EXAMPLES if target.major is None else EXAMPLES_ON_OTHER_MAJORS,
                stateful_step_count=STEPS,
                # Timings are not ours to assert: a busy machine is slow, not wrong.
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


# -- scripted runs --------------------------------------------------------------------
# The same machine driven through a fixed sequence, every invariant checked after every step, so that
# the paths the random run reaches only now and then are proven on every run.


class Script:
    """Runs one rule of the machine at a time and then checks every invariant, as Hypothesis does."""

    def __init__(self, machine: QueueMachine) -> None:
        self.machine = machine

    def __call__(self, step: Callable[..., T], *arguments: Any) -> T:
        result = step(*arguments)
        self.machine.check_every_invariant()
        return result


@contextmanager
def scripted(dsn: str) -> Iterator[tuple[QueueMachine, Script]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:
        machine = QueueMachine(db)
        yield machine, Script(machine)


def test_failing_at_max_attempts_fails_the_job_for_good_until_retry_failed(dsn: str) -> None:
    with scripted(dsn) as (machine, step):
        [job_id] = step(machine.start, [NewJob(priority=0, max_attempts=2, delay=None)])
        [released] = step(machine.claim_jobs, 1, "w1")
        step(machine.act_with_a_claimed_lease, released, "release")  # the attempt does not count
        assert machine.jobs[job_id].attempts == 0
        [first] = step(machine.claim_jobs, 1, "w1")
        step(machine.act_with_a_claimed_lease, first, "fail")
        assert machine.jobs[job_id].status == "queued"
        assert step(machine.claim_jobs, 1, "w1") == []  # backing off
        step(machine.time_passes, 3, None)
        [second] = step(machine.claim_jobs, 1, "w2")
        step(machine.act_with_a_claimed_lease, second, "fail")
        assert machine.jobs[job_id].status == "failed"

        for operation in OPERATIONS:  # every lease refused with JQ001
            for pair in (released, first, second):
                step(machine.act_with_a_claimed_lease, pair, operation)
        step(machine.retry_failed, EMPTY_QUEUE)
        assert machine.jobs[job_id].status == "failed"
        step(machine.retry_failed, None)
        assert (machine.jobs[job_id].status, machine.jobs[job_id].attempts) == ("queued", 0)
        [third] = step(machine.claim_jobs, 1, "w1")
        step(machine.act_with_a_claimed_lease, second, "complete")  # refused
        step(machine.act_with_a_claimed_lease, third, "complete")
        step(machine.act_with_a_claimed_lease, third, "complete")  # a repeat: accepted
        assert machine.jobs[job_id].status == "done"


def test_reaping_at_max_attempts_fails_the_job_and_every_reaped_lease_stays_refused(dsn: str) -> None:
    with scripted(dsn) as (machine, step):
        [job_id] = step(machine.start, [NewJob(priority=0, max_attempts=2, delay=None)])
        [first] = step(machine.claim_jobs, 1, "w1", 5)
        step(machine.time_passes, 3, "by expiry")  # 3 s into a 5 s lease: left alone
        assert machine.jobs[job_id].status == "running"
        step(machine.time_passes, 3, 100)  # expired, but not 100 s old: stale holds the reaper back
        assert machine.jobs[job_id].status == "running"
        step(machine.time_passes, 0, "by expiry")  # expired: reaped
        assert machine.jobs[job_id].status == "queued"
        step(machine.act_with_a_claimed_lease, first, "complete")  # refused: reaped

        step(machine.time_passes, 3, None)  # the backoff runs out
        [second] = step(machine.claim_jobs, 1, "w2", 300)
        step(machine.time_passes, 60, "by expiry")  # a minute into five: left alone
        assert machine.jobs[job_id].status == "running"
        step(machine.time_passes, 200, None)
        step(machine.act_with_a_claimed_lease, second, "heartbeat")  # five more minutes from now
        step(machine.time_passes, 290, "by expiry")
        assert machine.jobs[job_id].status == "running"
        step(machine.time_passes, 20, "by expiry")
        assert machine.jobs[job_id].status == "failed"

        for operation in OPERATIONS:
            step(machine.act_with_a_claimed_lease, first, operation)
            step(machine.act_with_a_claimed_lease, second, operation)
        step(machine.complete_many, [first, second], True)  # acknowledges nothing
        step(machine.retry_failed, QUEUE)
        assert (machine.jobs[job_id].status, machine.jobs[job_id].attempts) == ("queued", 0)


def test_a_key_held_until_done_a_cancel_request_honoured_by_snooze_and_a_paused_queue(dsn: str) -> None:
    with scripted(dsn) as (machine, step):
        keyed = NewJob(priority=0, max_attempts=2, delay=None, unique=Unique("k1", "until_done", "return"))
        [job_id] = step(machine.start, [keyed])
        assert step(machine.enqueue, keyed) is None  # the holder's id returned
        assert step(machine.enqueue, replace(keyed, unique=Unique("k1", "active", "skip"))) is None  # NULL
        [first] = step(machine.claim_jobs, 1, "w1")
        step(machine.cancel, [job_id], False)  # the worker is asked; the job runs on
        assert (machine.jobs[job_id].status, machine.jobs[job_id].cancel_requested) == ("running", True)
        step(machine.act_with_a_claimed_lease, first, "heartbeat")  # still held
        step(machine.snooze_a_claimed_job, first, 30)  # the request honoured: cancelled, not snoozed
        assert machine.jobs[job_id].status == "cancelled"
        for operation in OPERATIONS:  # every call with its lease refused (JQ001)
            step(machine.act_with_a_claimed_lease, first, operation)
        step(machine.cancel, [job_id], True)  # already cancelled: unchanged
        step(machine.time_passes, 60, "by expiry")

        second = step(machine.enqueue, keyed)  # a cancelled job holds no key
        assert second is not None
        step(machine.pause)
        assert step(machine.claim_jobs, 1, "w1") == []
        step(machine.complete_and_claim, [first], 1, "w1", None)  # claims nothing either
        step(machine.resume)
        [held] = step(machine.claim_jobs, 1, "w2")
        assert held[0] == second
        step(machine.complete_with_a_result, held, Result.of(None))  # JSON null: a result
        step(machine.complete_with_a_result, held, Result.of({"x": 1}))  # a repeat: the first result stays
        assert machine.jobs[second].result == Result.of(None)
        assert step(machine.enqueue, keyed) is None  # done, until_done: still the holder
        step(machine.cancel, [second, job_id, UNKNOWN_IDS[0]], True)  # finished: unchanged; unknown: left out


def test_cancel_requests_honoured_by_fail_and_the_reaper_a_force_cancel_and_a_redrive_of_a_held_key(
    dsn: str,
) -> None:
    with scripted(dsn) as (machine, step):
        keyed = NewJob(priority=0, max_attempts=1, delay=None, unique=Unique("k2", "active", "return"))
        [old] = step(machine.start, [keyed])
        [lease] = step(machine.claim_jobs, 1, "w1")
        step(machine.act_with_a_claimed_lease, lease, "fail")  # failed for good
        new = step(machine.enqueue, keyed)  # a failed job holds no key
        assert new is not None
        step(machine.retry_failed, None)  # old stays failed: new holds its key
        assert machine.jobs[old].status == "failed"

        [reaped] = step(machine.claim_jobs, 1, "w1", 5)
        step(machine.cancel, [new], False)
        step(machine.time_passes, 10, "by expiry")  # its lease expired: reaped, and so cancelled
        assert machine.jobs[new].status == "cancelled"
        step(machine.retry_failed, QUEUE)  # the key is free, but a newer job took it: old stays failed
        assert machine.jobs[old].status == "failed"

        third = step(machine.enqueue, keyed)  # the key is free again: a new job takes it
        assert third is not None
        [forced] = step(machine.claim_jobs, 1, "w2")
        step(machine.cancel, [third], True)  # cancelled at once, its lease fenced
        for operation in OPERATIONS:
            step(machine.act_with_a_claimed_lease, forced, operation)
        step(machine.complete_many, [forced, reaped], True, None)  # acknowledges nothing

        plain = step(machine.enqueue, NewJob(priority=1, max_attempts=3, delay=None))
        assert plain is not None
        [failing] = step(machine.claim_jobs, 1, "w1")
        step(machine.cancel, [plain], False)
        # the request honoured: cancelled, not retried
        step(machine.act_with_a_claimed_lease, failing, "fail")
        assert machine.jobs[plain].status == "cancelled"


def test_complete_many_stores_the_result_of_the_pair_that_acknowledged_the_job(dsn: str) -> None:
    with scripted(dsn) as (machine, step):
        [first_job, second_job] = step(machine.start, [NewJob(0, 3, None), NewJob(0, 3, None)])
        [stale] = step(machine.claim_jobs, 1, "w1")
        step(machine.act_with_a_claimed_lease, stale, "release")
        [current] = step(machine.claim_jobs, 1, "w2")
        assert stale[0] == current[0] == first_job
        # the stale pair is left out, its result with it: the job is done without a result
        step(machine.complete_many, [stale, current], False, [Result.of("stale"), None])
        assert machine.jobs[first_job].result is None
        [twice] = step(machine.claim_jobs, 1, "w1")
        assert twice[0] == second_job
        # named twice under its lease, with two results: done once, with one of them
        step(machine.complete_many, [twice, twice], False, [Result.of(1), Result.of(2)])
