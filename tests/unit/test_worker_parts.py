"""The small parts both workers share, without a database: cancel notifications, the reconnect backoff,
the handlers' results and kinds, and how an outcome is reported."""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from typing import Any

import pytest

from pgjobq import InvalidArgument, Job, LeaseLost, Retry, Snooze
from pgjobq._client.proto import Call
from pgjobq._worker.acks import CancelledUnstarted, encode_result, is_coroutine_function, report
from pgjobq._worker.backoff import Backoff
from pgjobq._worker.listen import cancel_ids
from pgjobq._worker.steps import drive


def test_a_cancel_notification_names_its_job_ids() -> None:
    assert cancel_ids("cancel:12,7,x") == {12, 7}


def test_any_other_notification_is_a_wake_up() -> None:
    assert cancel_ids("") is None
    assert cancel_ids("12") is None


def test_the_backoff_doubles_from_half_a_second_up_to_its_cap_with_at_most_a_quarter_less() -> None:
    backoff = Backoff(cap=3.0)

    waits = [backoff.next() for _ in range(5)]

    for wait, full in zip(waits, [0.5, 1.0, 2.0, 3.0, 3.0], strict=True):
        assert 0.75 * full <= wait <= full


def test_the_backoff_starts_over_once_reset() -> None:
    backoff = Backoff(cap=10.0)
    for _ in range(4):
        backoff.next()

    backoff.reset()

    assert backoff.next() <= 0.5


def test_a_result_is_stored_as_json_text_and_none_is_no_result() -> None:
    assert encode_result(print, {"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert encode_result(print, None) is None


def test_a_result_json_cannot_store_fails_the_job_naming_its_type() -> None:
    with pytest.raises(InvalidArgument, match="a set"):
        encode_result(print, {1, 2})


async def coroutine_handler(job: Job) -> None:
    pass


class CoroutineCall:
    async def __call__(self, job: Job) -> None:
        pass


def test_coroutine_functions_are_told_from_plain_ones() -> None:
    assert is_coroutine_function(coroutine_handler)
    assert is_coroutine_function(CoroutineCall())
    assert is_coroutine_function(functools.partial(coroutine_handler))
    assert not is_coroutine_function(print)
    assert not is_coroutine_function(lambda job: coroutine_handler(job))


# -- reporting a job whose lease the worker presumed lost ----------------------


def presumed_lost_job() -> Job:
    job = Job(id=7, queue="q", payload={}, priority=0, attempts=1, max_attempts=1, lease=3)
    job._presume_lost()
    return job


@pytest.mark.parametrize("error", [RuntimeError("stopped"), Retry(5), CancelledUnstarted()])
def test_a_job_whose_lease_was_presumed_lost_is_handed_back_not_failed(error: BaseException) -> None:
    job = presumed_lost_job()
    sent: list[str] = []

    def run(call: Call[Any]) -> None:
        sent.append(call.name)

    assert drive(report(job, error), run) == "released"
    assert sent == ["release"]
    assert job.cancel_requested.is_set()


def test_a_snooze_after_the_presumption_still_snoozes() -> None:
    sent: list[str] = []

    def run(call: Call[Any]) -> datetime:
        sent.append(call.name)
        return datetime.now(timezone.utc)

    assert drive(report(presumed_lost_job(), Snooze(1)), run) == "snoozed"
    assert sent == ["snooze"]


def test_a_hand_back_the_database_refuses_is_lost() -> None:
    def run(call: Call[Any]) -> None:
        raise LeaseLost("lease 3 of job 7 is not current")

    assert drive(report(presumed_lost_job(), RuntimeError("stopped")), run) == "lost"


def test_a_job_asked_to_stop_by_the_database_still_fails() -> None:
    job = Job(id=7, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, lease=3)
    job._request_cancel()
    sent: list[str] = []

    def run(call: Call[Any]) -> tuple[str, None]:
        sent.append(call.name)
        return ("cancelled", None)

    assert drive(report(job, RuntimeError("stopped")), run) == "cancelled"
    assert sent == ["fail"]
