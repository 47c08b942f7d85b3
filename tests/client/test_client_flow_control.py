"""The client's flow control (0.7.0): queue limits, concurrency keys, claims over several queues,
dependencies and flows, and schedules.

Every call runs against the real extension.  Arguments of the wrong type are refused in Python,
before any SQL, with InvalidArgument naming the argument; values out of their domain are refused
by the database, and come back as InvalidArgument too.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import pgjobq

from helpers.processes import wait_until
from helpers.sqlhelpers import Connect, Db, scalar


def count(db: Db, where: str = "true") -> int:
    return int(scalar(db, f"SELECT count(*) FROM jobq.jobs WHERE {where}"))


def status(db: Db, job_id: int) -> str:
    return pgjobq.job(db, job_id).status


def claimed_ids(db: Db, queue: str = "default", n: int = 10) -> list[int]:
    return [job.id for job in pgjobq.claim(db, queue, n, "w1")]


def finish(db: Db, job_id: int) -> None:
    """Claim the job (it must be the next one of its queue) and complete it."""
    queue = pgjobq.job(db, job_id).queue
    (claimed,) = pgjobq.claim(db, queue, 1, "w1")
    assert claimed.id == job_id
    pgjobq.complete(db, claimed.id, claimed.lease)


# -- configure_queue: the limits ------------------------------------------------------------------


def test_configure_queue_sets_the_limits_and_returns_them(db: Db) -> None:
    settings = pgjobq.configure_queue(
        db,
        "emails",
        concurrency=4,
        key_concurrency=1,
        key_order="round_robin",
        rate_limit=50,
        rate_interval=timedelta(minutes=1),
    )

    assert (settings.concurrency, settings.key_concurrency, settings.key_order) == (4, 1, "round_robin")
    assert (settings.rate_limit, settings.rate_interval) == (50, timedelta(minutes=1))


def test_a_queue_without_limits_has_none_and_orders_keys_by_priority(db: Db) -> None:
    settings = pgjobq.configure_queue(db, "emails", max_attempts=5)

    assert (settings.concurrency, settings.key_concurrency, settings.rate_limit) == (None, None, None)
    assert (settings.key_order, settings.rate_interval) == ("priority", None)


def test_a_rate_limit_set_alone_counts_claims_per_second(db: Db) -> None:
    settings = pgjobq.configure_queue(db, "emails", rate_limit=10)

    assert (settings.rate_limit, settings.rate_interval) == (10, timedelta(seconds=1))


def test_unset_clears_a_limit_and_keeps_the_others(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", concurrency=4, key_concurrency=2)

    settings = pgjobq.configure_queue(db, "emails", unset=["concurrency"])

    assert (settings.concurrency, settings.key_concurrency) == (None, 2)


def test_unsetting_the_rate_limit_clears_its_interval_too(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", rate_limit=10, rate_interval=timedelta(seconds=5))

    settings = pgjobq.configure_queue(db, "emails", unset=["rate_limit"])

    assert (settings.rate_limit, settings.rate_interval) == (None, None)


def test_unsetting_the_rate_interval_alone_puts_it_back_to_one_second(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", rate_limit=10, rate_interval=timedelta(seconds=5))

    settings = pgjobq.configure_queue(db, "emails", unset=["rate_interval"])

    assert (settings.rate_limit, settings.rate_interval) == (10, timedelta(seconds=1))


def test_queues_lists_each_queues_limits(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", concurrency=3)
    pgjobq.enqueue(db, "reports", {})

    by_queue = {row.queue: row for row in pgjobq.queues(db)}

    assert (by_queue["emails"].concurrency, by_queue["reports"].concurrency) == (3, None)


def test_queue_overview_counts_each_queues_queued_and_running_jobs_beside_its_limits(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", concurrency=3)
    pgjobq.configure_queue(db, "idle", key_concurrency=1)
    pgjobq.enqueue_many(db, "emails", [{}, {}, {}])
    pgjobq.claim(db, "emails", 1, "w1")

    rows = pgjobq.queue_overview(db)

    assert [(r.queue, r.queued, r.running, r.concurrency, r.key_concurrency) for r in rows] == [
        ("emails", 2, 1, 3, None),
        ("idle", 0, 0, None, 1),
    ]
    assert all(isinstance(r, pgjobq.QueueSettings) for r in rows)


@pytest.mark.parametrize(
    ("argument", "value", "expected"),
    [
        ("concurrency", "4", "concurrency must be an integer, got str"),
        ("key_concurrency", 1.5, "key_concurrency must be an integer, got float"),
        ("key_order", 1, "key_order must be a string, got int"),
        ("rate_limit", True, "rate_limit must be an integer, got bool"),
        ("rate_interval", 5, "rate_interval must be a timedelta, got int"),
        ("retain_done", 3600, "retain_done must be a timedelta, got int"),
        ("retain_failed", "14 days", "retain_failed must be a timedelta, got str"),
        ("retain_cancelled", 1.5, "retain_cancelled must be a timedelta, got float"),
        ("keep_forever", "done", r"keep_forever must be a list \(or other iterable\), got str"),
        ("keep_forever", [None], "keep_forever\\[\\] must be a string, got NoneType"),
    ],
)
def test_configure_queue_refuses_a_setting_of_the_wrong_type_before_any_sql(
    db: Db, argument: str, value: object, expected: str
) -> None:
    configure: Any = pgjobq.configure_queue

    with pytest.raises(pgjobq.InvalidArgument, match=f"^{expected}$") as raised:
        configure(db, "emails", **{argument: value})

    assert raised.value.sqlstate is None  # refused here, not by the database
    assert pgjobq.queues(db) == []


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("concurrency", 0),
        ("key_concurrency", 100_001),
        ("key_order", "sideways"),
        ("rate_limit", 10_001),
        ("rate_interval", timedelta(days=2)),
    ],
)
def test_configure_queue_refuses_a_limit_out_of_its_domain_naming_it(
    db: Db, argument: str, value: object
) -> None:
    options: dict[str, Any] = {argument: value}
    if argument == "rate_interval":
        options["rate_limit"] = 10

    with pytest.raises(pgjobq.InvalidArgument, match=f"^{argument} must be") as raised:
        pgjobq.configure_queue(db, "emails", **options)

    assert raised.value.sqlstate == "22023"
    assert pgjobq.queues(db) == []


# -- claims under limits -------------------------------------------------------------------------


def test_a_key_limit_of_one_serialises_a_key_and_the_next_claim_gets_another_keys_job(db: Db) -> None:
    pgjobq.configure_queue(db, "default", key_concurrency=1)
    first_a = pgjobq.enqueue(db, "default", {}, concurrency_key="a")
    pgjobq.enqueue(db, "default", {}, concurrency_key="a")
    first_b = pgjobq.enqueue(db, "default", {}, concurrency_key="b")

    assert claimed_ids(db, n=1) == [first_a]
    assert claimed_ids(db, n=1) == [first_b]
    assert claimed_ids(db, n=1) == []  # both keys are at their limit


def test_a_keys_next_job_is_claimed_once_its_running_job_is_done(db: Db) -> None:
    pgjobq.configure_queue(db, "default", key_concurrency=1)
    first, second = (pgjobq.enqueue(db, "default", {}, concurrency_key="a") for _ in range(2))
    (running,) = pgjobq.claim(db, "default", 2, "w1")
    assert running.id == first

    pgjobq.complete(db, running.id, running.lease)

    assert claimed_ids(db) == [second]


def test_jobs_without_a_concurrency_key_are_not_held_back_by_the_key_limit(db: Db) -> None:
    pgjobq.configure_queue(db, "default", key_concurrency=1)
    ids = [pgjobq.enqueue(db, "default", {}) for _ in range(3)]

    assert claimed_ids(db) == ids


def test_enqueue_many_gives_each_job_its_concurrency_key(db: Db) -> None:
    pgjobq.configure_queue(db, "default", key_concurrency=1)

    ids = pgjobq.enqueue_many(db, "default", [{}, {}, {}], concurrency_keys=["a", "a", "b"])

    assert claimed_ids(db) == [ids[0], ids[2]]


def test_enqueue_many_with_a_none_concurrency_key_leaves_that_job_without_one(db: Db) -> None:
    pgjobq.configure_queue(db, "default", key_concurrency=1)

    ids = pgjobq.enqueue_many(db, "default", [{}, {}, {}], concurrency_keys=["a", None, None])

    assert claimed_ids(db) == ids


def test_a_concurrency_limit_caps_how_many_jobs_of_the_queue_run(db: Db) -> None:
    pgjobq.configure_queue(db, "default", concurrency=2)
    pgjobq.enqueue_many(db, "default", [{} for _ in range(5)])

    assert len(claimed_ids(db, n=5)) == 2
    assert claimed_ids(db, n=5) == []


def test_a_rate_limit_caps_the_claims_within_its_interval(db: Db) -> None:
    pgjobq.configure_queue(db, "default", rate_limit=2, rate_interval=timedelta(hours=1))
    pgjobq.enqueue_many(db, "default", [{} for _ in range(3)])

    assert len(claimed_ids(db, n=3)) == 2
    assert claimed_ids(db, n=3) == []


def test_a_limited_claim_outside_read_committed_raises_isolation_level_error(
    connect: Connect, db: Db
) -> None:
    pgjobq.configure_queue(db, "default", concurrency=1)
    pgjobq.enqueue(db, "default", {})
    conn = connect(autocommit=False)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    with pytest.raises(pgjobq.IsolationLevelError) as raised:
        pgjobq.claim(conn, "default", 1, "w1")

    assert raised.value.sqlstate == "25000"
    assert isinstance(raised.value, pgjobq.Error)
    conn.rollback()
    assert count(db, "status = 'queued'") == 1


# -- claim_any -----------------------------------------------------------------------------------


def test_claim_any_takes_the_jobs_of_several_queues_by_priority_across_them(db: Db) -> None:
    low = pgjobq.enqueue(db, "a", {}, priority=0)
    high = pgjobq.enqueue(db, "b", {}, priority=5)
    pgjobq.enqueue(db, "c", {}, priority=9)  # not asked for

    claimed = pgjobq.claim_any(db, ["a", "b"], 3, "w1")

    assert [(job.id, job.queue) for job in claimed] == [(high, "b"), (low, "a")]


def test_claim_any_passes_over_a_paused_queue(db: Db) -> None:
    pgjobq.enqueue(db, "a", {})
    other = pgjobq.enqueue(db, "b", {})
    pgjobq.pause(db, "a")

    assert [job.id for job in pgjobq.claim_any(db, ["a", "b"], 2, "w1")] == [other]


def test_claim_any_respects_each_queues_concurrency_limit(db: Db) -> None:
    pgjobq.configure_queue(db, "a", concurrency=1)
    pgjobq.enqueue_many(db, "a", [{}, {}])
    pgjobq.enqueue(db, "b", {})

    claimed = pgjobq.claim_any(db, ["a", "b"], 3, "w1")

    assert sorted(job.queue for job in claimed) == ["a", "b"]


def test_claim_any_claims_under_the_lease_asked_for(db: Db) -> None:
    pgjobq.enqueue(db, "a", {})

    (claimed,) = pgjobq.claim_any(db, ["a", "b"], 1, "w1", lease_timeout=timedelta(seconds=5))

    assert claimed._lease_seconds == pytest.approx(5)


def test_claim_any_refuses_a_string_for_queues(db: Db) -> None:
    claim_any: Any = pgjobq.claim_any

    with pytest.raises(pgjobq.InvalidArgument, match=r"^queues must be a list"):
        claim_any(db, "ab", 1, "w1")


def test_claim_any_refuses_an_empty_list_of_queues(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match=r"^queues must name at least one queue"):
        pgjobq.claim_any(db, [], 1, "w1")


# -- enqueue: concurrency keys and dependencies: bad input ----------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"concurrency_key": 5}, "concurrency_key must be a string, got int"),
        ({"depends_on": "12"}, "depends_on must be a list (or other iterable), got str"),
        ({"depends_on": [1.5]}, "depends_on[] must be an integer, got float"),
        ({"depends_on": [2**63]}, "depends_on[] must be a 64-bit integer, got 9223372036854775808"),
        ({"on_parent_failure": None}, "on_parent_failure must be a string, got NoneType"),
    ],
)
def test_enqueue_refuses_flow_options_of_the_wrong_type_and_enqueues_nothing(
    db: Db, options: dict[str, Any], expected: str
) -> None:
    enqueue: Any = pgjobq.enqueue

    with pytest.raises(pgjobq.InvalidArgument, match=f"^{re.escape(expected)}$"):
        enqueue(db, "default", {}, **options)

    assert count(db) == 0


def test_enqueue_refuses_an_unknown_on_parent_failure_naming_it(db: Db) -> None:
    parent = pgjobq.enqueue(db, "default", {})
    enqueue: Any = pgjobq.enqueue

    with pytest.raises(pgjobq.InvalidArgument, match="on_parent_failure"):
        enqueue(db, "default", {}, depends_on=[parent], on_parent_failure="ignore")

    assert count(db) == 1


def test_enqueue_refuses_a_concurrency_key_over_512_characters_naming_it(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="concurrency_key"):
        pgjobq.enqueue(db, "default", {}, concurrency_key="k" * 513)

    assert count(db) == 0


def test_enqueue_many_refuses_a_concurrency_key_that_is_not_a_string(db: Db) -> None:
    enqueue_many: Any = pgjobq.enqueue_many

    with pytest.raises(pgjobq.InvalidArgument, match=r"^concurrency_keys\[\] must be a string, got int$"):
        enqueue_many(db, "default", [{}, {}], concurrency_keys=["a", 7])

    assert count(db) == 0


def test_enqueue_many_refuses_concurrency_keys_of_another_length_than_the_payloads(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="concurrency_keys"):
        pgjobq.enqueue_many(db, "default", [{}, {}], concurrency_keys=["a"])

    assert count(db) == 0


# -- dependencies ---------------------------------------------------------------------------------


def test_a_job_with_a_parent_waits_and_is_never_claimed_before_the_parent_is_done(db: Db) -> None:
    parent = pgjobq.enqueue(db, "default", {})
    child = pgjobq.enqueue(db, "default", {}, depends_on=[parent])

    assert status(db, child) == "waiting"
    assert claimed_ids(db) == [parent]


def test_a_waiting_job_is_queued_once_its_last_parent_is_done(db: Db) -> None:
    first, second = pgjobq.enqueue(db, "default", {}), pgjobq.enqueue(db, "default", {})
    child = pgjobq.enqueue(db, "default", {}, depends_on=[first, second])

    finish(db, first)
    assert status(db, child) == "waiting"
    finish(db, second)

    assert status(db, child) == "queued"


def test_job_state_names_the_parents_of_a_job(db: Db) -> None:
    first, second = pgjobq.enqueue(db, "default", {}), pgjobq.enqueue(db, "default", {})
    child = pgjobq.enqueue(db, "default", {}, depends_on=[first, second])

    assert sorted(pgjobq.job(db, child).depends_on or []) == [first, second]
    assert pgjobq.job(db, first).depends_on is None


def test_a_child_is_cancelled_when_its_parent_fails(db: Db) -> None:
    parent = pgjobq.enqueue(db, "default", {}, max_attempts=1)
    child = pgjobq.enqueue(db, "default", {}, depends_on=[parent])
    (claimed,) = pgjobq.claim(db, "default", 1, "w1")

    pgjobq.fail(db, claimed.id, "boom", claimed.lease)

    assert (status(db, parent), status(db, child)) == ("failed", "cancelled")


def test_a_child_with_on_parent_failure_run_is_queued_when_its_parent_fails(db: Db) -> None:
    parent = pgjobq.enqueue(db, "default", {}, max_attempts=1)
    child = pgjobq.enqueue(db, "default", {}, depends_on=[parent], on_parent_failure="run")
    (claimed,) = pgjobq.claim(db, "default", 1, "w1")

    pgjobq.fail(db, claimed.id, "boom", claimed.lease)

    assert status(db, child) == "queued"


def test_depends_on_an_unknown_job_raises_job_not_found_and_enqueues_nothing(db: Db) -> None:
    with pytest.raises(pgjobq.JobNotFound):
        pgjobq.enqueue(db, "default", {}, depends_on=[424242])

    assert count(db) == 0


def test_cancel_cancels_a_waiting_job(db: Db) -> None:
    parent = pgjobq.enqueue(db, "default", {})
    child = pgjobq.enqueue(db, "default", {}, depends_on=[parent])

    assert pgjobq.cancel(db, [child]) == [pgjobq.Cancellation(child, "cancelled")]


# -- enqueue_flow ---------------------------------------------------------------------------------


def test_enqueue_flow_returns_the_ids_in_step_order_and_a_step_waits_for_the_one_it_names(db: Db) -> None:
    fetch, parse = pgjobq.enqueue_flow(
        db,
        "default",
        [
            {"name": "fetch", "payload": {"url": "u"}},
            {"name": "parse", "payload": {}, "depends_on": ["fetch"]},
        ],
    )

    assert (status(db, fetch), status(db, parse)) == ("queued", "waiting")
    assert pgjobq.job(db, parse).depends_on == [fetch]


def test_a_flows_child_is_queued_once_its_parent_completes(db: Db) -> None:
    fetch, parse = pgjobq.enqueue_flow(
        db, "default", [{"name": "fetch", "payload": {}}, {"payload": {}, "depends_on": ["fetch"]}]
    )

    finish(db, fetch)

    assert status(db, parse) == "queued"


def test_a_flow_step_may_depend_on_an_existing_job_by_id(db: Db) -> None:
    existing = pgjobq.enqueue(db, "default", {})

    (step,) = pgjobq.enqueue_flow(db, "default", [{"payload": {}, "depends_on": [existing]}])

    assert pgjobq.job(db, step).depends_on == [existing]


def test_a_flow_step_goes_to_its_own_queue_with_its_payload_and_options(db: Db) -> None:
    (step,) = pgjobq.enqueue_flow(
        db, "default", [{"queue": "other", "payload": {"n": 1}, "priority": 3, "headers": {"t": "x"}}]
    )

    (claimed,) = pgjobq.claim(db, "other", 1, "w1")
    assert (claimed.id, claimed.payload, claimed.priority, claimed.headers) == (step, {"n": 1}, 3, {"t": "x"})


def test_a_flow_steps_run_at_may_be_a_timezone_aware_datetime(db: Db) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=1)

    (step,) = pgjobq.enqueue_flow(db, "default", [{"payload": {}, "run_at": later}])

    assert pgjobq.job(db, step).run_at == later


def test_a_flow_steps_naive_run_at_is_refused_and_nothing_is_enqueued(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match=r"^steps\[1\]\.run_at must be timezone-aware"):
        pgjobq.enqueue_flow(db, "default", [{"payload": {}}, {"payload": {}, "run_at": datetime(2030, 1, 1)}])

    assert count(db) == 0


def test_enqueue_flow_refuses_a_step_that_is_not_a_mapping(db: Db) -> None:
    enqueue_flow: Any = pgjobq.enqueue_flow

    with pytest.raises(pgjobq.InvalidArgument, match=r"^steps\[1\] must be a mapping"):
        enqueue_flow(db, "default", [{"payload": {}}, ["not", "a", "step"]])

    assert count(db) == 0


def test_enqueue_flow_refuses_a_step_without_a_payload_naming_the_step(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match=r"^steps\[1\]: payload"):
        pgjobq.enqueue_flow(db, "default", [{"payload": {}}, {"name": "empty"}])

    assert count(db) == 0


def test_enqueue_flow_refuses_one_mapping_for_steps(db: Db) -> None:
    enqueue_flow: Any = pgjobq.enqueue_flow

    with pytest.raises(pgjobq.InvalidArgument, match=r"^steps must be a list"):
        enqueue_flow(db, "default", {"name": "fetch"})


def test_enqueue_flow_refuses_a_payload_json_cannot_encode_before_any_sql(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match=r"^steps is not serialisable as JSON") as raised:
        pgjobq.enqueue_flow(db, "default", [{"payload": {"when": datetime.now(timezone.utc).date()}}])

    assert raised.value.sqlstate is None


def test_enqueue_flow_with_a_step_depending_on_an_unknown_name_enqueues_nothing(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument) as raised:
        pgjobq.enqueue_flow(
            db, "default", [{"name": "fetch", "payload": {}}, {"payload": {}, "depends_on": ["missing"]}]
        )

    assert str(raised.value).startswith("steps[1].depends_on names 'missing'")
    assert count(db) == 0


def test_enqueue_flow_with_a_parent_id_that_does_not_exist_raises_job_not_found(db: Db) -> None:
    with pytest.raises(pgjobq.JobNotFound):
        pgjobq.enqueue_flow(db, "default", [{"payload": {}}, {"payload": {}, "depends_on": [424242]}])

    assert count(db) == 0


# -- schedules ------------------------------------------------------------------------------------


def test_schedule_returns_the_schedule_as_stored(db: Db) -> None:
    made = pgjobq.schedule(
        db, "digest", "emails", {"kind": "daily"}, every=timedelta(minutes=5), priority=2, max_attempts=4
    )

    assert (made.name, made.queue, made.payload, made.every, made.cron) == (
        "digest", "emails", {"kind": "daily"}, timedelta(minutes=5), None,
    )  # fmt: skip
    assert (made.priority, made.max_attempts, made.catch_up) == (2, 4, "latest")
    assert made.next_run is not None and made.next_run > datetime.now(timezone.utc)


def test_schedules_lists_what_schedule_stored(db: Db) -> None:
    made = pgjobq.schedule(db, "digest", "emails", cron="0 8 * * *", timezone="Europe/Paris")

    assert pgjobq.schedules(db) == [made]
    assert (made.cron, made.timezone, made.every, made.payload) == ("0 8 * * *", "Europe/Paris", None, {})


def test_schedule_replaces_a_schedule_of_the_same_name(db: Db) -> None:
    pgjobq.schedule(db, "digest", "emails", every=timedelta(minutes=5))

    pgjobq.schedule(db, "digest", "reports", every=timedelta(hours=1))

    assert [(s.name, s.queue, s.every) for s in pgjobq.schedules(db)] == [
        ("digest", "reports", timedelta(hours=1))
    ]


def test_unschedule_removes_a_schedule_and_says_false_for_an_unknown_one(db: Db) -> None:
    pgjobq.schedule(db, "digest", "emails", every=timedelta(minutes=5))

    assert pgjobq.unschedule(db, "digest") is True
    assert pgjobq.unschedule(db, "digest") is False
    assert pgjobq.schedules(db) == []


def test_tick_enqueues_a_due_occurrence_with_the_schedules_payload(db: Db) -> None:
    pgjobq.schedule(db, "pulse", "beats", {"n": 1}, every=timedelta(seconds=1), priority=3)

    assert wait_until(lambda: pgjobq.tick(db) > 0, timeout=10)

    jobs = db.execute(
        "SELECT payload, priority, headers ->> 'schedule' AS schedule FROM jobq.jobs WHERE queue = 'beats'"
    ).fetchall()
    assert jobs
    assert all((j["payload"], j["priority"], j["schedule"]) == ({"n": 1}, 3, "pulse") for j in jobs)


def test_unschedule_cancels_the_jobs_the_schedule_has_queued(db: Db) -> None:
    pgjobq.schedule(db, "pulse", "beats", every=timedelta(seconds=1))
    assert wait_until(lambda: pgjobq.tick(db) > 0, timeout=10)

    pgjobq.unschedule(db, "pulse")

    assert count(db, "queue = 'beats' AND status <> 'cancelled'") == 0


def test_schedule_keeps_the_catch_up_asked_for(db: Db) -> None:
    made = pgjobq.schedule(db, "digest", "emails", every=timedelta(minutes=5), catch_up="all")

    assert made.catch_up == "all"


def test_tick_enqueues_nothing_when_no_occurrence_is_due(db: Db) -> None:
    pgjobq.schedule(db, "new_year", "emails", cron="0 0 1 1 *")

    assert pgjobq.tick(db) == 0
    assert count(db) == 0


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"every": 60}, "every must be a timedelta, got int"),
        ({"cron": 5}, "cron must be a string, got int"),
        ({"timezone": None, "cron": "* * * * *"}, "timezone must be a string, got NoneType"),
        ({"priority": "high", "cron": "* * * * *"}, "priority must be an integer, got str"),
        ({"catch_up": 1, "cron": "* * * * *"}, "catch_up must be a string, got int"),
        ({"payload": [1], "cron": "* * * * *"}, r"payload must be a mapping \(a JSON object\), got list"),
    ],
)
def test_schedule_refuses_arguments_of_the_wrong_type_before_any_sql(
    db: Db, options: dict[str, Any], expected: str
) -> None:
    schedule: Any = pgjobq.schedule

    with pytest.raises(pgjobq.InvalidArgument, match=f"^{expected}$"):
        schedule(db, "digest", "emails", **options)

    assert pgjobq.schedules(db) == []


def test_schedule_refuses_a_bad_cron_expression_naming_cron(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="cron"):
        pgjobq.schedule(db, "digest", "emails", cron="every day at noon")

    assert pgjobq.schedules(db) == []


def test_schedule_refuses_both_cron_and_every(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="exactly one of cron and every must be given, got both"):
        pgjobq.schedule(db, "digest", "emails", cron="* * * * *", every=timedelta(minutes=1))

    assert pgjobq.schedules(db) == []
