"""The failover run's checks on evidence outside the database, on hand-written logs (no database).

tests/chaos/failover.py judges a synchronous failover's headline invariants (enqueues_survive,
acks_hold, leases_once) from the producer's log of the ids it was given and the workers' logs of every
execution and accepted acknowledgement, against the new primary's jobs.  Here those logs are written by
hand: a sound history holds all three, and each of a lease issued twice, an id given to two jobs, an
acknowledgement undone, a job gone, a lost enqueue and a run that logged nothing fails its invariant.
"""

from __future__ import annotations

from chaos.chaos import Invariant
from chaos.failover import (
    Outside,
    WorkerLog,
    judge_enqueues,
    judge_outside,
    outside_invariants,
    read_log,
)

# Unix times of the failover: the primary killed, the standby promoted
KILLED, PROMOTED = 100.0, 106.0


def sound_logs() -> list[WorkerLog]:
    """Two workers: w1 runs job 1 (payload 10) and acknowledges it before the kill; w2 runs job 2
    (payload 11) from before the kill, and acknowledges it once reconnected to the promoted standby."""
    return [
        WorkerLog("w1", executions=[((1, 10), 1, 90.0)], done=[((1, 10), 91.0)]),
        WorkerLog("w2", executions=[((2, 11), 1, 98.0)], done=[((2, 11), 108.0)]),
    ]


# the new primary's jobs after the sound history: id -> (status, payload number)
SOUND_FINAL = {1: ("done", 10), 2: ("done", 11)}
# the producer's enqueues whose commit returned: (id, payload number), the first two before the kill
SOUND_GIVEN = [(1, 10), (2, 11), (3, 12)]
SOUND_FINAL_ALL = {**SOUND_FINAL, 3: ("done", 12)}


def judged(
    logs: list[WorkerLog],
    final: dict[int, tuple[str, int]] = SOUND_FINAL_ALL,
    given: list[tuple[int, int]] = SOUND_GIVEN,
) -> dict[str, Invariant]:
    """The three invariants, by key, of the logs and the producer's enqueues against final."""
    outside = judge_outside(logs, final, KILLED, PROMOTED)
    return {i.key: i for i in outside_invariants(judge_enqueues(given, 2, final), outside)}


def failing(
    logs: list[WorkerLog],
    final: dict[int, tuple[str, int]] = SOUND_FINAL_ALL,
    given: list[tuple[int, int]] = SOUND_GIVEN,
) -> list[str]:
    """The keys of those invariants that fail."""
    return [key for key, invariant in judged(logs, final, given).items() if not invariant.ok]


def test_a_sound_history_holds_every_invariant_outside_the_database() -> None:
    outside = judge_outside(sound_logs(), SOUND_FINAL_ALL, KILLED, PROMOTED)

    assert outside == Outside(
        executions=2, acks=2, undone=[], gone=[], reissued_leases=[], reissued_ids=[], owed_sent=1,
        owed_held=1, refused_after=0,
    )  # fmt: skip
    assert failing(sound_logs()) == []


def test_one_lease_executed_by_two_workers_is_reissued() -> None:
    logs = sound_logs()
    logs[1].executions.append(((1, 10), 1, 109.0))  # w2 runs job 1 under the lease w1 had

    outside = judge_outside(logs, SOUND_FINAL_ALL, KILLED, PROMOTED)

    assert outside.reissued_leases == [((1, 10), 1)]
    assert "leases_once" in failing(logs)


def test_one_id_executed_for_two_payloads_is_reissued() -> None:
    logs = sound_logs()
    logs[1].executions.append(((1, 13), 1, 109.0))  # the promoted standby gave id 1 to another job

    outside = judge_outside(logs, SOUND_FINAL_ALL, KILLED, PROMOTED)

    assert outside.reissued_ids == [1]
    assert "leases_once" in failing(logs)


def test_a_run_that_logged_no_execution_proves_nothing_of_its_leases() -> None:
    logs = [WorkerLog("w1"), WorkerLog("w2")]

    assert judge_outside(logs, SOUND_FINAL_ALL, KILLED, PROMOTED).executions == 0
    assert failing(logs) == ["acks_hold", "leases_once"]


def test_an_acknowledged_job_run_again_is_undone() -> None:
    logs = sound_logs()
    logs[1].executions.append(((1, 10), 2, 110.0))  # job 1, acknowledged before the kill, runs again

    outside = judge_outside(logs, SOUND_FINAL_ALL, KILLED, PROMOTED)

    assert (outside.undone, outside.gone) == ([(1, 10)], [])
    assert failing(logs) == ["acks_hold"]


