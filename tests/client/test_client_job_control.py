"""The client's job control (0.6.0): unique keys and headers at enqueue, results, snooze, cancel,
pause and resume, queue settings (timeouts among them), looking a job up, and waiting for it to finish.

Every call runs against the real extension; the waits are bounded by their timeouts, and no test
asserts how long anything took beyond "before the timeout".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

import pgjobq
from pgjobq._client import sync as client

from helpers.databases import login_role
from helpers.sqlhelpers import Connect, Db, record_notices, scalar


def row(db: Db, job_id: int) -> dict[str, Any]:
    found = db.execute("SELECT * FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return found


def result_row(db: Db, job_id: int) -> Any:
    """The job's result as jobq.results stores it; None when it has no row there."""
    found = db.execute("SELECT result FROM jobq.results WHERE id = %s", (job_id,)).fetchone()
    return None if found is None else found["result"]


def watched(db: Db, job_id: int) -> bool:
    """Whether the job asked for its "jobq.done" notification (bit 2 of jobq.jobs.control)."""
    return (row(db, job_id)["control"] or 0) & 2 != 0


def running(db: Db, queue: str = "default", **options: Any) -> pgjobq.Job:
    """A new job of queue, claimed: running under lease 1."""
    pgjobq.enqueue(db, queue, {}, **options)
    (claimed,) = pgjobq.claim(db, queue, 1, "w1")
    return claimed


def later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    """Run action on a thread of its own after seconds; join the thread to see it through."""

    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# -- enqueue: the queue's max_attempts, headers ---------------------------------------


def test_enqueue_without_max_attempts_gets_the_queues_setting_at_claim(db: Db) -> None:
    pgjobq.configure_queue(db, "default", max_attempts=7)
    job_id = pgjobq.enqueue(db, "default", {})

    (claimed,) = pgjobq.claim(db, "default", 1, "w1")

    assert (claimed.id, claimed.max_attempts) == (job_id, 7)


def test_enqueue_stores_headers_for_the_worker(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "default", {}, headers={"trace": "abc"})

    assert row(db, job_id)["headers"] == {"trace": "abc"}
    (claimed,) = pgjobq.claim(db, "default", 1, "w1")
    assert (claimed.id, claimed.headers) == (job_id, {"trace": "abc"})


def test_enqueue_takes_no_timeout_of_its_own(db: Db) -> None:
    enqueue: Any = pgjobq.enqueue  # the call below is refused by the type checker too

    with pytest.raises(TypeError, match="timeout"):
        enqueue(db, "default", {}, timeout=timedelta(minutes=5))

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_enqueue_many_gives_every_job_the_headers(db: Db) -> None:
    ids = pgjobq.enqueue_many(db, "default", [{}, {}], headers={"tenant": 9})

    assert [row(db, job_id)["headers"] for job_id in ids] == [{"tenant": 9}, {"tenant": 9}]


# -- unique keys ------------------------------------------------------------------------


def test_unique_key_in_use_returns_the_holders_id(db: Db) -> None:
    first = pgjobq.enqueue(db, "default", {"n": 1}, unique_key="k")

    second = pgjobq.enqueue(db, "default", {"n": 2}, unique_key="k")

    assert second == first
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


def test_unique_key_in_use_with_skip_returns_none(db: Db) -> None:
    pgjobq.enqueue(db, "default", {}, unique_key="k")

    assert pgjobq.enqueue(db, "default", {}, unique_key="k", on_conflict="skip") is None


def test_unique_key_in_use_with_raise_names_the_holder_and_its_status(db: Db) -> None:
    holder = pgjobq.enqueue(db, "default", {}, unique_key="k")
    pgjobq.claim(db, "default", 1, "w1")

    with pytest.raises(pgjobq.UniqueKeyInUse) as raised:
        pgjobq.enqueue(db, "default", {}, unique_key="k", on_conflict="raise")

    assert (raised.value.sqlstate, raised.value.job_id, raised.value.status) == ("JQ004", holder, "running")


def test_unique_key_in_use_names_the_holder_even_when_the_key_looks_like_the_message(db: Db) -> None:
    key = "it's held by job 1"
    holder = pgjobq.enqueue(db, "default", {}, unique_key=key)

    with pytest.raises(pgjobq.UniqueKeyInUse) as raised:
        pgjobq.enqueue(db, "default", {}, unique_key=key, on_conflict="raise")

    assert (raised.value.job_id, raised.value.status) == (holder, "queued")


