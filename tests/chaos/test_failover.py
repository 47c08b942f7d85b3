"""Failover to a standby: the short failover run, what each kind of replication keeps, and the Worker.

Every test here starts its own primary and a streaming standby made by
pg_basebackup (tests/chaos/failover.py's replicated(), on 127.0.0.1 at two
ports), kills the primary with ``pg_ctl stop -m immediate`` and promotes
the standby.

- The short failover run (synchronous standby; one run for the module,
  its tests on one xdist worker): one test, parametrized over the keys the
  harness declares (failover.invariant_keys), asserts each invariant, and
  another that the run judged exactly those.  How its checks read the
  workers' and the producer's logs is tested without a database, on
  hand-written logs (tests/chaos/test_failover_judging.py).
- Synchronous replication, deterministically: a lease taken before the
  failover cannot complete a job claimed again after it.
- Asynchronous replication, deterministically: the standby is stopped, the
  primary goes on alone (enqueue, claim, complete), dies, and the standby is
  started and promoted.  What the lost timeline did is gone: an enqueue
  whose commit returned, an acknowledged completion (the job runs again),
  and with them the uniqueness of what the database hands out: the same
  lease (a per-job counter) is issued again, so the old holder's late
  completion is accepted for a job another worker now runs, and the same
  job ids (a sequence) are handed out again.  These tests document the
  trade-off: they assert what happens, which is what operators choose.
- Real worker processes across a failover: the acknowledgement a worker owed
  when the primary died (its commit was waiting for the stopped synchronous
  standby) is sent once it has reconnected to the promoted standby, and
  holds; a worker with the default target_session_attrs never works on the
  read-only standby, one given ``target_session_attrs=any`` meets SQLSTATE
  25006 there, says so and retries without crashing; all of them work on
  the promoted standby within 15 s and exit 0 on SIGTERM.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from psycopg.rows import dict_row
from rich.console import Console

import pgjobq

from chaos.failover import (
    STANDBY,
    FailoverConfig,
    FailoverReport,
    Pair,
    invariant_keys,
    logged_at,
    render,
    replicated,
    run_failover,
)
from helpers.fixtures import once_per_run
from helpers.processes import pgjobq_command, process_env, wait_until
from helpers.sqlhelpers import Db

# Each test starts two servers.  The tests of one scenario share a module fixture (a failover each), so
# each scenario is an xdist group: under --dist loadgroup its fixture is built once, on one worker.
pytestmark = pytest.mark.slow

RECONNECT_LIMIT = 15.0  # seconds from the promotion to working again (the issue's bound)


def install(dsn: str) -> None:
    """CREATE EXTENSION pgjobq on the primary, before the standby is made from it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")


def connect(dsn: str) -> Db:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


# -- the short failover run (synchronous) ----------------------------------------


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverReport]:
    """One short synchronous failover run for the tests below; its tables are printed (pytest -s).

    Session-scoped and kept on one xdist worker by its group, as the chaos
    run is (tests/chaos/test_chaos.py): a second worker of the same run
    that gets here fails them rather than running it again.
    """
    once_per_run("failover", "the failover run")
    result = run_failover(FailoverConfig.short("sync"), tmp_path_factory.mktemp("failover"))
    render(result, Console(width=120))
    yield result


@pytest.mark.xdist_group("failover")
def test_failover_run_judges_every_invariant_the_harness_declares_and_no_other(
    report: FailoverReport,
) -> None:
    assert sorted(report.keys()) == sorted(invariant_keys("sync"))


@pytest.mark.xdist_group("failover")
@pytest.mark.parametrize("key", invariant_keys("sync"))
def test_failover_run_holds_the_invariant(report: FailoverReport, key: str) -> None:
    report.assert_holds(key)


# -- synchronous replication: fencing across the failover ------------------------------


def test_sync_lease_from_before_the_failover_cannot_complete_a_job_claimed_after_it() -> None:
    with replicated(True, setup=install) as pair:
        with connect(pair.primary.dsn()) as conn:
            # a reaped job is retried after the queue's backoff: 1 ms here
            conn.execute("SELECT jobq.configure_queue('q', backoff_base => '1 ms', backoff_max => '1 ms')")
            job_id = pgjobq.enqueue(conn, "q", {})
            (before,) = pgjobq.claim(conn, "q", 1, "before", lease_timeout=timedelta(seconds=1))
        pair.kill_primary()
        pair.standby.promote()
        with connect(pair.dsn(user="postgres", dbname="postgres")) as conn:
            assert wait_until(lambda: bool(pgjobq.reap(conn)), timeout=10)  # once its 1 s has run out
            claimed: list[pgjobq.Job] = []

            def claim() -> bool:
                claimed.extend(pgjobq.claim(conn, "q", 1, "after"))
                return bool(claimed)

            assert wait_until(claim, timeout=10)
            (after,) = claimed

            with pytest.raises(pgjobq.LeaseLost):
                pgjobq.complete(conn, job_id, before.lease)
            pgjobq.complete(conn, job_id, after.lease)

            assert (before.lease, after.lease) == (1, 2)
            assert pgjobq.job(conn, job_id).status == "done"


