"""The network chaos run (short version) and the checks it adds to chaos.py's.

The slow tests share one short run of tests/helpers/chaos_net.py: three real
worker processes on three test hosts (network namespaces), the database on a
fourth; one host cut off for three lease lengths, latency on another
meanwhile, packet loss on the third, then a half-open connection.  Each
asserts one invariant of its table; they skip, naming what is missing, where
namespaces cannot be made (not root, no ip or nft).  The fast tests prove
the new checks can fail: they forge, in the evidence tables of a test
database, what a worker that went on working through a partition, or a
reaper that took a lease too early, would leave, and expect it counted; and
they read the workers' log lines the checks rely on.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console

import pgjobq

from helpers.chaos_handlers import SCHEMA_DDL
from helpers.chaos_net import (
    Episode,
    NetConfig,
    NetReport,
    claims_between,
    count_between,
    first_after,
    first_claim,
    partition_evidence,
    read_log,
    refused_leases,
    render,
    run_chaos_net,
)
from helpers.netns import Unsupported, unsupported
from helpers.sqlhelpers import Db

# one network chaos run for the module: under pytest-xdist its tests stay on one worker
pytestmark = pytest.mark.xdist_group("chaos_net")

# -- the checks, on forged histories -------------------------------------------------


@pytest.fixture
def chaos_db(db: Db) -> Db:
    db.execute(SCHEMA_DDL)
    return db


def enqueue(db: Db) -> int:
    return pgjobq.enqueue(db, "chaos", {"n": 0, "ms": 1, "mode": "plain"}, max_attempts=10)


def claim(db: Db, job_id: int, worker: str, lease_timeout: float = 60.0) -> int:
    """Claim job_id (made runnable now) for worker; its lease."""
    db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))
    (job,) = pgjobq.claim(db, "chaos", 1, worker, lease_timeout=timedelta(seconds=lease_timeout))
    assert job.id == job_id
    return job.lease


def cut_off_with_a_job(db: Db, lease_timeout: float = 60.0) -> tuple[int, int, float]:
    """w1 claims a job, then its host is cut off: (job id, lease, the cut's time)."""
    job_id = enqueue(db)
    lease = claim(db, job_id, "w1", lease_timeout)
    return job_id, lease, time.time()


def test_partition_evidence_of_a_recovery_by_the_others_shows_no_violation(chaos_db: Db) -> None:
    job_id, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    time.sleep(0.3)  # the lease expires, unextended
    chaos_db.execute("SELECT jobq.reap()")
    heal = time.time()
    lease = claim(chaos_db, job_id, "w2")  # another worker runs it: a claim of the queued job
    pgjobq.complete(chaos_db, job_id, lease)

    part = partition_evidence(chaos_db, "w1", cut, cut, heal)

    assert {k: part[k] for k in ("held", "ended", "recovered", "ended_otherwise", "late_changes")} == {
        "held": 1, "ended": 1, "recovered": 1, "ended_otherwise": 0, "late_changes": 0,
    }  # fmt: skip
    assert part["rerun_elsewhere"] == 1
    assert part["leases"] == [[job_id, 1]]
    assert claims_between(chaos_db, "w1", cut, heal) == 0


def test_partition_evidence_leaves_out_leases_ended_before_the_cut(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    pgjobq.complete(chaos_db, job_id, claim(chaos_db, job_id, "w1"))
    cut = time.time()

    assert partition_evidence(chaos_db, "w1", cut, cut, cut + 60)["held"] == 0


def test_partition_evidence_leaves_out_a_cancel_request_under_a_held_lease(chaos_db: Db) -> None:
    job_id = pgjobq.enqueue(chaos_db, "chaos", {"n": 0, "ms": 1, "mode": "plain"}, unique_key="k1")
    claim(chaos_db, job_id, "w1")
    cut = time.time()
    # the producer's replace asks the running holder to give its key up: no act of the worker cut off
    replacement = pgjobq.enqueue(chaos_db, "chaos", {"n": 1}, unique_key="k1", on_conflict="replace")
    assert replacement != job_id
    assert chaos_db.execute(
        "SELECT count(*) AS n FROM chaos.transitions WHERE job_id = %s AND new_cancel_requested", (job_id,)
    ).fetchall() == [{"n": 1}]

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["late_changes"]) == (1, 0)


def test_partition_evidence_counts_a_late_complete_accepted(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    # the worker cut off completes after all: the database took a statement sent through the partition
    pgjobq.complete(chaos_db, job_id, lease)

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["recovered"], part["ended_otherwise"], part["late_changes"]) == (1, 0, 1, 1)


def test_partition_evidence_counts_a_late_heartbeat_accepted(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    pgjobq.heartbeat(chaos_db, job_id, lease)

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["ended"], part["recovered"], part["late_changes"]) == (1, 0, 0, 1)


def test_partition_evidence_counts_a_reap_before_expiry_as_no_recovery(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    # a broken reap: takes the lease, valid for another minute
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'queued', last_error = %s WHERE id = %s",
        (f"reaped: lease {lease} of w1 went stale", job_id),
    )

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["ended"], part["recovered"], part["late_changes"]) == (1, 1, 0, 0)