def test_unique_key_replace_gives_a_queued_holder_the_new_payload(db: Db) -> None:
    holder = pgjobq.enqueue(db, "default", {"v": 1}, unique_key="k")

    replaced = pgjobq.enqueue(db, "default", {"v": 2}, unique_key="k", on_conflict="replace", priority=5)

    assert replaced == holder
    stored = row(db, holder)
    assert (stored["payload"], stored["priority"]) == ({"v": 2}, 5)


def test_unique_key_is_free_again_once_its_job_is_done(db: Db) -> None:
    first = running(db, unique_key="k")
    pgjobq.complete(db, first.id, first.lease)

    assert pgjobq.enqueue(db, "default", {}, unique_key="k") != first.id


def test_unique_scope_until_done_keeps_the_key_after_done(db: Db) -> None:
    first = running(db, unique_key="k", unique_scope="until_done")
    pgjobq.complete(db, first.id, first.lease)

    assert pgjobq.enqueue(db, "default", {}, unique_key="k", unique_scope="until_done") == first.id


def test_enqueue_many_unique_keys_are_aligned_with_the_payloads(db: Db) -> None:
    holder = pgjobq.enqueue(db, "default", {}, unique_key="old")

    ids = pgjobq.enqueue_many(db, "default", [{}, {}, {}, {}], unique_keys=["old", None, "new", "new"])

    assert ids[0] == holder
    assert ids[3] == ids[2]
    assert len({holder, ids[1], ids[2]}) == 3


def test_enqueue_many_skip_leaves_none_where_a_key_was_held(db: Db) -> None:
    pgjobq.enqueue(db, "default", {}, unique_key="old")

    ids = pgjobq.enqueue_many(db, "default", [{}, {}], unique_keys=["old", "new"], on_conflict="skip")

    assert ids[0] is None and isinstance(ids[1], int)


def test_enqueue_many_with_keys_that_are_all_none_inserts_every_job(db: Db) -> None:
    ids = pgjobq.enqueue_many(db, "default", [{}, {}], unique_keys=[None, None])

    assert len(set(ids)) == 2


# -- results, retries, snooze ---------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [{"total": 3}, [1, "two", None], "text", 42, 2.5, True, False],
    ids=["object", "array", "string", "integer", "float", "true", "false"],
)
def test_complete_stores_any_json_result_for_job_to_return(db: Db, result: Any) -> None:
    claimed = running(db)

    pgjobq.complete(db, claimed.id, claimed.lease, result=result)

    state = pgjobq.job(db, claimed.id)
    assert (state.status, state.result) == ("done", result)


def test_complete_without_a_result_stores_none(db: Db) -> None:
    claimed = running(db)

    pgjobq.complete(db, claimed.id, claimed.lease)

    assert pgjobq.job(db, claimed.id).result is None
    assert scalar(db, "SELECT count(*) FROM jobq.results WHERE id = %s", (claimed.id,)) == 0


