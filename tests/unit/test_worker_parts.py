"""The small parts both workers share, without a database: cancel notifications, the reconnect backoff,
the handlers' results and kinds."""

from __future__ import annotations

import functools

import pytest

from pgjobq import InvalidArgument, Job
from pgjobq._acks import encode_result, is_coroutine_function
from pgjobq._backoff import Backoff
from pgjobq._listen import cancel_ids


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
