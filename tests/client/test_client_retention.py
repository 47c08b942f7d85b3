"""The client's retention settings (extension 0.10.0): configure_queue's retain_done, retain_failed,
retain_cancelled and keep_forever, and the retention that queues() and queue_overview() report.

On extension 0.9.0, which has no retention, a call that sets or unsets one raises IncompatibleExtension
saying retention needs 0.10.0 and changes nothing; every other configure_queue call, queues() and
queue_overview() keep working there, with every retention None (finished jobs are kept until purged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres

import pgjobq
import pgjobq.aio
from pgjobq import IncompatibleExtension

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Db, scalar

DAY = timedelta(days=1)
DEFAULTS = (DAY, 14 * DAY, 7 * DAY)  # done, failed, cancelled
NEEDS_0_10_0 = r"^retention settings need the pgjobq extension 0\.10\.0 or later: "


def retention(settings: pgjobq.QueueSettings) -> tuple[timedelta | None, ...]:
    """The queue's retention of done, failed and cancelled jobs."""
    return settings.retain_done, settings.retain_failed, settings.retain_cancelled


def stored(db: Db, queue: str) -> dict[str, Any] | None:
    """The queue's row of jobq.queue_settings: its retention settings as given (NULL: the default)."""
    row: dict[str, Any] | None = db.execute(
        "SELECT retain_done, retain_failed, retain_cancelled, keep_forever FROM jobq.queue_settings"
        " WHERE queue = %s",
        (queue,),
    ).fetchone()
    return row


@pytest.fixture
def old_db(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database of its own at extension 0.9.0, which has no retention; dropped after the test."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.9.0'")
        yield conn


# -- extension 0.10.0 -----------------------------------------------------------------------------


def test_a_queue_configured_without_retention_keeps_finished_jobs_for_the_defaults(db: Db) -> None:
    settings = pgjobq.configure_queue(db, "emails", max_attempts=5)

    assert retention(settings) == DEFAULTS


def test_configure_queue_sets_each_states_retention_and_returns_it(db: Db) -> None:
    settings = pgjobq.configure_queue(
        db,
        "emails",
        retain_done=timedelta(0),
        retain_failed=timedelta(days=30),
        retain_cancelled=timedelta(hours=2),
    )

    assert retention(settings) == (timedelta(0), timedelta(days=30), timedelta(hours=2))


def test_keep_forever_keeps_the_states_it_names_until_purged_and_leaves_the_others(db: Db) -> None:
    settings = pgjobq.configure_queue(db, "invoices", keep_forever=["done", "failed"])

    assert retention(settings) == (None, None, 7 * DAY)


def test_keep_forever_replaces_the_list_the_queue_had(db: Db) -> None:
    pgjobq.configure_queue(db, "invoices", keep_forever=["done", "failed"])

    settings = pgjobq.configure_queue(db, "invoices", keep_forever=("cancelled",))

    assert retention(settings) == (DAY, 14 * DAY, None)


def test_an_empty_keep_forever_clears_the_list(db: Db) -> None:
    pgjobq.configure_queue(db, "invoices", keep_forever=["done"])

    settings = pgjobq.configure_queue(db, "invoices", keep_forever=[])

    assert retention(settings) == DEFAULTS


def test_a_retention_given_later_takes_its_state_off_keep_forever(db: Db) -> None:
    pgjobq.configure_queue(db, "invoices", keep_forever=["done", "failed"])

    settings = pgjobq.configure_queue(db, "invoices", retain_done=timedelta(hours=1))

    assert retention(settings) == (timedelta(hours=1), None, 7 * DAY)


