"""Property test of the SQL API: a Hypothesis state machine against a model of the queue.

The rules call jobq.enqueue, claim, complete, complete_many, complete_and_claim, fail, heartbeat,
release, reap and retry_failed on one connection: with the current lease, with stale ones (from before
a later claim, a reap, a failure or a release), with leases never issued and with unknown ids.  A
plain Python model predicts every outcome (success, JQ001 lease not current, JQ002 no such job) and
every row.  After every step the invariants compare the whole table with the model (status, lease,
attempts, the exact run_at, locked_at and lease expiry, ...), prove that only the current lease of a job is
accepted, check that every change was an allowed transition (the lease only ever grows, by one, at a
claim; done is final; attempts stay within max_attempts), and compare jobq.stats() with the model.

Time is real (claim, heartbeat, fail and reap use statement_timestamp()) and nothing sleeps.  A rule
moves time forward by backdating every row's run_at, locked_at and lease_expires_at.  Claims take
leases of different lengths, so the reaper must judge each job by its own.  A time the database sets is read
back and checked to lie within the window of the call that set it ([just before the call, just after
it], give or take a millisecond of rounding); from then on the model knows it exactly.  A comparison
with "now" is judged against the window of the call that makes it: only a time inside that window
(milliseconds) leaves the outcome open, and then either answer is accepted.

Hypothesis runs the machine on fresh random sequences every time.  Two scripted runs drive the same
machine, invariants and all, through fixed sequences: a job failed for good at max_attempts by fail
and by the reaper, its old leases refused, redriven by retry_failed.  The random run reaches those
paths in most runs but not in every one, so they are proven on every run by the scripts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

from helpers.sqlhelpers import Db

Pair: TypeAlias = tuple[int, int]
"""A job id and a lease, as claim hands them out."""
T = TypeVar("T")

QUEUE = "alpha"
EMPTY_QUEUE = "beta"  # never has a job: retry_failed naming it redrives nothing
WORKERS = ("w1", "w2")
OPERATIONS = ("complete", "fail", "heartbeat", "release")
MAX_JOBS = 6
# No job ever has these ids: 0 and negatives are never drawn from the sequence, and the largest
# bigint is far beyond anything this test enqueues.
UNKNOWN_IDS = (0, -7, 2**63 - 1)
# The lease lengths claims ask for (None: claim's default, 60 seconds).
LEASE_SECONDS = (None, 5, 60, 300)
DEFAULT_LEASE = timedelta(seconds=60)
# Python and PostgreSQL read the same clock, each rounded to the microsecond.
ROUNDING = timedelta(milliseconds=1)

# The random run: this many examples of at most this many steps.  Long examples reach deep states (a
# job reaped, claimed again, failed for good, redriven); Hypothesis disables a random subset of the
# rules in each example ("swarm testing"), so many short ones would mostly stay shallow.
EXAMPLES = 20
STEPS = 100


def clock() -> datetime:
    return datetime.now(timezone.utc)


def backoff(attempts: int) -> timedelta:
    """The retry delay after this many attempts, as jobq._backoff computes it."""
    return timedelta(seconds=min(300, 2**attempts))


@dataclass(frozen=True)
class NewJob:
    """The options of a job to enqueue; delay: seconds from now, or None for the default run_at (now())."""

    priority: int
    max_attempts: int
    delay: int | None


NEW_JOBS = st.builds(
    NewJob,
    priority=st.sampled_from((0, 1)),
    max_attempts=st.integers(1, 3),
    delay=st.sampled_from((None, -5, 30)),
)


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

    def holds(self, lease: int) -> bool:
        """Whether a call presenting lease acts on this job."""
        return self.status == "running" and self.lease == lease

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
            "finished": self.status in ("done", "failed"),
        }


TABLE_QUERY = """
    SELECT id, queue, priority, max_attempts, status, attempts, lease, run_at, locked_at, locked_by,
           lease_expires_at, finished_at IS NOT NULL AS finished
      FROM jobq.jobs ORDER BY id
