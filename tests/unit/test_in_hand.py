"""InHand, the jobs a worker holds, without a database: the bookkeeping both workers share."""

from __future__ import annotations

from pgjobq import Job
from pgjobq._worker.in_hand import InHand


def make_job(job_id: int, lease: int = 1) -> Job:
    return Job(id=job_id, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, lease=lease)


def test_claimed_jobs_start_in_claim_order_and_stay_in_hand_until_acknowledged() -> None:
    hand = InHand()
    hand.hold([make_job(1), make_job(2)])

    first = hand.next_to_start()
    assert first is not None and first.id == 1
    hand.start(first)
    assert [job.id for job in hand.unfinished()] == [1, 2]

    hand.record(first, None, None, now=5.0)

    assert [job.id for job in hand.unfinished()] == [2]
    assert len(hand) == 2 and hand.pending == 1


def test_an_empty_backlog_has_no_next_job() -> None:
    assert InHand().next_to_start() is None
    assert not InHand()


def test_acknowledgements_are_due_once_the_oldest_outcome_has_waited_the_interval() -> None:
    hand = InHand()
    hand.record(make_job(1), None, None, now=10.0)
    hand.record(make_job(2), RuntimeError("x"), None, now=10.5)

    assert not hand.ack_due(10.9, interval=1.0)
    assert hand.ack_due(11.0, interval=1.0)  # the oldest, not the newest, sets the clock


def test_nothing_collected_is_never_due() -> None:
    assert not InHand().ack_due(1e9, interval=0.0)


def test_successes_are_taken_with_their_results_aligned_and_none_where_a_job_has_none() -> None:
    hand = InHand()
    hand.record(make_job(1), None, '{"a":1}', now=0.0)
    hand.record(make_job(2), None, None, now=0.0)

    successes, results = hand.take_successes()

    assert [job.id for job in successes] == [1, 2]
    assert results == ['{"a":1}', None]
    assert hand.take_successes() == ([], None)


def test_successes_without_any_result_are_taken_with_no_results_list() -> None:
    hand = InHand()
    hand.record(make_job(1), None, None, now=0.0)

    assert hand.take_successes()[1] is None


def test_restored_successes_go_back_ahead_of_newer_ones_with_their_results() -> None:
    hand = InHand()
    hand.record(make_job(1), None, '"r"', now=0.0)
    taken = hand.take_successes()
    hand.record(make_job(2), None, None, now=3.0)

    hand.restore_successes(*taken, now=4.0)

    successes, results = hand.take_successes()
    assert [job.id for job in successes] == [1, 2]
    assert results == ['"r"', None]


def test_restoring_into_an_empty_hand_restarts_the_acknowledgement_clock() -> None:
    hand = InHand()
    hand.record(make_job(1), None, None, now=0.0)
    taken = hand.take_successes()

    hand.restore_successes(*taken, now=7.0)

    assert not hand.ack_due(7.5, interval=1.0)
    assert hand.ack_due(8.0, interval=1.0)


def test_results_are_kept_per_claim_so_a_reclaimed_jobs_new_lease_is_its_own() -> None:
    hand = InHand()
    hand.record(make_job(1, lease=1), None, '"old"', now=0.0)
    hand.record(make_job(1, lease=2), None, '"new"', now=0.0)

    assert hand.take_successes()[1] == ['"old"', '"new"']