# -- asynchronous replication: what the lost timeline takes with it ------------------------------


@dataclass(frozen=True)
class LostTimeline:
    """What an asynchronous failover did to what the old primary did alone (see lost_timeline)."""

    lost_ids: list[int]  # enqueued on the old primary alone, commit returned
    lost_ids_found: int  # of them, on the promoted standby
    completed: tuple[int, int]  # (job, lease) completed on the old primary alone, complete returned
    completed_then: tuple[str, int]  # its (status, lease) on the promoted standby
    completed_again: int  # the lease the promoted standby's claim gave it: it runs again
    held: tuple[int, int]  # (job, lease) claimed on the old primary alone, still held by its worker
    held_again: int  # the lease the promoted standby's claim gave another worker
    old_holder_completed: bool  # the old holder's late complete(job, its lease) was accepted
    new_holder_completed: bool  # then the new holder's own complete
    sequence_value: int  # jobq.jobs_id_seq's last_value on the promoted standby, before any enqueue
    new_ids: list[int]  # enqueued on the promoted standby


@pytest.fixture(scope="module")
def lost_timeline() -> LostTimeline:
    """An asynchronous standby, stopped; the primary alone enqueues 64 jobs (more than the 32 values a
    sequence logs ahead), completes one job and claims another, then dies; the standby is started and
    promoted, and the same calls are made there."""
    with replicated(False, setup=install) as pair:
        with connect(pair.primary.dsn()) as conn:
            completed_id = pgjobq.enqueue(conn, "completed", {})
            held_id = pgjobq.enqueue(conn, "held", {})
            pair.primary.wait_replayed(STANDBY)
            pair.standby.stop("fast")
            lost_ids = pgjobq.enqueue_many(conn, "lost", [{"n": n} for n in range(64)])
            (completed,) = pgjobq.claim(conn, "completed", 1, "old")
            pgjobq.complete(conn, completed.id, completed.lease)
            (held,) = pgjobq.claim(conn, "held", 1, "old")
        pair.kill_primary()
        pair.standby.start()
        pair.standby.promote()
        with connect(pair.dsn(user="postgres", dbname="postgres")) as conn:
            found = conn.execute("SELECT count(*) AS n FROM jobq.jobs WHERE id = ANY(%s)", (lost_ids,))
            then = conn.execute("SELECT status, lease FROM jobq.jobs WHERE id = %s", (completed_id,))
            then_row = then.fetchone()
            assert then_row is not None
            (again,) = pgjobq.claim(conn, "completed", 1, "new")
            (held_again,) = pgjobq.claim(conn, "held", 1, "new")
            old_accepted = bool(pgjobq.complete_many(conn, [(held.id, held.lease)]))
            new_accepted = bool(pgjobq.complete_many(conn, [(held_again.id, held_again.lease)]))
            sequence = conn.execute("SELECT last_value FROM jobq.jobs_id_seq").fetchone()
            assert sequence is not None
            new_ids = pgjobq.enqueue_many(conn, "new", [{"n": n} for n in range(64)])
            return LostTimeline(
                lost_ids=lost_ids,
                lost_ids_found=int(found.fetchall()[0]["n"]),
                completed=(completed.id, completed.lease),
                completed_then=(str(then_row["status"]), int(then_row["lease"])),
                completed_again=again.lease if again.id == completed_id else -1,
                held=(held.id, held.lease),
                held_again=held_again.lease if held_again.id == held_id else -1,
                old_holder_completed=old_accepted,
                new_holder_completed=new_accepted,
                sequence_value=int(sequence["last_value"]),
                new_ids=new_ids,
            )


@pytest.mark.xdist_group("failover-async")
def test_async_failover_loses_enqueues_whose_commit_returned(lost_timeline: LostTimeline) -> None:
    assert len(lost_timeline.lost_ids) == 64
    assert lost_timeline.lost_ids_found == 0


@pytest.mark.xdist_group("failover-async")
def test_async_failover_undoes_an_acknowledged_completion_and_the_job_runs_again(
    lost_timeline: LostTimeline,
) -> None:
    assert lost_timeline.completed[1] == 1  # completed under lease 1 on the old primary
    assert lost_timeline.completed_then == ("queued", 0)  # as the standby last saw it
    assert lost_timeline.completed_again == 1  # claimed again, under the lease its first run had