def test_partition_evidence_counts_a_reap_after_the_heal_as_no_recovery(chaos_db: Db) -> None:
    _, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    heal = time.time()
    time.sleep(0.3)
    chaos_db.execute("SELECT jobq.reap()")  # after the heal: the worker back could have reaped it itself

    part = partition_evidence(chaos_db, "w1", cut, cut, heal)

    assert (part["held"], part["ended"], part["recovered"]) == (1, 1, 0)


def test_claims_between_counts_a_claim_during_the_cut(chaos_db: Db) -> None:
    cut = time.time()
    claim(chaos_db, enqueue(chaos_db), "w1")  # a worker cut off that went on claiming
    heal = time.time()

    assert claims_between(chaos_db, "w1", cut, heal) == 1
    assert claims_between(chaos_db, "w2", cut, heal) == 0
    assert (first_claim(chaos_db, "w1", cut) or 0) >= cut
    assert first_claim(chaos_db, "w1", heal) is None


def test_a_schedule_with_two_faults_on_one_host_at_once_is_refused() -> None:
    short = NetConfig.short()
    cut = next(e for e in short.episodes if e.kind == "cut")

    with pytest.raises(ValueError, match="overlaps cut"):
        dataclasses.replace(short, episodes=(cut, Episode("loss", cut.host, cut.at + 1, 5)))
    assert NetConfig.full().episodes  # the full schedule passes the same check


LOG = """\
2024-06-01 12:00:00,100 INFO pgjobq.worker: worker w001 started on queue chaos (pgjobq 0.8.0)
2024-06-01 12:00:04,600 WARNING pgjobq.worker: database unavailable (timeout expired); retrying in 0.5 s
Traceback (most recent call last):
2024-06-01 12:00:09,000 WARNING pgjobq.worker: job 7: lease 2 lost; result discarded
2024-06-01 12:00:09,010 INFO pgjobq.worker: job 8: lease 1 void (cancelled meanwhile?); failure discarded
2024-06-01 12:00:09,020 WARNING pgjobq.worker: job 9: lease 4 lost while in hand; its result will be discarded
2024-06-01 12:00:09,500 INFO pgjobq.worker: job 10 done (attempt 1)
2024-06-01 12:00:09,600 INFO pgjobq.worker: job 11: lease 3 gone, as presumed; stopped (CancelHeard: x)
2024-06-01 12:00:09,700 INFO pgjobq.worker: job 12: lease 1 gone, as presumed; result discarded
"""


def test_the_worker_log_gives_the_notice_and_the_leases_refused() -> None:
    lines = read_log(LOG)
    started = lines[0].at

    assert len(lines) == 8  # the traceback line is not a log line
    assert first_after(lines, started, "database unavailable") == pytest.approx(started + 4.5)
    assert first_after(lines, started + 5, "database unavailable") is None
    assert count_between(lines, started, started + 9.5, "lost") == 2
    assert refused_leases(lines, started) == {(7, 2), (8, 1), (9, 4), (11, 3), (12, 1)}
    assert refused_leases(lines, lines[3].at + 0.005) == {(9, 4), (11, 3), (12, 1)}


# -- the short network chaos run ---------------------------------------------------------


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetReport]:
    """One short network chaos run for the tests below; its table is printed (pytest -s shows it).

    Session-scoped, kept on one pytest-xdist worker (--dist loadgroup), as test_chaos.py's: a second
    worker of the same run that gets here fails them rather than running it again.  Skipped, naming what
    is missing, where network namespaces cannot be made.
    """
    reason = unsupported()
    if reason is not None:
        pytest.skip(f"the network chaos run needs network namespaces: {reason}")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is not None:
        try:
            (Path(tempfile.gettempdir()) / f"pgjobq-chaos-net-{run}").touch(exist_ok=False)
        except FileExistsError:
            pytest.fail(
                "another pytest-xdist worker of this run has the network chaos run already: --dist loadgroup"
                " did not keep its tests together (pytest 9.2 and pytest-xdist issue 1386)"
            )
    try:
        result = run_chaos_net(NetConfig.short(), tmp_path_factory.mktemp("chaos-net"))
    except Unsupported as exc:
        pytest.skip(f"the network chaos run needs network namespaces: {exc}")
    render(result, Console(width=150))
    yield result