def test_configure_queue_without_retention_leaves_the_retention_as_it_was(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", retain_done=timedelta(hours=3), keep_forever=["failed"])

    settings = pgjobq.configure_queue(db, "emails", max_attempts=7)

    assert retention(settings) == (timedelta(hours=3), None, 7 * DAY)


def test_unset_puts_a_retention_back_to_its_default(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", retain_done=timedelta(hours=3), retain_failed=timedelta(days=2))

    settings = pgjobq.configure_queue(db, "emails", unset=["retain_done"])

    assert retention(settings) == (DAY, timedelta(days=2), 7 * DAY)


def test_unset_keep_forever_empties_the_list(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", keep_forever=["done", "cancelled"])

    settings = pgjobq.configure_queue(db, "emails", unset=["keep_forever"])

    assert retention(settings) == DEFAULTS
    assert stored(db, "emails") == {
        "retain_done": None, "retain_failed": None, "retain_cancelled": None, "keep_forever": None,
    }  # fmt: skip


def test_queues_reports_each_queues_retention(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", retain_done=timedelta(minutes=5))
    pgjobq.configure_queue(db, "invoices", keep_forever=["done"])
    pgjobq.enqueue(db, "pdfs", {})  # not configured: the defaults

    by_queue = {row.queue: retention(row) for row in pgjobq.queues(db)}

    assert by_queue == {
        "emails": (timedelta(minutes=5), 14 * DAY, 7 * DAY),
        "invoices": (None, 14 * DAY, 7 * DAY),
        "pdfs": DEFAULTS,
    }


def test_queue_overview_reports_each_queues_retention_beside_its_counts(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", retain_failed=timedelta(days=60))
    pgjobq.enqueue(db, "emails", {})

    (row,) = pgjobq.queue_overview(db)

    assert (row.queue, row.queued, *retention(row)) == ("emails", 1, DAY, timedelta(days=60), 7 * DAY)


def test_a_retention_of_days_hours_and_fractions_of_a_second_reads_back_exactly(db: Db) -> None:
    given = timedelta(days=1, hours=12, seconds=1, microseconds=500)

    settings = pgjobq.configure_queue(db, "emails", retain_done=given)
    (listed,) = pgjobq.queues(db)

    assert retention(settings) == retention(listed) == (given, 14 * DAY, 7 * DAY)


def test_aio_configure_queue_sets_the_retention_and_queues_reports_it(dsn: str) -> None:
    async def main() -> tuple[pgjobq.QueueSettings, list[pgjobq.QueueSettings]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            settings = await pgjobq.aio.configure_queue(
                conn, "emails", retain_cancelled=timedelta(hours=1), keep_forever=["failed"]
            )
            return settings, await pgjobq.aio.queues(conn)

    settings, listed = asyncio.run(main())

    assert retention(settings) == (DAY, None, timedelta(hours=1))
    assert [retention(row) for row in listed] == [retention(settings)]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"retain_done": timedelta(seconds=-1)}, "retain_done must be an interval from 0 to 10 years"),
        ({"retain_failed": timedelta(days=3700)}, "retain_failed must be an interval from 0 to 10 years"),
        ({"keep_forever": ["done", "later"]}, r"keep_forever\[2\] must be done, failed or cancelled"),
        (
            {"keep_forever": ["done"], "retain_done": DAY},
            "keep_forever must not name a state whose retention is also given or unset",
        ),
    ],
)
def test_configure_queue_refuses_a_retention_out_of_its_domain_naming_it(
    db: Db, options: dict[str, Any], expected: str
) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match=f"^{expected}") as raised:
        pgjobq.configure_queue(db, "emails", **options)

    assert raised.value.sqlstate == "22023"
    assert pgjobq.queues(db) == []


# -- extension 0.9.0 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"retain_done": timedelta(hours=1)},
        {"retain_failed": timedelta(days=30), "max_attempts": 5},
        {"retain_cancelled": timedelta(0)},
        {"keep_forever": ["done"]},
        {"keep_forever": []},
        {"unset": ["retain_done"]},
        {"unset": ["timeout", "keep_forever"]},
    ],
)
def test_a_retention_on_0_9_0_says_it_needs_0_10_0_and_changes_nothing(
    old_db: Db, options: dict[str, Any]
) -> None:
    with pytest.raises(IncompatibleExtension, match=NEEDS_0_10_0):
        pgjobq.configure_queue(old_db, "emails", **options)

    assert scalar(old_db, "SELECT count(*) FROM jobq.queue_settings") == 0


def test_aio_a_retention_on_0_9_0_says_it_needs_0_10_0(old_db: Db, pg_server: ThrowawayPostgres) -> None:
    async def main() -> None:
        dsn = pg_server.dsn(old_db.info.dbname)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await pgjobq.aio.configure_queue(conn, "emails", retain_done=timedelta(hours=1))

    with pytest.raises(IncompatibleExtension, match=NEEDS_0_10_0):
        asyncio.run(main())


def test_configure_queue_without_retention_still_works_on_0_9_0_and_reports_none(old_db: Db) -> None:
    settings = pgjobq.configure_queue(old_db, "emails", max_attempts=5, unset=["timeout"])

    assert (settings.max_attempts, *retention(settings)) == (5, None, None, None)


def test_queues_and_queue_overview_still_work_on_0_9_0_and_report_no_retention(old_db: Db) -> None:
    old_db.execute("SELECT jobq.configure_queue('emails', concurrency => 2)")
    old_db.execute("SELECT jobq.enqueue('pdfs', '{}')")

    listed = pgjobq.queues(old_db)
    overview = pgjobq.queue_overview(old_db)

    assert [(row.queue, *retention(row)) for row in listed] == [
        ("emails", None, None, None),
        ("pdfs", None, None, None),
    ]
    assert [(row.queue, row.queued, row.concurrency, *retention(row)) for row in overview] == [
        ("emails", 0, 2, None, None, None),
        ("pdfs", 1, None, None, None, None),
    ]