@pytest.mark.xdist_group("failover-async")
def test_async_failover_issues_a_lease_again_and_the_old_holder_completes_the_new_holders_job(
    lost_timeline: LostTimeline,
) -> None:
    assert lost_timeline.held_again == lost_timeline.held[1] == 1  # the same fencing token, to another worker
    # the worker that claimed the job on the lost timeline completes it while the new holder runs it:
    # the lease cannot tell them apart, and the new holder's own completion is an accepted repeat
    assert lost_timeline.old_holder_completed
    assert lost_timeline.new_holder_completed


@pytest.mark.xdist_group("failover-async")
def test_async_failover_hands_out_job_ids_again(lost_timeline: LostTimeline) -> None:
    reissued = set(lost_timeline.new_ids) & set(lost_timeline.lost_ids)
    assert lost_timeline.new_ids[0] == lost_timeline.sequence_value + 1
    assert lost_timeline.sequence_value < max(lost_timeline.lost_ids)
    assert reissued == set(range(lost_timeline.sequence_value + 1, max(lost_timeline.lost_ids) + 1))


# -- the Worker across a failover -----------------------------------------------------------


@dataclass
class Proc:
    """A real `pgjobq worker chaos.failover:sleep` process, its log in a file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    exited_early: int | None = None  # its status, had it exited before it was told to

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def lines_after(self, pattern: str, moment: float) -> list[str]:
        """The log lines matching pattern logged after moment (Unix time)."""
        return [
            line
            for line in self.text().splitlines()
            if re.search(pattern, line) and (at := logged_at(line)) is not None and at > moment
        ]


def start_worker(name: str, queue: str, dsn: str, folder: Path) -> Proc:
    log_path = folder / f"worker-{name}.log"
    log = log_path.open("wb")
    # DEBUG: the 'job N done' lines read as evidence below are DEBUG lines
    argv = pgjobq_command(
        "worker", "chaos.failover:sleep", "--queue", queue, "--name", name, "--log-level", "DEBUG",
        "--lease-timeout", "60",
    )  # fmt: skip
    process = subprocess.Popen(argv, env=process_env(dsn), stdout=log, stderr=subprocess.STDOUT)
    return Proc(name, process, log_path, log)


@dataclass
class WorkerFailover:
    """What the workers did around one failover (see worker_failover); times are Unix times."""

    workers: dict[str, Proc]
    owed_job: int
    owed_then: tuple[str, int]  # the owed job's (status, lease) on the promoted standby, at the end
    killed: float  # just before pg_ctl stop -m immediate
    promoted: float  # when the promotion was asked for (the standby was read-only until then)
    worked: dict[str, float | None]  # worker -> seconds from the promotion to its first job done after it
    standby_log: str  # the standby's log until its promotion: every statement, with its application_name
    exits: dict[str, int | None]

    def ran_on_standby(self, application_name: str) -> list[str]:
        """The standby's log lines of statements (and their errors) by application_name before promotion."""
        return [line for line in self.standby_log.splitlines() if f" {application_name}: " in line]


@pytest.fixture(scope="module")
def worker_failover(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerFailover]:
    """Three workers on one synchronous pair, each on a queue of its own:

    - ``owed`` (target_session_attrs=read-write) runs a 1.5 s job; meanwhile
      the standby is stopped, so its acknowledgement waits (SyncRep) for a
      standby that is gone, until the primary is killed under it;
    - ``plain`` (a multi-host DSN saying nothing of target_session_attrs:
      the worker's default);
    - ``any`` (target_session_attrs=any).

    The standby is started again (read-only, its primary gone) and promoted
    once ``any`` has met it; then one job each for ``plain`` and ``any``.
    """
    folder = tmp_path_factory.mktemp("worker-failover")
    # every statement in the servers' logs, with its session's application_name
    logged = {"log_statement": "'all'", "log_line_prefix": "'%m [%p] %a: '"}
    with replicated(True, setup=install, settings=logged) as pair:
        base = {"user": "postgres", "dbname": "postgres"}
        workers = {
            "owed": start_worker("owed", "owed", pair.dsn(**base, target_session_attrs="read-write"), folder),
            "plain": start_worker("plain", "plain", pair.dsn(**base), folder),
            "any": start_worker("any", "any", pair.dsn(**base, target_session_attrs="any"), folder),
        }
        try:
            yield _fail_over_under_workers(pair, workers)
        finally:
            for worker in workers.values():
                if worker.process.poll() is None:
                    worker.process.kill()
                worker.process.wait()
                worker.log.close()


