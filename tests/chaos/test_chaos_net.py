"""The network chaos run (short version) and the checks it adds to chaos.py's.

The slow tests share one short run of tests/chaos/chaos_net.py: three real
worker processes on three test hosts (network namespaces), the database on a
fourth; one host cut off for three lease lengths, latency on another
meanwhile, packet loss on the third, then a half-open connection.  One test,
parametrized over the keys the harness declares (chaos_net.INVARIANTS),
asserts each invariant of its table, and another that the run judged
exactly those; they skip, naming what is missing, where namespaces cannot
be made (not root, no ip or nft).

The fast tests prove each new check can fail, in two steps.  What the
evidence says of an episode (find_cut, find_window, find_open): they forge,
in the evidence tables of a test database, what a worker that went on
working through a partition, or a reaper that took a lease too early, would
leave, with the worker's log lines, and expect it counted and the run's
verdict (chaos_net.judge) to fail its invariant.  The verdict on what the
harness measured of each fault (packets dropped, the server's backends
gone, connections left half-open, a round trip's time, the share of
packets lost): they judge episode records written by hand, each measurement
gone wrong failing its invariant, and a run missing a kind of fault failing
every invariant of that kind.  The measuring itself (nftables' counters,
ss, a TCP connect from the host) is exercised by the slow run only.  And
they read the workers' log lines the checks rely on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from rich.console import Console

import pgjobq

from chaos.chaos import Invariant, evidence
from chaos.chaos_handlers import SCHEMA_DDL
from chaos.chaos_net import (
    INVARIANTS,
    CutFinding,
    Episode,
    EpisodeRecord,
    Findings,
    Kind,
    LogLine,
    NetConfig,
    NetReport,
    OpenFinding,
    WindowFinding,
    claims_between,
    count_between,
    find_cut,
    find_open,
    find_window,
    first_after,
    first_claim,
    judge,
    partition_evidence,
    read_log,
    refused_leases,
    render,
    run_chaos_net,
)
from chaos.netns import Counters, Unsupported, unsupported
from helpers import required
from helpers.fixtures import once_per_run
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


# the short run's settings: the bounds the verdict holds episodes to
CONFIG = NetConfig.short()


def cut_off_with_a_job(db: Db, lease_timeout: float = 60.0) -> tuple[int, int, float]:
    """w1 claims a job, then its host is cut off: (job id, lease, the cut's time).

    The cut is dated back by the notice bound and a second (the claim, logged, a minute), so that what
    the test does next comes after the cut has settled (NetConfig.settle) and after the worker must
    have noticed it (NetConfig.notice_bound), as the run's checks judge the rest of a cut."""
    job_id = enqueue(db)
    lease = claim(db, job_id, "w1", lease_timeout)
    db.execute("UPDATE chaos.transitions SET at = at - interval '60 s' WHERE job_id = %s", (job_id,))
    return job_id, lease, time.time() - CONFIG.notice_bound - 1


# the episode invariants: those judged from what the evidence says of each fault
EPISODE_INVARIANTS = [
    key for key in INVARIANTS if key.startswith(("cut_", "half_open_", "latency_", "loss_"))
]


def record(kind: Kind, began: float, ended: float, **measured: Any) -> EpisodeRecord:
    """An episode of kind on host h1 (worker w1) from began to ended (epoch seconds), with what the
    harness measured during it."""
    episode = Episode(kind, 0, 0.0, ended - began)
    return EpisodeRecord(episode, "h1", "w1", "10.0.1.2", began=began, ended=ended, **measured)


def cut_record(began: float, ended: float) -> EpisodeRecord:
    """A cut as the harness measures a sound one: packets dropped, two backends gone within 3 s."""
    return record("cut", began, ended, counters=Counters(0, 500), held=1, backends=2, cleared_after=3.0)


def sound_findings(now: float) -> Findings:
    """What the evidence says of a run whose every episode went as it should, the last ending at now."""
    began = now - 20
    return Findings(
        cuts=[
            CutFinding(
                cut_record(began, now), held=2, recovered=2, rerun_elsewhere=2, late=0, noticed=4.0,
                blackout_claims=0, rejoined=3.0, refused=1,
            )
        ],
        latencies=[
            WindowFinding(record("latency", began, now, rtt=0.2), claims=20, others={"w2": 30}, unavailable=0)
        ],
        losses=[
            WindowFinding(
                record("loss", began, now, counters=Counters(1000, 100)), claims=20, others={}, unavailable=1
            )
        ],
        opens=[
            OpenFinding(
                record("half_open", began, now, half_open=2, destroyed=2, server_left=0),
                noticed=2.0, rejoined=3.0,
            )
        ],
    )  # fmt: skip


def net_verdict(
    db: Db,
    findings: Findings,
    exits: dict[str, int | None] | None = None,
    unexpected: tuple[tuple[str, int | None], ...] = (),
) -> dict[str, Invariant]:
    """The run's verdict (chaos_net.judge), by key, on the evidence in db (workers w1 and w2 of 60 s
    leases, the producer given the ids chaos.acked holds), the findings of its episodes, and its workers'
    exits (by default w1 exiting 0 on SIGTERM; unexpected: those that exited on their own)."""
    found = evidence(db, {"w1": 60.0, "w2": 60.0}, db.info.user, None, db.info.user)
    acked = int(found["lost"]["acked"])
    judged = judge(found, CONFIG, acked, findings, {"w1": 0} if exits is None else exits, list(unexpected))
    return {invariant.key: invariant for invariant in judged}


def failing(db: Db, findings: Findings) -> list[str]:
    """The episode invariants the run's verdict (chaos_net.judge) fails on findings."""
    judged = net_verdict(db, findings)
    return [key for key in EPISODE_INVARIANTS if not judged[key].ok]


def judged_cut(db: Db, cut: float, heal: float, lines: list[LogLine] | None = None) -> list[str]:
    """The episode invariants failed by a run whose cut of w1, from cut to heal, is the history in db
    (find_cut; its log: lines, by default a notice halfway through the cut and, after the heal, a late
    acknowledgement of every lease it held refused), and whose other episodes were sound."""
    if lines is None:
        held = partition_evidence(db, "w1", cut, cut + CONFIG.settle, heal)["leases"]
        notice = min(cut + 1, (cut + heal) / 2)
        lines = [LogLine(notice, "WARNING", "database unavailable (timeout expired); retrying in 1 s")]
        lines += [
            LogLine(heal + 0.5, "WARNING", f"job {job}: lease {lease} lost; result discarded")
            for job, lease in held
        ]
    finding = find_cut(db, CONFIG, cut_record(cut, heal), lines)
    return failing(db, dataclasses.replace(sound_findings(heal), cuts=[finding]))


def test_partition_evidence_of_a_recovery_by_the_others_shows_no_violation(chaos_db: Db) -> None:
    job_id, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    time.sleep(0.3)  # the lease expires, unextended
    chaos_db.execute("SELECT jobq.reap()")
    heal = time.time()
    lease = claim(chaos_db, job_id, "w2")  # another worker runs it: a claim of the queued job
    pgjobq.complete(chaos_db, job_id, lease)

    claim(chaos_db, enqueue(chaos_db), "w1")  # the worker back claims again

    part = partition_evidence(chaos_db, "w1", cut, cut, heal)

    assert {k: part[k] for k in ("held", "ended", "recovered", "ended_otherwise", "late_changes")} == {
        "held": 1, "ended": 1, "recovered": 1, "ended_otherwise": 0, "late_changes": 0,
    }  # fmt: skip
    assert part["rerun_elsewhere"] == 1
    assert part["leases"] == [[job_id, 1]]
    assert claims_between(chaos_db, "w1", cut, heal) == 0
    assert judged_cut(chaos_db, cut, heal) == []


def test_partition_evidence_leaves_out_leases_ended_before_the_cut(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    pgjobq.complete(chaos_db, job_id, claim(chaos_db, job_id, "w1"))
    cut = time.time()

    assert partition_evidence(chaos_db, "w1", cut, cut, cut + 60)["held"] == 0
    assert "cut_real" in judged_cut(
        chaos_db, cut, cut + 60
    )  # a cut of a worker holding nothing proves nothing


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
    assert "cut_late_refused" not in judged_cut(chaos_db, cut, time.time() + 60)


def test_partition_evidence_counts_a_late_complete_accepted(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    # the worker cut off completes after all: the database took a statement sent through the partition
    pgjobq.complete(chaos_db, job_id, lease)

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["recovered"], part["ended_otherwise"], part["late_changes"]) == (1, 0, 1, 1)
    assert "cut_late_refused" in judged_cut(chaos_db, cut, time.time() + 60)


def test_partition_evidence_counts_a_late_heartbeat_accepted(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    pgjobq.heartbeat(chaos_db, job_id, lease)

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["ended"], part["recovered"], part["late_changes"]) == (1, 0, 0, 1)
    assert "cut_late_refused" in judged_cut(chaos_db, cut, time.time() + 60)


def test_partition_evidence_counts_a_reap_before_expiry_as_no_recovery(chaos_db: Db) -> None:
    job_id, lease, cut = cut_off_with_a_job(chaos_db)
    # a broken reap: takes the lease, valid for another minute
    chaos_db.execute(
        "UPDATE jobq.jobs SET status = 'queued', last_error = %s WHERE id = %s",
        (f"reaped: lease {lease} of w1 went stale", job_id),
    )

    part = partition_evidence(chaos_db, "w1", cut, cut, time.time() + 60)

    assert (part["held"], part["ended"], part["recovered"], part["late_changes"]) == (1, 1, 0, 0)
    assert "cut_recovered" in judged_cut(chaos_db, cut, time.time() + 60)


def test_partition_evidence_counts_a_reap_after_the_heal_as_no_recovery(chaos_db: Db) -> None:
    _, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    heal = time.time()
    time.sleep(0.3)
    chaos_db.execute("SELECT jobq.reap()")  # after the heal: the worker back could have reaped it itself

    part = partition_evidence(chaos_db, "w1", cut, cut, heal)

    assert (part["held"], part["ended"], part["recovered"]) == (1, 1, 0)
    assert "cut_recovered" in judged_cut(chaos_db, cut, heal)


def test_claims_between_counts_a_claim_during_the_cut(chaos_db: Db) -> None:
    cut = time.time()
    claim(chaos_db, enqueue(chaos_db), "w1")  # a worker cut off that went on claiming
    heal = time.time()

    assert claims_between(chaos_db, "w1", cut, heal) == 1
    assert claims_between(chaos_db, "w2", cut, heal) == 0
    assert (first_claim(chaos_db, "w1", cut) or 0) >= cut
    assert first_claim(chaos_db, "w1", heal) is None


def test_the_verdict_fails_a_worker_cut_off_that_went_on_claiming(chaos_db: Db) -> None:
    _, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    time.sleep(0.3)
    chaos_db.execute("SELECT jobq.reap()")  # the others recover its job
    claim(chaos_db, enqueue(chaos_db), "w1")  # and it claims through the partition
    heal = time.time()
    claim(chaos_db, enqueue(chaos_db), "w1")

    assert claims_between(chaos_db, "w1", cut + CONFIG.notice_bound, heal) == 1
    assert judged_cut(chaos_db, cut, heal) == ["cut_stops_claiming"]


def test_a_cut_is_judged_by_the_workers_log_notice_and_refusals(chaos_db: Db) -> None:
    job_id, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    time.sleep(0.3)
    chaos_db.execute("SELECT jobq.reap()")
    heal = time.time()
    claim(chaos_db, enqueue(chaos_db), "w1")
    notice = LogLine(cut + 0.1, "WARNING", "database unavailable (timeout expired); retrying in 1 s")
    refusal = LogLine(heal + 0.5, "WARNING", f"job {job_id}: lease 1 lost; result discarded")
    late_notice = LogLine(cut + CONFIG.notice_bound + 0.5, notice.level, notice.message)  # before the heal
    other_refusal = LogLine(heal + 0.5, "WARNING", f"job {job_id}: lease 2 lost; result discarded")

    assert judged_cut(chaos_db, cut, heal, [notice, refusal]) == []
    assert judged_cut(chaos_db, cut, heal, [refusal]) == ["cut_noticed"]
    assert judged_cut(chaos_db, cut, heal, [late_notice, refusal]) == ["cut_noticed"]
    assert judged_cut(chaos_db, cut, heal, [notice]) == ["cut_late_refused"]
    assert judged_cut(chaos_db, cut, heal, [notice, other_refusal]) == ["cut_late_refused"]


def test_the_verdict_fails_a_worker_that_never_claims_after_the_heal(chaos_db: Db) -> None:
    _, _, cut = cut_off_with_a_job(chaos_db, lease_timeout=0.2)
    time.sleep(0.3)
    chaos_db.execute("SELECT jobq.reap()")
    heal = time.time()

    assert find_cut(chaos_db, CONFIG, cut_record(cut, heal), []).rejoined is None
    assert "cut_rejoined" in judged_cut(chaos_db, cut, heal)


def test_a_half_open_episode_is_judged_by_the_notice_and_the_claim_after_the_heal(chaos_db: Db) -> None:
    began = time.time()
    heal = began + 0.1
    time.sleep(0.2)
    episode = record("half_open", began, heal, half_open=2, destroyed=2, server_left=0)
    notice = LogLine(heal + 1, "WARNING", "database unavailable (connection lost); retrying in 1 s")

    silent = find_open(chaos_db, episode, [])
    claim(chaos_db, enqueue(chaos_db), "w1")
    back = find_open(chaos_db, episode, [notice])

    assert (silent.noticed, silent.rejoined) == (None, None)
    assert back.noticed == pytest.approx(1.0)
    assert back.rejoined is not None and 0 < back.rejoined < 5
    sound = sound_findings(time.time())
    assert failing(chaos_db, dataclasses.replace(sound, opens=[back])) == []
    assert failing(chaos_db, dataclasses.replace(sound, opens=[silent])) == [
        "half_open_noticed",
        "half_open_rejoined",
    ]


def test_a_latency_or_loss_window_is_judged_by_the_hosts_claims_and_notices(chaos_db: Db) -> None:
    began = time.time()
    claim(chaos_db, enqueue(chaos_db), "w1")
    claim(chaos_db, enqueue(chaos_db), "w2")
    ended = time.time()
    window = record("latency", began, ended, rtt=0.2)
    notice = LogLine(began + (ended - began) / 2, "WARNING", "database unavailable (timeout expired)")

    quiet = find_window(chaos_db, window, ["w1", "w2"], [], 0.0)
    noticed = find_window(chaos_db, window, ["w1", "w2"], [notice], 0.0)
    idle = find_window(chaos_db, dataclasses.replace(window, worker="w3"), ["w1", "w2", "w3"], [], 0.0)

    assert (quiet.claims, quiet.others, quiet.unavailable) == (1, {"w2": 1}, 0)
    assert (noticed.unavailable, idle.claims) == (1, 0)
    sound = sound_findings(time.time())
    assert failing(chaos_db, dataclasses.replace(sound, latencies=[quiet])) == []
    assert failing(chaos_db, dataclasses.replace(sound, latencies=[noticed])) == ["latency_works"]
    assert failing(chaos_db, dataclasses.replace(sound, latencies=[idle])) == ["latency_works"]
    assert failing(
        chaos_db,
        dataclasses.replace(sound, losses=[dataclasses.replace(idle, record=sound.losses[0].record)]),
    ) == ["loss_works"]


def measured_wrong(kind: str, **changes: Any) -> Any:
    """A change to sound_findings: the finding of kind (cuts, latencies, losses, opens) with its record's
    measurements changed (record__<field>) or its own fields."""

    def change(findings: Findings) -> Findings:
        (finding,) = getattr(findings, kind)
        own = {k: v for k, v in changes.items() if not k.startswith("record__")}
        measured = {k.removeprefix("record__"): v for k, v in changes.items() if k.startswith("record__")}
        finding = dataclasses.replace(finding, record=dataclasses.replace(finding.record, **measured), **own)
        return dataclasses.replace(findings, **{kind: [finding]})

    return change


# What the harness measured of an episode, or the evidence says of it, gone wrong; the invariants it fails
MEASURED_WRONG = [
    pytest.param(
        measured_wrong("cuts", record__counters=Counters(0, 0)), ["cut_real"], id="a cut dropping nothing"
    ),
    pytest.param(
        measured_wrong("cuts", held=0, recovered=0),
        ["cut_real", "cut_recovered"],
        id="a cut of a worker holding no job",
    ),
    pytest.param(measured_wrong("cuts", noticed=None), ["cut_noticed"], id="a cut never noticed"),
    pytest.param(
        measured_wrong("cuts", noticed=CONFIG.notice_bound + 1), ["cut_noticed"], id="a cut noticed late"
    ),
    pytest.param(
        measured_wrong("cuts", blackout_claims=1), ["cut_stops_claiming"], id="a claim during a cut"
    ),
    pytest.param(
        measured_wrong("cuts", record__cleared_after=None),
        ["cut_server_cleared"],
        id="backends never cleared",
    ),
    pytest.param(
        measured_wrong("cuts", record__cleared_after=CONFIG.server_bound + 1),
        ["cut_server_cleared"],
        id="backends cleared late",
    ),
    pytest.param(
        measured_wrong("cuts", record__backends=0),
        ["cut_server_cleared"],
        id="a cut of a host with no backend",
    ),
    pytest.param(measured_wrong("cuts", recovered=1), ["cut_recovered"], id="a held lease not recovered"),
    pytest.param(measured_wrong("cuts", late=1), ["cut_late_refused"], id="a late acknowledgement accepted"),
    pytest.param(
        measured_wrong("cuts", refused=0), ["cut_late_refused"], id="no late acknowledgement refused"
    ),
    pytest.param(
        measured_wrong("cuts", rejoined=None), ["cut_rejoined"], id="a worker never back after a cut"
    ),
    pytest.param(
        measured_wrong("cuts", rejoined=CONFIG.rejoin_bound + 1),
        ["cut_rejoined"],
        id="a worker back late after a cut",
    ),
    pytest.param(
        measured_wrong("opens", record__half_open=0), ["half_open_real"], id="no connection left half-open"
    ),
    pytest.param(
        measured_wrong("opens", record__server_left=1), ["half_open_real"], id="a server socket left"
    ),
    pytest.param(
        measured_wrong("opens", record__destroyed=0), ["half_open_real"], id="no server socket forgotten"
    ),
    pytest.param(
        measured_wrong("opens", noticed=None), ["half_open_noticed"], id="a half-open never noticed"
    ),
    pytest.param(
        measured_wrong("opens", rejoined=CONFIG.rejoin_bound + 1),
        ["half_open_rejoined"],
        id="back late after a half-open",
    ),
    pytest.param(
        measured_wrong("latencies", record__rtt=None), ["latency_real"], id="no round trip measured"
    ),
    pytest.param(measured_wrong("latencies", record__rtt=0.001), ["latency_real"], id="no latency added"),
    pytest.param(
        measured_wrong("losses", record__counters=Counters(1000, 0)), ["loss_real"], id="no packet lost"
    ),
    pytest.param(
        measured_wrong("losses", record__counters=Counters(1000, 500)),
        ["loss_real"],
        id="half the packets lost",
    ),
    pytest.param(
        measured_wrong("losses", record__counters=Counters(50, 5)), ["loss_real"], id="too few packets seen"
    ),
    pytest.param(measured_wrong("losses", claims=0), ["loss_works"], id="a lossy host not claiming"),
    pytest.param(
        lambda f: dataclasses.replace(f, cuts=[]),
        [key for key in EPISODE_INVARIANTS if key.startswith("cut_")],
        id="no cut",
    ),
    pytest.param(
        lambda f: dataclasses.replace(f, opens=[]),
        [key for key in EPISODE_INVARIANTS if key.startswith("half_open_")],
        id="no half-open",
    ),
    pytest.param(
        lambda f: dataclasses.replace(f, latencies=[]), ["latency_real", "latency_works"], id="no latency"
    ),
    pytest.param(lambda f: dataclasses.replace(f, losses=[]), ["loss_real", "loss_works"], id="no loss"),
]


def test_a_run_whose_episodes_all_went_as_they_should_holds_every_episode_invariant(chaos_db: Db) -> None:
    assert failing(chaos_db, sound_findings(time.time())) == []


@pytest.mark.parametrize(("change", "keys"), MEASURED_WRONG)
def test_the_verdict_fails_a_run_whose_episode_went_wrong(chaos_db: Db, change: Any, keys: list[str]) -> None:
    assert failing(chaos_db, change(sound_findings(time.time()))) == keys


def test_the_verdict_judges_the_leases_the_drain_and_the_exits_of_a_network_run(chaos_db: Db) -> None:
    job_id = enqueue(chaos_db)
    pgjobq.complete(chaos_db, job_id, claim(chaos_db, job_id, "w1"))
    sound = sound_findings(time.time())
    judged = net_verdict(chaos_db, sound)
    claim(chaos_db, enqueue(chaos_db), "w2", lease_timeout=30)  # not its length, and left running
    broken = net_verdict(chaos_db, sound)

    assert [judged[key].ok for key in ("lease_lengths", "drained", "clean_exit", "no_crashes")] == [True] * 4
    assert (broken["lease_lengths"].ok, broken["drained"].ok) == (False, False)
    assert net_verdict(chaos_db, sound, exits={"w1": 0, "w2": None})["clean_exit"].ok is False
    assert net_verdict(chaos_db, sound, exits={})["clean_exit"].ok is False
    assert net_verdict(chaos_db, sound, unexpected=(("w3", 1),))["no_crashes"].ok is False


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
    is missing, where network namespaces cannot be made (failed where PGJOBQ_REQUIRE names netns).
    """
    reason = unsupported()
    if reason is not None:
        required.skip_or_fail("netns", f"the network chaos run needs network namespaces: {reason}")
    once_per_run("chaos-net", "the network chaos run")
    try:
        result = run_chaos_net(NetConfig.short(), tmp_path_factory.mktemp("chaos-net"))
    except Unsupported as exc:
        required.skip_or_fail("netns", f"the network chaos run needs network namespaces: {exc}")
    render(result, Console(width=150))
    yield result


@pytest.mark.slow
def test_network_chaos_judges_every_invariant_the_harness_declares_and_no_other(report: NetReport) -> None:
    assert sorted(report.keys()) == sorted(INVARIANTS)


@pytest.mark.slow
@pytest.mark.parametrize("key", INVARIANTS)
def test_network_chaos_holds_the_invariant(report: NetReport, key: str) -> None:
    report.assert_holds(key)