def test_complete_many_stores_the_results_aligned_with_the_pairs(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    first, second = pgjobq.claim(db, "default", 2, "w1")

    accepted = pgjobq.complete_many(
        db, [(first.id, first.lease), (second.id, second.lease)], results=[{"n": 1}, None]
    )

    assert accepted == {first.id, second.id}
    assert (result_row(db, first.id), result_row(db, second.id)) == ({"n": 1}, None)


def test_complete_many_with_fewer_results_than_pairs_is_refused_by_the_database(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    first, second = pgjobq.claim(db, "default", 2, "w1")

    with pytest.raises(pgjobq.InvalidArgument) as raised:
        pgjobq.complete_many(db, [(first.id, first.lease), (second.id, second.lease)], results=[1])

    assert raised.value.sqlstate == "22023"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'running'") == 2


def test_complete_many_without_results_still_acknowledges(db: Db) -> None:
    claimed = running(db)

    assert pgjobq.complete_many(db, [(claimed.id, claimed.lease)]) == {claimed.id}


def test_complete_and_claim_stores_the_results_of_the_jobs_it_acknowledges(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    (first,) = pgjobq.claim(db, "default", 1, "w1")

    acknowledged, claimed = pgjobq.complete_and_claim(
        db, [(first.id, first.lease)], "default", 1, "w1", results=[{"sum": 10}]
    )

    assert acknowledged == {first.id} and len(claimed) == 1
    assert result_row(db, first.id) == {"sum": 10}


def test_claim_without_a_lease_timeout_takes_the_queues(db: Db) -> None:
    pgjobq.configure_queue(db, "default", lease_timeout=timedelta(minutes=10))
    pgjobq.enqueue(db, "default", {})

    (claimed,) = pgjobq.claim(db, "default", 1, "w1")

    stored = row(db, claimed.id)
    assert stored["lease_expires_at"] - stored["locked_at"] == timedelta(minutes=10)


def test_fail_with_retry_in_overrides_the_backoff(db: Db) -> None:
    claimed = running(db)

    status, run_at = pgjobq.fail(db, claimed.id, "later", claimed.lease, retry_in=timedelta(hours=2))

    assert status == "queued"
    assert run_at > datetime.now(timezone.utc) + timedelta(hours=1)


def test_snooze_puts_the_job_back_without_counting_the_attempt(db: Db) -> None:
    claimed = running(db)

    run_at = pgjobq.snooze(db, claimed.id, claimed.lease, timedelta(0))

    assert run_at is not None and run_at <= datetime.now(timezone.utc)
    (again,) = pgjobq.claim(db, "default", 1, "w1")
    assert (again.id, again.attempts) == (claimed.id, 1)


def test_snooze_returns_the_new_run_at_in_the_future(db: Db) -> None:
    claimed = running(db)

    run_at = pgjobq.snooze(db, claimed.id, claimed.lease, timedelta(hours=1))

    assert run_at is not None and run_at == row(db, claimed.id)["run_at"]
    assert run_at > datetime.now(timezone.utc) + timedelta(minutes=50)


def test_snooze_of_a_job_asked_to_stop_cancels_it_and_returns_none(db: Db) -> None:
    claimed = running(db)
    pgjobq.cancel(db, [claimed.id])

    assert pgjobq.snooze(db, claimed.id, claimed.lease, timedelta(hours=1)) is None

    state = pgjobq.job(db, claimed.id)
    assert (state.status, state.attempts, state.cancel_requested) == ("cancelled", 1, True)
    assert pgjobq.claim(db, "default", 1, "w1") == []


def test_snooze_with_a_stale_lease_raises_lease_lost(db: Db) -> None:
    claimed = running(db)

    with pytest.raises(pgjobq.LeaseLost):
        pgjobq.snooze(db, claimed.id, claimed.lease + 1, timedelta(seconds=1))


def test_heartbeat_after_the_deadline_raises_job_timed_out(db: Db) -> None:
    pgjobq.configure_queue(db, "default", timeout=timedelta(minutes=1))
    claimed = running(db)
    pgjobq.heartbeat(db, claimed.id, claimed.lease)  # within the queue's timeout: extended
    # the deadline the claim stored for this lease (the queue's timeout from the claim), as if it had passed
    moved = db.execute(
        "UPDATE jobq.deadlines SET deadline = now() - interval '1 second' WHERE id = %s AND lease = %s",
        (claimed.id, claimed.lease),
    )
    assert moved.rowcount == 1

    with pytest.raises(pgjobq.JobTimedOut) as raised:
        pgjobq.heartbeat(db, claimed.id, claimed.lease)

    assert raised.value.sqlstate == "JQ003"


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_reports_each_known_job_in_id_order_and_leaves_out_unknown_ids(db: Db) -> None:
    done = running(db)
    pgjobq.complete(db, done.id, done.lease)
    active = running(db)
    queued = pgjobq.enqueue(db, "default", {})

    outcomes = pgjobq.cancel(db, [queued, 424242, active.id, done.id])

    assert outcomes == [
        pgjobq.Cancellation(done.id, "done"),
        pgjobq.Cancellation(active.id, "cancel_requested"),
        pgjobq.Cancellation(queued, "cancelled"),
    ]


def test_cancel_requested_job_that_fails_ends_cancelled(db: Db) -> None:
    claimed = running(db, max_attempts=5)
    pgjobq.cancel(db, [claimed.id])

    status, _ = pgjobq.fail(db, claimed.id, "stopped", claimed.lease)

    assert status == "cancelled"
    assert pgjobq.job(db, claimed.id).cancel_requested is True


def test_cancel_with_force_refuses_the_workers_lease_from_then_on(db: Db) -> None:
    claimed = running(db)

    assert pgjobq.cancel(db, [claimed.id], force=True) == [pgjobq.Cancellation(claimed.id, "cancelled")]
    with pytest.raises(pgjobq.LeaseLost):
        pgjobq.complete(db, claimed.id, claimed.lease)


def test_cancel_of_no_ids_does_nothing(db: Db) -> None:
    assert pgjobq.cancel(db, []) == []


def test_stats_count_cancelled_jobs(db: Db) -> None:
    pgjobq.cancel(db, [pgjobq.enqueue(db, "default", {})])

    (default,) = pgjobq.stats(db)

    assert (default.queued, default.cancelled) == (0, 1)


# -- pause, resume, queue settings --------------------------------------------------------------


def test_paused_queue_gives_claims_nothing_until_resumed(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "default", {})
    pgjobq.pause(db, "default")
    assert pgjobq.claim(db, "default", 1, "w1") == []

    pgjobq.resume(db, "default")

    assert [claimed.id for claimed in pgjobq.claim(db, "default", 1, "w1")] == [job_id]


def test_pausing_a_queue_nothing_knows_pauses_it_and_sends_a_notice_naming_it(db: Db) -> None:
    notices = record_notices(db)

    pgjobq.pause(db, "reprots")

    assert [(q.queue, q.paused) for q in pgjobq.queues(db)] == [("reprots", True)]
    assert notices == ["queue 'reprots' has no settings, jobs or schedules yet: paused all the same"]


def test_resume_wakes_the_queues_workers(db: Db, connect: Connect) -> None:
    listener = connect()
    listener.execute("LISTEN jobq_default")
    pgjobq.pause(db, "default")

    pgjobq.resume(db, "default")

    assert [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)] == [
        ("jobq_default", "")
    ]


def test_configure_queue_returns_every_setting_as_now_in_effect(db: Db) -> None:
    settings = pgjobq.configure_queue(
        db, "emails", max_attempts=5, backoff_base=timedelta(seconds=2), timeout=timedelta(minutes=10)
    )

    assert settings == pgjobq.QueueSettings(
        queue="emails",
        paused=False,
        max_attempts=5,
        backoff_base=timedelta(seconds=2),
        backoff_max=timedelta(seconds=300),
        backoff_jitter=0.0,
        lease_timeout=timedelta(seconds=60),
        timeout=timedelta(minutes=10),
        configured=True,
        retain_done=timedelta(days=1),
        retain_failed=timedelta(days=14),
        retain_cancelled=timedelta(days=7),
    )


def test_configure_queue_leaves_settings_not_given_as_they_were(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", max_attempts=5)

    settings = pgjobq.configure_queue(db, "emails", backoff_jitter=0.5)

    assert (settings.max_attempts, settings.backoff_jitter) == (5, 0.5)


def test_configure_queue_unset_clears_a_setting_back_to_its_default(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", timeout=timedelta(minutes=1), lease_timeout=timedelta(seconds=30))

    settings = pgjobq.configure_queue(db, "emails", unset=["timeout"])

    assert (settings.timeout, settings.lease_timeout) == (None, timedelta(seconds=30))


def test_configure_queue_out_of_range_is_refused_by_the_database(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="backoff_jitter") as raised:
        pgjobq.configure_queue(db, "emails", backoff_jitter=2.0)

    assert raised.value.sqlstate == "22023"


def test_queues_lists_configured_queues_and_queues_with_jobs(db: Db) -> None:
    pgjobq.configure_queue(db, "emails", max_attempts=4)
    pgjobq.pause(db, "emails")
    pgjobq.enqueue(db, "pdfs", {})

    listed = {q.queue: q for q in pgjobq.queues(db)}

    assert set(listed) == {"emails", "pdfs"}
    assert (listed["emails"].paused, listed["emails"].max_attempts, listed["emails"].configured) == (
        True,
        4,
        True,
    )
    assert (listed["pdfs"].paused, listed["pdfs"].max_attempts, listed["pdfs"].configured) == (
        False,
        3,
        False,
    )


# -- job and watch --------------------------------------------------------------------------------


def test_job_reports_a_queued_jobs_state(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "emails", {}, max_attempts=4)

    state = pgjobq.job(db, job_id)

    assert (state.id, state.queue, state.status, state.attempts, state.max_attempts) == (
        job_id, "emails", "queued", 0, 4,
    )  # fmt: skip
    assert (state.result, state.last_error, state.finished_at, state.cancel_requested) == (
        None,
        None,
        None,
        False,
    )
    assert state.finished is False


def test_job_reports_the_last_error_of_a_failed_job(db: Db) -> None:
    claimed = running(db, max_attempts=1)
    pgjobq.fail(db, claimed.id, "boom", claimed.lease)

    state = pgjobq.job(db, claimed.id)

    assert (state.status, state.last_error, state.finished) == ("failed", "boom", True)
    assert state.finished_at is not None


def test_job_of_an_unknown_id_raises_job_not_found(db: Db) -> None:
    with pytest.raises(pgjobq.JobNotFound) as raised:
        pgjobq.job(db, 424242)

    assert raised.value.sqlstate == "JQ002"


def test_a_producer_granted_without_see_jobs_may_not_look_jobs_up(db: Db, dsn: str) -> None:
    with login_role(db) as role:
        db.execute("SELECT jobq.grant_producer(%s)", (role,))
        with psycopg.connect(dsn, user=role, autocommit=True) as producer:
            job_id = pgjobq.enqueue(producer, "default", {})  # not even its own job
            lookups: list[Callable[[], object]] = [
                lambda: pgjobq.job(producer, job_id),
                lambda: pgjobq.watch(producer, job_id),
                lambda: pgjobq.wait(producer, job_id, timedelta(seconds=1)),
            ]
            for lookup in lookups:
                with pytest.raises(pgjobq.PermissionDenied) as raised:
                    lookup()
                assert raised.value.sqlstate == "42501"
    assert watched(db, job_id) is False


def test_a_producer_granted_with_see_jobs_sees_every_jobs_state(db: Db, dsn: str) -> None:
    with login_role(db) as alice, login_role(db) as bob:
        db.execute("SELECT jobq.grant_producer(%s, see_jobs => true), jobq.grant_producer(%s)", (alice, bob))
        with (
            psycopg.connect(dsn, user=alice, autocommit=True) as as_alice,
            psycopg.connect(dsn, user=bob, autocommit=True) as as_bob,
        ):
            mine = pgjobq.enqueue(as_alice, "default", {})
            bobs = pgjobq.enqueue(as_bob, "default", {})

            # no ownership: a role that may look jobs up sees every one's state
            assert [pgjobq.job(as_alice, job_id).status for job_id in (mine, bobs)] == ["queued", "queued"]


def test_watch_notifies_jobq_done_with_the_id_once_the_job_finishes(db: Db, connect: Connect) -> None:
    claimed = running(db)
    listener = connect()
    listener.execute('LISTEN "jobq.done"')

    assert pgjobq.watch(listener, claimed.id).status == "running"
    pgjobq.complete(db, claimed.id, claimed.lease)

    heard = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert heard == [("jobq.done", str(claimed.id))]


# -- wait ----------------------------------------------------------------------------------------------


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """wait re-reads the job only every 10 minutes: within a shorter timeout, only its notification
    can wake it."""
    monkeypatch.setattr(client, "POLL_FIRST", 600.0)
    monkeypatch.setattr(client, "POLL_MAX", 600.0)


@pytest.fixture
def waiter(connect: Connect) -> Iterator[psycopg.Connection[Any]]:
    conn = connect()
    yield conn
    # wait stops listening whatever happened
    assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone() == (0,)


def test_wait_returns_at_once_the_state_of_a_finished_job(db: Db, waiter: psycopg.Connection[Any]) -> None:
    claimed = running(db)
    pgjobq.complete(db, claimed.id, claimed.lease, result={"ok": True})

    state = pgjobq.wait(waiter, claimed.id, timedelta(0))

    assert state is not None and (state.status, state.result) == ("done", {"ok": True})


def test_wait_is_woken_by_the_notification_of_the_jobs_completion(
    db: Db, waiter: psycopg.Connection[Any], no_polling: None
) -> None:
    claimed = running(db)
    finisher = later(0.5, lambda: pgjobq.complete(db, claimed.id, claimed.lease, result=[1, 2]))
    started = time.monotonic()

    state = pgjobq.wait(waiter, claimed.id, timedelta(seconds=60))

    finisher.join()
    assert state is not None and (state.status, state.result) == ("done", [1, 2])
    assert time.monotonic() - started < 60  # before the timeout, with no poll before it either


def test_wait_returns_a_job_that_failed(db: Db, waiter: psycopg.Connection[Any], no_polling: None) -> None:
    claimed = running(db, max_attempts=1)
    finisher = later(0.3, lambda: pgjobq.fail(db, claimed.id, "boom", claimed.lease))

    state = pgjobq.wait(waiter, claimed.id, timedelta(seconds=60))

    finisher.join()
    assert state is not None and (state.status, state.last_error) == ("failed", "boom")


def test_wait_returns_a_job_that_was_cancelled(
    db: Db, waiter: psycopg.Connection[Any], no_polling: None
) -> None:
    job_id = pgjobq.enqueue(db, "default", {})
    canceller = later(0.3, lambda: pgjobq.cancel(db, [job_id]))

    state = pgjobq.wait(waiter, job_id, timedelta(seconds=60))

    canceller.join()
    assert state is not None and state.status == "cancelled"


def test_wait_ignores_the_notifications_of_other_jobs(
    db: Db, waiter: psycopg.Connection[Any], no_polling: None, connect: Connect
) -> None:
    other, mine = (running(db) for _ in range(2))
    watcher = connect()
    pgjobq.watch(watcher, other.id)
    finisher = later(0.3, lambda: pgjobq.complete(db, other.id, other.lease))

    assert pgjobq.wait(waiter, mine.id, timedelta(seconds=2)) is None
    finisher.join()


def test_wait_polls_for_a_job_that_finished_without_a_notification(
    db: Db, waiter: psycopg.Connection[Any]
) -> None:
    claimed = running(db)

    def finish_unnoticed() -> None:
        # as if the notification were lost: the job no longer asks for one
        db.execute("UPDATE jobq.jobs SET control = nullif(control & ~2, 0) WHERE id = %s", (claimed.id,))
        pgjobq.complete(db, claimed.id, claimed.lease)

    finisher = later(0.5, finish_unnoticed)

    state = pgjobq.wait(waiter, claimed.id, timedelta(seconds=60))

    finisher.join()
    assert state is not None and state.status == "done"


def test_wait_returns_none_at_the_timeout(db: Db, waiter: psycopg.Connection[Any]) -> None:
    claimed = running(db)
    started = time.monotonic()

    assert pgjobq.wait(waiter, claimed.id, timedelta(seconds=0.3)) is None
    assert time.monotonic() - started >= 0.3


def test_wait_for_an_unknown_id_raises_job_not_found(waiter: psycopg.Connection[Any]) -> None:
    with pytest.raises(pgjobq.JobNotFound):
        pgjobq.wait(waiter, 424242, timedelta(seconds=5))


def test_wait_inside_a_transaction_is_refused_before_any_sql(db: Db, connect: Connect) -> None:
    claimed = running(db)
    conn = connect(autocommit=False)
    conn.execute("SELECT 1")

    with pytest.raises(pgjobq.InvalidArgument, match="outside a transaction") as raised:
        pgjobq.wait(conn, claimed.id, timedelta(seconds=1))

    assert raised.value.sqlstate is None
    assert conn.info.transaction_status == TransactionStatus.INTRANS  # the caller's, still open
    assert watched(db, claimed.id) is False


def test_wait_on_a_connection_not_in_autocommit_runs_outside_transactions(
    db: Db, connect: Connect, no_polling: None
) -> None:
    claimed = running(db)
    conn = connect(autocommit=False)
    finisher = later(0.3, lambda: pgjobq.complete(db, claimed.id, claimed.lease))

    state = pgjobq.wait(conn, claimed.id, timedelta(seconds=60))

    finisher.join()
    assert state is not None and state.status == "done"
    assert conn.info.transaction_status == TransactionStatus.IDLE


def test_a_producer_granted_with_see_jobs_may_wait_for_its_jobs_result(db: Db, dsn: str) -> None:
    with login_role(db) as role:
        db.execute("SELECT jobq.grant_producer(%s, see_jobs => true)", (role,))
        with psycopg.connect(dsn, user=role, autocommit=True) as producer:
            job_id = pgjobq.enqueue(producer, "default", {})
            (claimed,) = pgjobq.claim(db, "default", 1, "w1")
            finisher = later(0.3, lambda: pgjobq.complete(db, claimed.id, claimed.lease, result="ok"))

            state = pgjobq.wait(producer, job_id, timedelta(seconds=60))

            finisher.join()
            assert state is not None and state.result == "ok"


def test_wait_leaves_the_callers_own_listens_alone(db: Db, connect: Connect) -> None:
    claimed = running(db)
    pgjobq.complete(db, claimed.id, claimed.lease)
    conn = connect()
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier("mine")))

    pgjobq.wait(conn, claimed.id, timedelta(seconds=1))

    assert conn.execute("SELECT array_agg(c) FROM pg_listening_channels() AS c").fetchone() == (["mine"],)