def _fail_over_under_workers(pair: Pair, workers: dict[str, Proc]) -> WorkerFailover:
    owed = workers["owed"]
    assert wait_until(lambda: all("started on queue" in w.text() for w in workers.values()), timeout=60)
    with connect(pair.primary.dsn()) as conn:
        owed_job = pgjobq.enqueue(conn, "owed", {"n": 0, "ms": 1500})
        assert wait_until(lambda: f"execution of job {owed_job} " in owed.text(), timeout=30)
        pair.standby.stop("fast")  # from now on every commit on the primary waits for it
        waiting = (
            "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'pgjobq worker owed'"
            " AND wait_event = 'SyncRep' AND query LIKE '%%complete%%')"
        )
        assert wait_until(lambda: bool(scalar(conn, waiting)), timeout=30), "the acknowledgement never waited"
    killed = time.time()
    pair.kill_primary()
    pair.standby.start()
    met = wait_until(lambda: bool(workers["any"].lines_after("database is read-only", killed)), timeout=30)
    assert met, "the 'any' worker never met the standby"
    for worker in workers.values():
        worker.exited_early = worker.process.poll()
    standby_log = pair.standby.log_file.read_text(errors="replace")
    promoted = time.time()  # asked for: a worker may use the promoted standby before pg_ctl returns
    pair.standby.promote()
    with connect(pair.dsn(user="postgres", dbname="postgres", target_session_attrs="read-write")) as conn:
        for queue in ("plain", "any"):
            pgjobq.enqueue(conn, queue, {"n": 1, "ms": 0})

        def done_after(worker: Proc) -> float | None:
            lines = worker.lines_after(r"job \d+ done", promoted)
            return logged_at(lines[0]) if lines else None

        wait_until(lambda: all(done_after(w) is not None for w in workers.values()), timeout=40, interval=0.2)
        worked = {
            name: (None if (t := done_after(w)) is None else t - promoted) for name, w in workers.items()
        }
        row = conn.execute("SELECT status, lease FROM jobq.jobs WHERE id = %s", (owed_job,)).fetchone()
        assert row is not None
    for worker in workers.values():
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    exits: dict[str, int | None] = {}
    for name, worker in workers.items():
        try:
            exits[name] = worker.process.wait(30)
        except subprocess.TimeoutExpired:
            exits[name] = None
    return WorkerFailover(
        workers=workers,
        owed_job=owed_job,
        owed_then=(str(row["status"]), int(row["lease"])),
        killed=killed,
        promoted=promoted,
        worked=worked,
        standby_log=standby_log,
        exits=exits,
    )


def scalar(conn: Db, query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return next(iter(row.values()))


@pytest.mark.xdist_group("failover-worker")
def test_worker_sends_the_acknowledgement_it_owed_after_reconnecting_and_it_holds(
    worker_failover: WorkerFailover,
) -> None:
    owed = worker_failover.workers["owed"]
    done = owed.lines_after(rf"job {worker_failover.owed_job} done \(attempt 1\)", worker_failover.promoted)
    assert owed.lines_after("database unavailable", worker_failover.killed)  # its connection broke
    assert len(done) == 1  # accepted by the promoted standby (the claim had reached it: synchronous)
    assert worker_failover.owed_then == ("done", 1)


@pytest.mark.xdist_group("failover-worker")
def test_workers_work_on_the_promoted_standby_within_15_s(worker_failover: WorkerFailover) -> None:
    worked = worker_failover.worked
    assert all(seconds is not None and seconds <= RECONNECT_LIMIT for seconds in worked.values()), worked


@pytest.mark.xdist_group("failover-worker")
def test_worker_never_works_on_a_read_only_standby_by_default(worker_failover: WorkerFailover) -> None:
    for name in ("owed", "plain"):  # target_session_attrs=read-write, given or the worker's default
        assert not worker_failover.workers[name].lines_after("database is read-only", 0)
        assert worker_failover.ran_on_standby(f"pgjobq worker {name}") == []
        assert worker_failover.ran_on_standby(f"pgjobq listen {name}") == []


@pytest.mark.xdist_group("failover-worker")
def test_worker_told_any_meets_the_read_only_standby_says_so_and_retries(
    worker_failover: WorkerFailover,
) -> None:
    worker = worker_failover.workers["any"]
    read_only = worker.lines_after(r"WARNING pgjobq\.worker: database is read-only \(.*\); retrying in", 0)
    assert read_only, worker.text()[-2000:]
    on_standby = worker_failover.ran_on_standby("pgjobq worker any") + worker_failover.ran_on_standby(
        "pgjobq listen any"
    )
    assert any("ERROR:  cannot execute" in line for line in on_standby), on_standby
    assert worker.exited_early is None  # still running when the standby was promoted
    assert "Traceback" not in worker.text()
    assert worker_failover.worked["any"] is not None  # and working once it was


@pytest.mark.xdist_group("failover-worker")
def test_workers_exit_0_on_sigterm_after_the_failover(worker_failover: WorkerFailover) -> None:
    assert worker_failover.exits == {"owed": 0, "plain": 0, "any": 0}
