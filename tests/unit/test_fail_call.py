"""The call pgjobq.fail and pgjobq.aio.fail send (pgjobq._client.proto.fail), without a database: retry
True sends the statement every supported extension version takes, retry False 0.9.0's failure for good."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgjobq import InvalidArgument
from pgjobq._client import proto
from pgjobq._queries import query


def test_a_failure_to_retry_sends_the_statement_without_a_retry_argument() -> None:
    call = proto.fail(7, "boom", 3, timedelta(seconds=5))

    assert call.name == "fail"
    assert "retry =>" not in query(call.name)
    assert call.params == {"id": 7, "lease": 3, "error": "boom", "retry_in": timedelta(seconds=5)}


def test_a_failure_for_good_sends_retry_false() -> None:
    call = proto.fail(7, "boom", 3, None, retry=False)

    assert call.name == "fail_for_good"
    assert "retry => false" in query(call.name)
    assert call.params == {"id": 7, "lease": 3, "error": "boom"}


def test_retry_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgument, match="retry must be a bool, got str"):
        proto.fail(7, "boom", 3, None, retry="no")  # type: ignore[arg-type]


def test_a_failure_for_good_takes_no_retry_in() -> None:
    with pytest.raises(InvalidArgument, match="retry_in must be None when retry is False"):
        proto.fail(7, "boom", 3, timedelta(seconds=5), retry=False)