@pytest.mark.slow
def test_network_chaos_loses_no_job(report: NetReport) -> None:
    report.assert_holds("lost")


@pytest.mark.slow
def test_network_chaos_never_has_two_valid_leases_on_one_job(report: NetReport) -> None:
    report.assert_holds("double_claims")


@pytest.mark.slow
def test_network_chaos_accepts_no_stale_completion(report: NetReport) -> None:
    report.assert_holds("stale_completions")


@pytest.mark.slow
def test_network_chaos_completes_each_job_at_most_once(report: NetReport) -> None:
    report.assert_holds("second_completions")


@pytest.mark.slow
def test_network_chaos_explains_every_duplicate_execution(report: NetReport) -> None:
    report.assert_holds("duplicates_explained")


@pytest.mark.slow
def test_network_chaos_never_reaps_a_lease_before_it_expired(report: NetReport) -> None:
    report.assert_holds("reaped_valid_lease")


@pytest.mark.slow
def test_network_chaos_writes_exactly_one_effect_per_done_job(report: NetReport) -> None:
    report.assert_holds("effects_exactly_once")


@pytest.mark.slow
def test_network_chaos_claims_under_each_workers_lease_length(report: NetReport) -> None:
    report.assert_holds("lease_lengths")


@pytest.mark.slow
def test_network_chaos_cuts_a_host_off_while_its_worker_holds_jobs(report: NetReport) -> None:
    report.assert_holds("cut_real")


@pytest.mark.slow
def test_a_worker_cut_off_notices_within_its_network_timeout(report: NetReport) -> None:
    report.assert_holds("cut_noticed")


@pytest.mark.slow
def test_a_worker_cut_off_stops_claiming(report: NetReport) -> None:
    report.assert_holds("cut_stops_claiming")


@pytest.mark.slow
def test_the_server_ends_the_backends_of_a_host_cut_off(report: NetReport) -> None:
    report.assert_holds("cut_server_cleared")


@pytest.mark.slow
def test_the_jobs_of_a_worker_cut_off_are_recovered_by_the_others_after_its_lease(report: NetReport) -> None:
    report.assert_holds("cut_recovered")


@pytest.mark.slow
def test_the_late_acknowledgements_of_a_worker_cut_off_are_refused(report: NetReport) -> None:
    report.assert_holds("cut_late_refused")


@pytest.mark.slow
def test_a_worker_cut_off_claims_again_soon_after_the_heal(report: NetReport) -> None:
    report.assert_holds("cut_rejoined")


@pytest.mark.slow
def test_network_chaos_leaves_connections_half_open(report: NetReport) -> None:
    report.assert_holds("half_open_real")


@pytest.mark.slow
def test_a_worker_notices_its_half_open_connections(report: NetReport) -> None:
    report.assert_holds("half_open_noticed")


@pytest.mark.slow
def test_a_worker_claims_again_after_its_half_open_connections(report: NetReport) -> None:
    report.assert_holds("half_open_rejoined")


@pytest.mark.slow
def test_network_chaos_delays_the_packets_of_the_latency_host(report: NetReport) -> None:
    report.assert_holds("latency_real")


@pytest.mark.slow
def test_a_worker_behind_200_ms_of_latency_keeps_working(report: NetReport) -> None:
    report.assert_holds("latency_works")


@pytest.mark.slow
def test_network_chaos_drops_the_share_of_packets_asked(report: NetReport) -> None:
    report.assert_holds("loss_real")


@pytest.mark.slow
def test_a_worker_on_a_lossy_network_keeps_working(report: NetReport) -> None:
    report.assert_holds("loss_works")


@pytest.mark.slow
def test_network_chaos_leaves_nothing_queued_or_running(report: NetReport) -> None:
    report.assert_holds("drained")


@pytest.mark.slow
def test_network_chaos_workers_exit_cleanly_on_sigterm(report: NetReport) -> None:
    report.assert_holds("clean_exit")


@pytest.mark.slow
def test_network_chaos_workers_never_exit_on_their_own(report: NetReport) -> None:
    report.assert_holds("no_crashes")