def test_an_acknowledged_job_not_done_at_the_end_is_undone() -> None:
    final = {**SOUND_FINAL_ALL, 1: ("queued", 10)}  # the promoted standby never had its completion

    outside = judge_outside(sound_logs(), final, KILLED, PROMOTED)

    assert outside.undone == [(1, 10)]
    assert failing(sound_logs(), final=final) == ["acks_hold"]


def test_an_acknowledged_job_whose_id_is_missing_or_another_jobs_is_gone() -> None:
    for final in ({2: ("done", 11), 3: ("done", 12)}, {**SOUND_FINAL_ALL, 1: ("done", 14)}):
        outside = judge_outside(sound_logs(), final, KILLED, PROMOTED)

        assert (outside.undone, outside.gone) == ([], [(1, 10)])
        assert "acks_hold" in failing(sound_logs(), final=final)


def test_an_acknowledgement_owed_at_the_kill_and_undone_is_not_held() -> None:
    logs = sound_logs()
    final = {**SOUND_FINAL_ALL, 2: ("queued", 11)}

    outside = judge_outside(logs, final, KILLED, PROMOTED)

    assert (outside.owed_sent, outside.owed_held, outside.undone) == (1, 0, [(2, 11)])
    assert failing(logs, final=final) == ["acks_hold"]


def test_a_run_with_no_acknowledgement_owed_across_the_kill_proves_nothing_of_them() -> None:
    logs = sound_logs()
    logs[1].done[0] = ((2, 11), 99.0)  # acknowledged before the kill after all

    assert judge_outside(logs, SOUND_FINAL_ALL, KILLED, PROMOTED).owed_sent == 0
    assert failing(logs) == ["acks_hold"]


def test_an_enqueue_returned_before_the_kill_and_missing_or_another_jobs_is_lost() -> None:
    for final in ({1: ("done", 10), 3: ("done", 12)}, {**SOUND_FINAL_ALL, 2: ("done", 99)}):
        enqueues = judge_enqueues(SOUND_GIVEN, 2, final)

        assert len(enqueues.missing) + len(enqueues.other) == 1
        assert "enqueues_survive" in failing(sound_logs(), final=final)


def test_an_enqueue_returned_after_the_promotion_and_missing_is_lost() -> None:
    final = dict(SOUND_FINAL)

    assert judge_enqueues(SOUND_GIVEN, 2, final).after_lost == [3]
    assert failing(sound_logs(), final=final) == ["enqueues_survive"]


def test_a_producer_given_nothing_before_the_kill_proves_nothing_of_its_enqueues() -> None:
    assert judge_enqueues([], 0, SOUND_FINAL_ALL).before == 0
    assert failing(sound_logs(), given=[]) == ["enqueues_survive"]


LOG = """\
2024-06-14 12:00:00,100 INFO pgjobq.worker: worker w001 started on queue chaos (pgjobq 0.9.0)
2024-06-14 12:00:01,000 INFO failover.handler: execution of job 7 (payload 70) under lease 1 (attempt 1)
2024-06-14 12:00:01,200 INFO pgjobq.worker: job 7 done (attempt 1)
2024-06-14 12:00:02,000 WARNING pgjobq.worker: database unavailable (connection lost); retrying in 0.5 s
Traceback (most recent call last):
2024-06-14 12:00:09,000 INFO failover.handler: execution of job 8 (payload 80) under lease 2 (attempt 2)
2024-06-14 12:00:09,500 WARNING pgjobq.worker: job 8: lease 2 lost; result discarded
2024-06-14 12:00:09,600 WARNING pgjobq.worker: database is read-only (25006); retrying in 1.0 s
"""


def test_a_workers_log_gives_its_executions_acknowledgements_refusals_and_outages() -> None:
    log = read_log("w001", LOG)
    started = log.executions[0][2] - 0.9

    assert [(run, lease) for run, lease, _ in log.executions] == [((7, 70), 1), ((8, 80), 2)]
    assert [run for run, _ in log.done] == [(7, 70)]  # the payload of its latest execution of the id
    assert [(job, lease) for job, lease, _ in log.refused] == [(8, 2)]
    assert [round(at - started, 3) for at in log.unavailable] == [1.9, 9.5]