"""

# (status before, status after) of every change a single call may make, besides a claim
# (queued -> running, the only change of the lease, by exactly one).
ALLOWED_WITHOUT_CLAIM = {
    ("running", "done"),
    ("running", "queued"),
    ("running", "failed"),
    ("failed", "queued"),
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

    # -- calling the database ---------------------------------------------------

    def call(self, query: str, params: Any = None) -> Call:
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

    def complete(self, job_id: int, lease: int) -> None:
        result = self.call("SELECT jobq.complete(%s, %s)", (job_id, lease))
        job = self.jobs.get(job_id)
        if job is not None and job.holds(lease):
            self.accepted(result)
            job.status = "done"
        elif job is not None and job.status == "done" and job.lease == lease:
            self.accepted(result)
        else:
            self.refused(result, job_id)

    def fail(self, job_id: int, lease: int) -> None:
        result = self.call("SELECT * FROM jobq.fail(%s, 'boom', %s)", (job_id, lease))
        job = self.jobs.get(job_id)
        if job is None or not job.holds(lease):
            self.refused(result, job_id)
            return
        row = self.accepted(result)
        if job.attempts >= job.max_attempts:
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
        job.status = "queued"  # run_at, locked_at and locked_by are kept; the lease is spent
        job.attempts -= 1

    def enqueue(self, new: NewJob) -> int:
        run_at = None if new.delay is None else clock() + timedelta(seconds=new.delay)
        if run_at is None:
            result = self.call(
                "SELECT jobq.enqueue(%s, %s, priority => %s, max_attempts => %s) AS id",
                (QUEUE, Jsonb({}), new.priority, new.max_attempts),
            )
        else:
            result = self.call(
                "SELECT jobq.enqueue(%s, %s, priority => %s, run_at => %s, max_attempts => %s) AS id",
                (QUEUE, Jsonb({}), new.priority, run_at, new.max_attempts),
            )
        job_id = self.accepted(result)["id"]
        assert isinstance(job_id, int) and job_id not in self.jobs
        stored = self.db.execute("SELECT run_at FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
        assert stored is not None
        if run_at is None:  # the default, now()
            run_at = self.within(stored["run_at"], result)
        self.jobs[job_id] = ModelJob(job_id, new.priority, new.max_attempts, run_at)
        return job_id

    def start(self, jobs: list[NewJob]) -> list[int]:
        """An empty table, then these jobs enqueued; their ids."""
        self.db.execute("DELETE FROM jobq.jobs")
        return [self.enqueue(new) for new in jobs]

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
            if job.run_at <= result.earliest or (job.run_at <= result.latest and job.id in claimed)
        ]
        assert claimed == runnable[:n], f"claimed {claimed}, expected the first {n} of {runnable}"

        pairs: list[Pair] = []
        for row in rows:
            job = self.jobs[row["id"]]
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
            if job.attempts >= job.max_attempts:
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
        }
        return operations[name]

    # -- rules --------------------------------------------------------------------

    @initialize(target=job_ids, jobs=st.lists(NEW_JOBS, min_size=1, max_size=3))
    def start_from_a_few_queued_jobs(self, jobs: list[NewJob]) -> MultipleResults[int]:
        return multiple(*self.start(jobs))

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(target=job_ids, new=NEW_JOBS)
    def enqueue_a_job(self, new: NewJob) -> int:
        return self.enqueue(new)

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

    @rule(pairs=st.lists(leases, max_size=4), with_unknown_id=st.booleans())
    def complete_many(self, pairs: list[Pair], with_unknown_id: bool) -> None:
        if with_unknown_id:
            pairs = [*pairs, (UNKNOWN_IDS[-1], 1)]
        acknowledged = self.acknowledgeable(pairs)
        result = self.call(
            "SELECT c.id FROM jobq.complete_many(%s::bigint[], %s::bigint[]) AS c(id)",
            ([job_id for job_id, _ in pairs], [lease for _, lease in pairs]),
        )
        assert result.error is None, result.error
        assert [row["id"] for row in result.rows] == acknowledged
        for job_id in acknowledged:
            self.jobs[job_id].status = "done"

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
        expected = sorted(
            job.id for job in self.jobs.values() if job.status == "failed" and queue in (None, QUEUE)
        )
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
        self.db.execute(
            "UPDATE jobq.jobs SET run_at = run_at - %(shift)s, locked_at = locked_at - %(shift)s,"
            " lease_expires_at = lease_expires_at - %(shift)s",
            {"shift": shift},
        )
        for job in self.jobs.values():
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

    @invariant()
    def the_table_equals_the_model(self) -> None:
        rows = self.db.execute(TABLE_QUERY).fetchall()
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
            "SELECT queue, queued, runnable, running, done, failed FROM jobq.stats() ORDER BY queue"
        )
        assert result.error is None, result.error
        assert [row["queue"] for row in result.rows] == ([QUEUE] if self.jobs else [])
        for row in result.rows:
            counts = Counter(job.status for job in self.jobs.values())
            assert (row["queued"], row["running"], row["done"], row["failed"]) == (
                counts["queued"],
                counts["running"],
                counts["done"],
                counts["failed"],
            )
            queued = [job for job in self.jobs.values() if job.status == "queued"]
            surely = sum(job.run_at <= result.earliest for job in queued)
            possibly = sum(job.run_at <= result.latest for job in queued)
            assert surely <= row["runnable"] <= possibly


def test_random_sequences_of_calls_agree_with_the_model(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:

        class Machine(QueueMachine):
            def __init__(self) -> None:
                super().__init__(db)

        run_state_machine_as_test(
            Machine,
            settings=settings(
                database=None,
                max_examples=EXAMPLES,
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
