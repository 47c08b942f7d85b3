"""The application's tests of its tasks: pgjobq.testing runs the jobs due, here and now."""

from __future__ import annotations

from typing import Any

import psycopg

import pgjobq.testing
from examples.tasks_app.tasks import charge, render_report, send_welcome, tasks


def test_a_new_user_is_welcomed(conn: psycopg.Connection[Any]) -> None:
    send_welcome.enqueue(conn, user_id=7)

    [ran] = pgjobq.testing.run_due(conn, tasks)

    assert ran.status == "done"
    assert ran.result == "welcome sent to user 7"


def test_a_report_is_rendered(conn: psycopg.Connection[Any]) -> None:
    render_report.enqueue(conn, report_id=3)

    [ran] = pgjobq.testing.run_due(conn, tasks)

    assert ran.result == {"report": 3, "attempt": 1}


def test_a_bad_amount_fails_at_once(conn: psycopg.Connection[Any]) -> None:
    charge.enqueue(conn, order_id=1, cents=0)

    [ran] = pgjobq.testing.run_due(conn, tasks)

    assert ran.status == "failed"
    assert ran.error is not None and "cannot charge 0 cents" in ran.error
