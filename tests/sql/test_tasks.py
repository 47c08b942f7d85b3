"""Tasks (0.9.0): the named job type a job carries from its enqueue (jobq.enqueue, enqueue_many, a step of
enqueue_flow, a schedule's occurrences) to the worker that claims it, and to jobq.job.

A task is only stored and handed back by the SQL side: a worker of the Python client dispatches on it. Bad
task names are refused in the bad-input table (test_bad_input.py), which proves that they change nothing.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Db, claim_one, enqueue, scalar

# The columns of jobq.jobs in 0.8.0, in order: what claim returned then, and still returns first.
COLUMNS_0_8_0 = [
    "id",
    "queue",
    "payload",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "lease",
    "locked_by",
    "locked_at",
    "last_error",
    "created_at",
    "finished_at",
    "lease_expires_at",
    "headers",
    "control",
]

# a fixed clock for a tick, in the future (an occurrence's run_at must be within 10 years of now)
ANCHOR = datetime(2027, 1, 5, 12, 0, tzinfo=timezone.utc)


def task_of(db: Db, job_id: int) -> Any:
    return scalar(db, "SELECT task FROM jobq.jobs WHERE id = %s", (job_id,))


# -- enqueue and claim --------------------------------------------------------------------------------------


def test_a_job_enqueued_from_sql_with_a_task_is_claimed_with_it(db: Db) -> None:
    # what a trigger, a stored procedure or a service in another language writes
    job_id = scalar(db, """SELECT jobq.enqueue('emails', '{"user_id": 7}', task => 'send_welcome')""")

    claimed = claim_one(db, "emails")

    assert (claimed["id"], claimed["payload"], claimed["task"]) == (job_id, {"user_id": 7}, "send_welcome")


def test_a_trigger_enqueues_a_job_with_its_task_in_the_transaction_of_the_row(db: Db) -> None:
    db.execute(
        """
        CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL);
        CREATE FUNCTION users_welcome() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM jobq.enqueue('emails', jsonb_build_object('user_id', NEW.id), task => 'send_welcome');
            RETURN NEW;
        END
        $$;
        CREATE TRIGGER users_welcome AFTER INSERT ON users FOR EACH ROW EXECUTE FUNCTION users_welcome();
        """
    )

    user_id = scalar(db, "INSERT INTO users (email) VALUES ('ada@example.com') RETURNING id")

    jobs = db.execute("SELECT queue, payload, task FROM jobq.jobs").fetchall()
    assert jobs == [{"queue": "emails", "payload": {"user_id": user_id}, "task": "send_welcome"}]


def test_a_plain_job_has_no_task(db: Db) -> None:
    job_id = enqueue(db, "emails", {"n": 1})

    claimed = claim_one(db, "emails")
    state = db.execute("SELECT task FROM jobq.job(%s)", (job_id,)).fetchone()

    assert (claimed["id"], claimed["task"], state) == (job_id, None, {"task": None})


CLAIMS = {
    "claim": "SELECT * FROM jobq.claim('emails', 1, 'w1')",
    "claim_any": "SELECT * FROM jobq.claim_any(ARRAY['emails', 'reports'], 1, 'w1')",
    "complete_and_claim": "SELECT * FROM jobq.complete_and_claim('{}', '{}', 'emails', 1, 'w1')",
}


@pytest.mark.parametrize("claim", list(CLAIMS))
def test_claims_return_the_columns_of_0_8_0_in_their_places_and_the_task_last(db: Db, claim: str) -> None:
    enqueue(db, "emails", {}, task="send_welcome")

    cursor = db.execute(CLAIMS[claim])
    rows = cursor.fetchall()

    assert [column.name for column in cursor.description or []] == [*COLUMNS_0_8_0, "task"]
    assert [list(row.values())[-1] for row in rows] == ["send_welcome"]


@pytest.mark.parametrize(
    "options",
    [
        {"headers": Jsonb({"tenant": "acme"})},
        {"unique_key": "user-7"},
        {"concurrency_key": "user-7"},
        {"concurrency_key": "user-7", "unique_key": "user-7"},
        {"on_parent_failure": "run"},
        {"priority": 5, "run_at": ANCHOR, "max_attempts": 2},
    ],
    ids=["headers", "unique-key", "concurrency-key", "both-keys", "on-parent-failure", "plain-options"],
)
def test_a_task_is_kept_whichever_way_the_enqueue_goes(db: Db, options: dict[str, Any]) -> None:
    job_id = enqueue(db, "emails", {}, task="send_welcome", **options)

    assert task_of(db, job_id) == "send_welcome"


def test_a_job_waiting_for_its_parent_is_claimed_with_its_task(db: Db) -> None:
    parent = enqueue(db, "emails")
    child = enqueue(db, "emails", {}, depends_on=[parent], task="send_receipt")
    held = claim_one(db, "emails")
    db.execute("SELECT jobq.complete(%s, %s)", (held["id"], held["lease"]))

    claimed = claim_one(db, "emails")

    assert (claimed["id"], claimed["task"]) == (child, "send_receipt")


def test_a_replace_gives_the_queued_holder_of_the_key_the_new_task(db: Db) -> None:
    first = enqueue(db, "emails", {"n": 1}, unique_key="user-7", task="send_welcome")

    second = enqueue(
        db, "emails", {"n": 2}, unique_key="user-7", on_conflict="replace", task="send_welcome_again"
    )

    assert (second, task_of(db, first)) == (first, "send_welcome_again")


def test_a_task_of_200_characters_of_every_allowed_kind_is_accepted(db: Db) -> None:
    task = ("_Az09.:-billing.invoice:v2-" * 8)[:200]

    job_id = enqueue(db, "emails", {}, task=task)

    assert task_of(db, job_id) == task


def test_calls_written_for_0_8_0_by_position_enqueue_plain_jobs(db: Db) -> None:
    job_id = scalar(
        db,
        "SELECT jobq.enqueue('emails', '{}', 0, now(), 3, NULL, 'active', 'return', NULL, NULL, NULL,"
        " 'cancel')",
    )
    ids = scalar(
        db,
        "SELECT jobq.enqueue_many('emails', ARRAY['{}']::jsonb[], 0, now(), 3, NULL, 'active', 'return',"
        " NULL, NULL)",
    )

    assert [task_of(db, one) for one in [job_id, *ids]] == [None, None]


# -- enqueue_many and enqueue_flow --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys",
    ["", ", unique_keys => ARRAY['a', NULL]", ", concurrency_keys => ARRAY['a', NULL]"],
    ids=["plain", "unique-keys", "concurrency-keys"],
)
def test_enqueue_many_gives_its_task_to_every_job(db: Db, keys: str) -> None:
    ids = scalar(
        db, f"SELECT jobq.enqueue_many('emails', ARRAY['{{}}', '{{}}']::jsonb[]{keys}, task => 'send_digest')"
    )

    assert [task_of(db, job_id) for job_id in ids] == ["send_digest", "send_digest"]


def test_each_step_of_a_flow_carries_its_own_task(db: Db) -> None:
    steps = [
        {"name": "resize", "payload": {"image": 1}, "task": "images.resize"},
        {"payload": {"image": 1}, "depends_on": ["resize"], "task": "images.notify"},
        {"payload": {"image": 1}},
        {"payload": {"image": 1}, "task": None},
    ]

    ids = scalar(db, "SELECT jobq.enqueue_flow('images', %s)", (Jsonb(steps),))

    assert [task_of(db, job_id) for job_id in ids] == ["images.resize", "images.notify", None, None]


# -- schedules ----------------------------------------------------------------------------------------------


def test_each_occurrence_of_a_schedule_with_a_task_carries_it(db: Db) -> None:
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 hour', task => 'send_digest')")
    db.execute("UPDATE jobq.schedule_settings SET next_at = %s WHERE name = 'digest'", (ANCHOR,))

    enqueued = scalar(db, "SELECT jobq._tick(%s)", (ANCHOR,))

    tasks = db.execute("SELECT task, headers ->> 'schedule' AS schedule FROM jobq.jobs").fetchall()
    assert (enqueued, tasks) == (1, [{"task": "send_digest", "schedule": "digest"}])


def test_schedule_and_the_schedules_view_show_the_task_last(db: Db) -> None:
    returned = db.execute(
        "SELECT * FROM jobq.schedule('digest', 'emails', every => '1 hour', task => 'send_digest')"
    )
    row = returned.fetchone()
    viewed = db.execute("SELECT name, task FROM jobq.schedules").fetchall()

    assert row is not None
    assert ([column.name for column in returned.description or []][-1], row["task"]) == (
        "task",
        "send_digest",
    )
    assert viewed == [{"name": "digest", "task": "send_digest"}]


def test_a_schedule_replaced_without_a_task_enqueues_plain_jobs(db: Db) -> None:
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 hour', task => 'send_digest')")
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 hour')")
    db.execute("UPDATE jobq.schedule_settings SET next_at = %s WHERE name = 'digest'", (ANCHOR,))

    db.execute("SELECT jobq._tick(%s)", (ANCHOR,))

    assert db.execute("SELECT task FROM jobq.jobs").fetchall() == [{"task": None}]


# -- jobq.job -----------------------------------------------------------------------------------------------


def test_jobq_job_shows_the_task_after_0_8_0s_columns_and_before_0_11_0s(db: Db) -> None:
    job_id = enqueue(db, "emails", {}, task="send_welcome")

    cursor = db.execute("SELECT * FROM jobq.job(%s)", (job_id,))
    state = cursor.fetchone()

    assert state is not None
    names = [column.name for column in cursor.description or []]
    assert names[names.index("depends_on") + 1 :] == [
        "task", "steps", "step_attempts", "progress", "waiting_for",
    ]  # fmt: skip
    assert state["task"] == "send_welcome"
