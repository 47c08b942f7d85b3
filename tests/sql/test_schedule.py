"""Schedules: jobq.schedule, unschedule, the view jobq.schedules, and jobq.tick (driven by jobq._tick(at))."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, login_role
from helpers.sqlhelpers import Db, claim_one, make_runnable, scalar, statuses

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major, fresh and
# upgraded; on every other major the isolation specs (tests/isolation) and the bad-input table
# (tests/sql/test_bad_input.py) run these functions, and each major is where locking and plans differ.
pytestmark = pytest.mark.main_targets

UTC = timezone.utc
# a fixed clock for the ticks, in the future (run_at must stay within 10 years of now)
ANCHOR = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)


def schedule(db: Db, name: str = "nightly", queue: str = "default", **options: Any) -> dict[str, Any]:
    """jobq.schedule(name, queue, <options by name>); returns its row of jobq.schedules."""
    if "payload" in options:
        options["payload"] = Jsonb(options["payload"])
    if "headers" in options and options["headers"] is not None:
        options["headers"] = Jsonb(options["headers"])
    named = "".join(f", {option} => %({option})s" for option in options)
    row = db.execute(
        f"SELECT * FROM jobq.schedule(%(name)s, %(queue)s{named})", {"name": name, "queue": queue, **options}
    ).fetchone()
    assert row is not None
    return row


def tick(db: Db, at: datetime) -> int:
    enqueued = scalar(db, "SELECT jobq._tick(%s)", (at,))
    assert isinstance(enqueued, int)
    return enqueued


def set_next_at(db: Db, name: str, next_at: datetime) -> None:
    db.execute("UPDATE jobq.schedule_settings SET next_at = %s WHERE name = %s", (next_at, name))


def next_at(db: Db, name: str = "nightly") -> datetime:
    value = scalar(db, "SELECT next_at FROM jobq.schedule_settings WHERE name = %s", (name,))
    assert isinstance(value, datetime)
    return value


def jobs(db: Db) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT j.id, j.status, j.run_at, j.headers, j.payload, j.priority, j.max_attempts, k.unique_key,"
        " k.until_done FROM jobq.jobs AS j LEFT JOIN jobq.unique_keys AS k ON k.job_id = j.id ORDER BY j.id"
    ).fetchall()


def occurrence_key(name: str, moment: datetime) -> str:
    return f"cron:{name}:{int(moment.timestamp())}"


# -- schedule, the view, unschedule ---------------------------------------------------------------------


def test_schedule_creates_a_schedule_and_returns_its_row_of_the_view(db: Db) -> None:
    row = schedule(
        db,
        payload={"report": "daily"},
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        priority=5,
        max_attempts=2,
        headers={"team": "ops"},
        catch_up="skip",
    )

    expected_next = scalar(db, "SELECT jobq._cron_next('0 3 * * *', 'Europe/Berlin', now())")
    assert {
        k: row[k]
        for k in (
            "name",
            "queue",
            "payload",
            "cron",
            "timezone",
            "every",
            "priority",
            "max_attempts",
            "headers",
            "catch_up",
        )
    } == {
        "name": "nightly",
        "queue": "default",
        "payload": {"report": "daily"},
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "every": None,
        "priority": 5,
        "max_attempts": 2,
        "headers": {"team": "ops"},
        "catch_up": "skip",
    }
    assert row["next_run"] == row["next_at"] == expected_next
    assert db.execute("SELECT name FROM jobq.schedules").fetchall() == [{"name": "nightly"}]
    assert statuses(db) == {}  # nothing is enqueued before a tick


def test_the_view_shows_the_next_occurrence_after_now(db: Db) -> None:
    schedule(db, every=timedelta(hours=1))
    set_next_at(db, "nightly", ANCHOR - timedelta(days=3))  # missed ones do not change next_run

    row = db.execute("SELECT next_run, now() AS now FROM jobq.schedules").fetchone()

    assert row is not None
    assert row["next_run"] == (row["now"] + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)


def test_a_replace_cancels_the_queued_occurrences_and_starts_afresh_from_now(db: Db) -> None:
    schedule(db, every=timedelta(seconds=10), payload={"v": 1})
    assert tick(db, datetime.now(UTC)) >= 6  # the minute ahead
    make_runnable(db, jobs(db)[0]["id"])
    running = claim_one(db)["id"]

    row = schedule(db, every=timedelta(hours=1), payload={"v": 2})

    assert statuses(db) == {"running": 1, "cancelled": len(jobs(db)) - 1}
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (running,)) == "running"
    assert row["payload"] == {"v": 2}
    assert row["next_at"] == scalar(db, "SELECT jobq._every_next('1 hour', now())")
    assert row["created_at"] < row["updated_at"]


def test_a_replace_into_another_queue_cancels_the_old_queues_occurrences(db: Db) -> None:
    schedule(db, queue="old", every=timedelta(seconds=30))
    tick(db, datetime.now(UTC))

    schedule(db, queue="new", every=timedelta(seconds=30))

    assert {row["status"] for row in jobs(db)} == {"cancelled"}


def test_unschedule_deletes_the_schedule_and_cancels_its_queued_occurrences(db: Db) -> None:
    schedule(db, every=timedelta(seconds=10))
    schedule(db, "other", queue="elsewhere", every=timedelta(seconds=10))
    tick(db, datetime.now(UTC))
    make_runnable(db, jobs(db)[0]["id"])
    claim_one(db)  # one of nightly's: it runs on

    assert scalar(db, "SELECT jobq.unschedule('nightly')") is True

    assert db.execute("SELECT name FROM jobq.schedules").fetchall() == [{"name": "other"}]
    counts = db.execute(
        "SELECT headers->>'schedule' AS schedule, status, count(*) > 0 AS some FROM jobq.jobs GROUP BY 1, 2"
        " ORDER BY 1, 2"
    ).fetchall()
    assert counts == [
        {"schedule": "nightly", "status": "cancelled", "some": True},
        {"schedule": "nightly", "status": "running", "some": True},
        {"schedule": "other", "status": "queued", "some": True},
    ]


def test_unschedule_of_an_unknown_name_returns_false(db: Db) -> None:
    assert scalar(db, "SELECT jobq.unschedule('nothing')") is False


# -- tick -----------------------------------------------------------------------------------------------


def test_tick_enqueues_each_occurrence_within_the_minute_ahead_once(db: Db) -> None:
    schedule(db, cron="*/5 * * * *")
    set_next_at(db, "nightly", ANCHOR)

    assert tick(db, ANCHOR - timedelta(seconds=50)) == 1
    assert tick(db, ANCHOR - timedelta(seconds=50)) == 0
    assert tick(db, ANCHOR + timedelta(seconds=30)) == 0
    assert [row["run_at"] for row in jobs(db)] == [ANCHOR]
    assert next_at(db) == ANCHOR + timedelta(minutes=5)


def test_an_occurrence_is_enqueued_once_even_when_next_at_is_set_back(db: Db) -> None:
    schedule(db, cron="*/5 * * * *")
    set_next_at(db, "nightly", ANCHOR)
    tick(db, ANCHOR)

    set_next_at(db, "nightly", ANCHOR)  # as if a tick's update were lost: the unique key still holds

    assert tick(db, ANCHOR) == 0
    assert len(jobs(db)) == 1


def test_tick_with_nothing_due_enqueues_nothing(db: Db) -> None:
    schedule(db, cron="0 0 1 1 *")
    assert scalar(db, "SELECT jobq.tick()") == 0


def test_an_occurrence_job_has_its_unique_key_its_headers_and_the_schedules_options(db: Db) -> None:
    schedule(
        db,
        "report",
        queue="reports",
        payload={"kind": "weekly"},
        cron="0 12 * * *",
        priority=3,
        max_attempts=7,
        headers={"team": "ops", "trace": "abc"},
    )
    set_next_at(db, "report", ANCHOR)

    tick(db, ANCHOR)

    (job,) = jobs(db)
    assert job == {
        "id": job["id"],
        "status": "queued",
        "run_at": ANCHOR,
        "payload": {"kind": "weekly"},
        "priority": 3,
        "max_attempts": 7,
        "unique_key": occurrence_key("report", ANCHOR),
        "until_done": True,
        "headers": {
            "team": "ops",
            "trace": "abc",
            "schedule": "report",
            "occurrence": "2027-01-05T12:00:00Z",
        },
    }
    assert scalar(db, "SELECT queue FROM jobq.jobs") == "reports"


def test_tick_runs_for_a_worker_without_privileges_on_the_tables(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    schedule(db, every=timedelta(seconds=20))
    with login_role(db) as role:
        db.execute("SELECT jobq.grant_worker(%s)", (role,))
        db.execute(f'GRANT EXECUTE ON FUNCTION jobq.tick() TO "{role}"')  # until 70_access.sql lists it
        with connect_as(pg_server, db.info.dbname, role) as worker:
            assert scalar(worker, "SELECT jobq.tick()") >= 2
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.execute("SELECT * FROM jobq.schedule_settings")


# -- catch-up -------------------------------------------------------------------------------------------


def missed_hour(db: Db, catch_up: str) -> int:
    """A '*/10' schedule whose last tick was an hour ago: occurrences at ANCHOR, +10 ... +50 minutes are
    missed, +60 minutes is due (30 s ago); returns what the tick enqueued."""
    schedule(db, cron="*/10 * * * *", catch_up=catch_up)
    set_next_at(db, "nightly", ANCHOR)
    return tick(db, ANCHOR + timedelta(minutes=60, seconds=30))


def test_catch_up_latest_enqueues_the_most_recent_missed_occurrence_to_run_now(db: Db) -> None:
    assert missed_hour(db, "latest") == 2

    now = ANCHOR + timedelta(minutes=60, seconds=30)
    assert [(row["unique_key"], row["run_at"]) for row in jobs(db)] == [
        (occurrence_key("nightly", ANCHOR + timedelta(minutes=50)), now),
        (occurrence_key("nightly", ANCHOR + timedelta(minutes=60)), ANCHOR + timedelta(minutes=60)),
    ]
    assert next_at(db) == ANCHOR + timedelta(minutes=70)


def test_catch_up_all_enqueues_every_missed_occurrence_at_its_time(db: Db) -> None:
    assert missed_hour(db, "all") == 7

    assert [row["run_at"] for row in jobs(db)] == [ANCHOR + timedelta(minutes=10 * k) for k in range(7)]
    assert next_at(db) == ANCHOR + timedelta(minutes=70)


def test_catch_up_skip_enqueues_only_what_is_due(db: Db) -> None:
    assert missed_hour(db, "skip") == 1

    assert [row["run_at"] for row in jobs(db)] == [ANCHOR + timedelta(minutes=60)]
    assert next_at(db) == ANCHOR + timedelta(minutes=70)


def test_catch_up_all_enqueues_at_most_1000_a_tick_and_the_rest_at_the_next(db: Db) -> None:
    schedule(db, every=timedelta(seconds=1), catch_up="all")
    set_next_at(db, "nightly", ANCHOR - timedelta(seconds=2000))

    assert tick(db, ANCHOR) == 1000
    assert next_at(db) == ANCHOR - timedelta(seconds=1000)
    assert tick(db, ANCHOR) == 1000
    assert tick(db, ANCHOR) == 61  # up to ANCHOR + 60 s
    assert scalar(db, "SELECT count(DISTINCT run_at) FROM jobq.jobs") == 2061


def test_catch_up_latest_finds_the_last_missed_occurrence_of_a_long_gap(db: Db) -> None:
    schedule(db, cron="17 3 * * 1", catch_up="latest")  # Mondays 03:17
    set_next_at(db, "nightly", datetime(2026, 1, 5, 3, 17, tzinfo=UTC))

    assert tick(db, ANCHOR) == 1  # a Tuesday

    assert [row["unique_key"] for row in jobs(db)] == [
        occurrence_key("nightly", datetime(2027, 1, 4, 3, 17, tzinfo=UTC))
    ]
    assert next_at(db) == datetime(2027, 1, 11, 3, 17, tzinfo=UTC)


# -- DST and periods --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "expected_run_at"),
    [
        ("2027-03-28", datetime(2027, 3, 28, 1, 0, tzinfo=UTC)),  # skipped 02:30: at 03:00 CEST
        ("2027-10-31", datetime(2027, 10, 31, 0, 30, tzinfo=UTC)),  # repeated 02:30: at 02:30 CEST only
    ],
    ids=["spring-forward", "fall-back"],
)
def test_a_specific_time_in_berlin_fires_once_on_a_dst_day(
    db: Db, day: str, expected_run_at: datetime
) -> None:
    schedule(db, cron="30 2 * * *", timezone="Europe/Berlin")
    start = datetime.fromisoformat(f"{day}T00:00:00+00:00") - timedelta(hours=2)  # 22:00 the evening before
    set_next_at(
        db, "nightly", scalar(db, "SELECT jobq._cron_next('30 2 * * *', 'Europe/Berlin', %s)", (start,))
    )

    enqueued = sum(tick(db, start + timedelta(seconds=30 * k)) for k in range(6 * 120))  # six hours

    assert enqueued == 1
    assert [row["run_at"] for row in jobs(db)] == [expected_run_at]


def test_every_is_aligned_on_the_unix_epoch(db: Db) -> None:
    row = schedule(db, every=timedelta(minutes=7))
    epoch = row["next_at"].timestamp()
    assert epoch % 420 == 0
    assert row["next_at"] - timedelta(minutes=7) <= scalar(db, "SELECT now()") < row["next_at"]

    first = datetime.fromtimestamp(420 * (int(ANCHOR.timestamp()) // 420 + 1), UTC)
    set_next_at(db, "nightly", first)
    for k in range(10):
        tick(db, first + timedelta(minutes=3 * k))
    run_ats = [row["run_at"] for row in jobs(db)]
    assert len(run_ats) == 5
    assert all(moment.timestamp() % 420 == 0 for moment in run_ats)
    assert [b - a for a, b in itertools.pairwise(run_ats)] == [timedelta(minutes=7)] * (len(run_ats) - 1)


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "sqlstate", "message"),
    [
        ({"name": None, "every": "1 hour"}, "22004", "name must not be NULL"),
        ({"name": "", "every": "1 hour"}, "22023", "name must be 1 to 200 characters"),
        ({"name": "n" * 201, "every": "1 hour"}, "22023", "name must be 1 to 200 characters"),
        ({"queue": None, "every": "1 hour"}, "22004", "queue must not be NULL"),
        ({"queue": "Bad Queue", "every": "1 hour"}, "22023", "queue must be"),
        ({"payload": None, "every": "1 hour"}, "22004", "payload must not be NULL"),
        ({"payload": [1], "every": "1 hour"}, "22023", "payload must be a JSON object"),
        ({}, "22023", "exactly one of cron and every must be given, got neither"),
        (
            {"cron": "* * * * *", "every": "1 hour"},
            "22023",
            "exactly one of cron and every must be given, got both",
        ),
        ({"cron": "0 25 * * *"}, "22023", "cron's hour field must"),
        ({"cron": "0 0 30 2 *"}, "22023", "cron can never match"),
        ({"cron": "@daily"}, "22023", "cron must have five fields"),
        ({"cron": "0 0 * * *", "timezone": None}, "22004", "timezone must not be NULL"),
        ({"cron": "0 0 * * *", "timezone": "Mars/Olympus_Mons"}, "22023", "timezone must name a time zone"),
        ({"cron": "0 0 * * *", "timezone": "UTC+3"}, "22023", "timezone must name a time zone"),
        ({"cron": "0 0 * * *", "timezone": "europe/berlin"}, "22023", "timezone must name a time zone"),
        ({"every": "0.5 seconds"}, "22023", "every must be"),
        ({"every": "1.5 seconds"}, "22023", "every must be"),
        ({"every": "0"}, "22023", "every must be"),
        ({"every": "-1 hour"}, "22023", "every must be"),
        ({"every": "367 days"}, "22023", "every must be"),
        ({"every": "1 month"}, "22023", "every must be"),
        ({"every": "1 hour", "priority": None}, "22004", "priority must not be NULL"),
        ({"every": "1 hour", "priority": 40000}, "22023", "priority must be between"),
        ({"every": "1 hour", "max_attempts": 0}, "22023", "max_attempts must be between"),
        ({"every": "1 hour", "headers": [1]}, "22023", "headers must be a JSON object"),
        ({"every": "1 hour", "catch_up": None}, "22004", "catch_up must not be NULL"),
        ({"every": "1 hour", "catch_up": "some"}, "22023", "catch_up must be latest, all or skip"),
        ({"every": "1 hour", "task": "send report"}, "22023", "task must be 1 to 200 characters"),
    ],
)
def test_a_bad_argument_is_refused_by_name_and_creates_nothing(
    db: Db, options: dict[str, Any], sqlstate: str, message: str
) -> None:
    arguments = {"name": "nightly", "queue": "default", **options}
    for json_argument in ("payload", "headers"):
        if arguments.get(json_argument) is not None:
            arguments[json_argument] = Jsonb(arguments[json_argument])
    named = ", ".join(f"{argument} => %({argument})s" for argument in arguments)
    casts = {
        "every": "::interval",
        "timezone": "::text",
        "cron": "::text",
        "payload": "::jsonb",
        "headers": "::jsonb",
        "priority": "::integer",
        "max_attempts": "::integer",
        "catch_up": "::text",
        "name": "::text",
        "queue": "::text",
        "task": "::text",
    }
    for argument, cast in casts.items():
        named = named.replace(f"%({argument})s", f"%({argument})s{cast}")

    with pytest.raises(psycopg.Error) as raised:
        db.execute(f"SELECT jobq.schedule({named})", arguments)

    assert (raised.value.sqlstate, (raised.value.diag.message_primary or "").startswith(message)) == (
        sqlstate,
        True,
    ), raised.value.diag.message_primary
    assert scalar(db, "SELECT count(*) FROM jobq.schedule_settings") == 0


def test_unschedule_refuses_a_null_name(db: Db) -> None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.unschedule(NULL)")
    assert (raised.value.sqlstate, raised.value.diag.message_primary) == ("22004", "name must not be NULL")
