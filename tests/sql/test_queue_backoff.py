"""jobq.configure_queue refuses a backoff_base above the backoff_max the queue would have (0.10.0).

A retry waits least(backoff_max, backoff_base * 2^attempts): a base above the max would be ignored
without a word.  The two compared are the queue's after the call: each as given, else as stored unless
unset, else its default (1 second, 300 seconds).  The cases of one call alone are in test_bad_input.py.
"""

from __future__ import annotations

import psycopg
import pytest

from helpers.sqlhelpers import Db, scalar


def backoff(db: Db) -> tuple[str, str]:
    row = db.execute("SELECT backoff_base::text, backoff_max::text FROM jobq.queues WHERE queue = 'emails'")
    base, most = next(iter(row)).values()
    return base, most


def refused(db: Db, call: str) -> tuple[str | None, str]:
    """The SQLSTATE and message of a refused call (and the settings kept as they were)."""
    before = backoff(db)
    with pytest.raises(psycopg.Error) as raised:
        db.execute(call)
    assert backoff(db) == before
    return raised.value.sqlstate, raised.value.diag.message_primary or ""


def test_a_base_above_the_stored_max_is_refused_by_its_name(db: Db) -> None:
    db.execute("SELECT * FROM jobq.configure_queue('emails', backoff_max => '1 minute')")

    state, message = refused(db, "SELECT * FROM jobq.configure_queue('emails', backoff_base => '2 minutes')")

    assert (state, message) == ("22023", "backoff_base must be at most backoff_max (00:01:00), got 00:02:00")


def test_a_max_below_the_stored_base_is_refused_by_its_name(db: Db) -> None:
    db.execute("SELECT * FROM jobq.configure_queue('emails', backoff_base => '1 minute')")

    state, message = refused(db, "SELECT * FROM jobq.configure_queue('emails', backoff_max => '30 seconds')")

    assert (state, message) == ("22023", "backoff_max must be at least backoff_base (00:01:00), got 00:00:30")


def test_unsetting_the_max_under_a_stored_base_above_its_default_is_refused(db: Db) -> None:
    db.execute(
        "SELECT * FROM jobq.configure_queue('emails', backoff_base => '10 minutes', backoff_max => '1 hour')"
    )

    state, message = refused(
        db, "SELECT * FROM jobq.configure_queue('emails', unset => ARRAY['backoff_max'])"
    )

    assert (state, message) == ("22023", "backoff_max must be at least backoff_base (00:10:00), got 00:05:00")


def test_moving_both_past_the_other_in_one_call_is_accepted(db: Db) -> None:
    db.execute(
        "SELECT * FROM jobq.configure_queue('emails', backoff_base => '1 second', backoff_max => '2 seconds')"
    )

    db.execute(
        "SELECT * FROM jobq.configure_queue('emails', backoff_base => '1 hour', backoff_max => '2 hours')"
    )

    assert backoff(db) == ("01:00:00", "02:00:00")


def test_a_base_equal_to_the_max_is_accepted(db: Db) -> None:
    db.execute("SELECT * FROM jobq.configure_queue('emails', backoff_base => '5 minutes')")

    assert scalar(db, "SELECT backoff_base = backoff_max FROM jobq.queues WHERE queue = 'emails'") is True
