"""The worker core's steps (pgjobq._worker.steps), driven against scripted rows, without a database.

Each test builds a Core, runs one step with steps.drive and a Script that
answers the step's requests in order (a statement's rows as its decoder
returns them, or an error the database would raise), and checks what the
step sent and what it left in hand.  The statements themselves are the
database's to test (tests/worker runs both workers on a real one).
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from pgjobq import Discard, InvalidArgument, Job, LeaseLost, PermissionDenied, WorkerSettings
from pgjobq._client.proto import Call
from pgjobq._errors import UnknownTask
from pgjobq._queries import statements
from pgjobq._version import SUPPORTED_EXTENSION_VERSIONS
from pgjobq._worker.observe import Outcome, WorkerObserver
from pgjobq._worker.steps import (
    FEATURES,
    REGISTER_RETRY,
    Core,
    Heard,
    Listen,
    Request,
    Sleep,
    Unlisten,
    drive,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Script:
    """Answers a step's requests in order: each expected one is (what, answer), what being a statement's
    name or a request's type name, answer what to send back (an exception: to raise)."""

    def __init__(self, *expected: tuple[str, object]) -> None:
        self.expected = list(expected)
        self.sent: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.sent.append(request)
        assert self.expected, f"the step asked for more: {request!r}"
        what, answer = self.expected.pop(0)
        got = request.name if isinstance(request, Call) else type(request).__name__
        assert got == what, f"expected {what}, the step asked for {request!r}"
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def params(self, index: int) -> dict[str, Any]:
        request = self.sent[index]
        assert isinstance(request, Call) and request.params is not None
        return dict(request.params)

    def done(self) -> bool:
        return not self.expected


def job(job_id: int, *, task: str | None = None, attempts: int = 1, max_attempts: int = 3) -> Job:
    return Job(job_id, "q", {}, 0, attempts, max_attempts, job_id * 10, 60.0, 0.0, {}, task)


def claimed_row(job_id: int, task: str | None = None) -> tuple[Any, ...]:
    """A row of the claim statements (task, then control: extension 0.11.0's, which 0.10.0 has too)."""
    return (job_id, "q", {"n": job_id}, 0, 1, 3, job_id * 10, 60.0, 0.5, None, task, None)


class Outcomes(WorkerObserver):
    """Records the outcome of each job the worker settles."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def finished(self, job: Job, outcome: Outcome, seconds: float | None) -> None:
        self.seen.append((job.id, outcome))


def core(version: str = "0.10.0", **settings: Any) -> Core:
    made = Core(
        WorkerSettings(queue=settings.pop("queue", "q"), name="w", **settings),
        lock=contextlib.nullcontext(),
        stopping=lambda: False,
        start_handlers=lambda: None,
    )
    made.connected(version)
    return made


def succeed(worker: Core, *jobs: Job, result: str | None = None) -> None:
    """Put jobs in hand as handlers that returned, to acknowledge."""
    for each in jobs:
        worker.hand.start(each)
        worker.record(each, None, result)


def fail(worker: Core, each: Job, error: BaseException) -> None:
    worker.hand.start(each)
    worker.record(each, error, None)


# -- claiming -------------------------------------------------------------------------------------------


def test_a_claim_with_nothing_to_acknowledge_sends_the_claim_alone_and_holds_its_jobs() -> None:
    worker = core()
    rows = FEATURES["0.10.0"].jobs([claimed_row(1), claimed_row(2)])
    script = Script(("claim", rows))

    assert drive(worker.claim(), script) is True

    assert [j.id for j in worker.hand.backlog] == [1, 2]
    assert script.params(0) == {"queue": "q", "n": 10, "worker": "w", "lease_timeout": None}


def test_the_jobs_a_claim_holds_are_handed_to_the_workers_handlers_at_once() -> None:
    started: list[int] = []
    worker = core()
    worker.start_handlers = lambda: started.extend(j.id for j in worker.hand.backlog)

    drive(worker.claim(), Script(("claim", [job(1)])))

    assert started == [1]


def test_successes_ride_on_the_next_claim_in_one_statement() -> None:
    worker = core()
    succeed(worker, job(1), job(2))
    script = Script(("complete_and_claim", ({1, 2}, [job(3)])))

    drive(worker.claim(), script)

    params = script.params(0)
    assert (params["ids"], params["leases"], params["results"]) == ([1, 2], [10, 20], None)
    assert worker.processed == 2
    assert not worker.hand.ok
    assert [j.id for j in worker.hand.backlog] == [3]


def test_results_refused_as_a_batch_are_sent_one_by_one_and_the_one_refused_fails_its_job() -> None:
    worker = core()
    succeed(worker, job(1), result='"fine"')
    succeed(worker, job(2), result='"too big"')
    script = Script(
        ("complete_and_claim", InvalidArgument("a result is over 1 MiB")),
        ("complete_many", {1}),
        ("complete_many", InvalidArgument("result over 1 MiB")),
        ("claim", []),
    )

    assert drive(worker.claim(), script) is False

    assert script.done()
    assert [script.params(i)["ids"] for i in (1, 2)] == [[1], [2]]
    assert [(j.id, type(e)) for j, e in worker.hand.failed] == [(2, InvalidArgument)]
    assert worker.processed == 1


def test_a_claim_that_fails_keeps_the_successes_to_send_again() -> None:
    worker = core()
    succeed(worker, job(1), result='"kept"')

    with pytest.raises(psycopg.OperationalError):
        drive(worker.claim(), Script(("complete_and_claim", psycopg.OperationalError("connection lost"))))

    assert [j.id for j in worker.hand.ok] == [1]
    assert worker.hand.take_successes() == ([job(1)], ['"kept"'])


def test_over_several_queues_the_successes_go_first_then_one_claim_over_all_of_them() -> None:
    worker = core(queue=["a", "b"])
    succeed(worker, job(1))
    script = Script(("complete_many", {1}), ("claim_any", []))

    drive(worker.claim(), script)

    assert script.done()
    assert script.params(1)["queues"] == ["a", "b"]
    assert worker.processed == 1


def test_a_burst_worker_whose_claim_finds_nothing_and_holds_nothing_is_drained() -> None:
    worker = core(burst=True)

    drive(worker.claim(), Script(("claim", [])))

    assert worker.drained


@pytest.mark.parametrize(
    ("version", "queues", "register"),
    [
        ("0.10.0", ["q"], "register_waiter"),
        ("0.10.0", ["q", "r"], "register_waiter_any"),
        ("0.11.0", ["q"], "register_waiter"),
        ("0.11.0", ["q", "r"], "register_waiter_any"),
    ],
)
def test_the_registration_as_waiting_has_the_name_of_the_extension_version_connected_to(
    version: str, queues: list[str], register: str
) -> None:
    worker = listening(core(version, queue=queues))
    script = Script(
        ("DropWakeUps", None),
        (register, (True, None, None)),
        ("claim_any" if len(queues) > 1 else "claim", []),
        ("Sleep", False),
    )

    drive(worker.wait_for_work(), script)

    assert script.done()


def test_a_claimed_row_gives_its_job_its_task_and_headers_read_as_an_empty_dict_when_null() -> None:
    (claimed,) = FEATURES["0.11.0"].jobs([claimed_row(4, task="send_welcome")])

    assert (claimed.id, claimed.payload, claimed.headers, claimed.task) == (4, {"n": 4}, {}, "send_welcome")
    assert (claimed._lease_seconds, claimed._waited) == (60.0, 0.5)


def test_complete_and_claims_rows_tell_the_acknowledged_ids_from_the_jobs_claimed() -> None:
    done = ("done", 1, "q", None, 0, 1, 3, 10, None, None, None, None, None)
    running = ("running", *claimed_row(2, task="t"))

    acknowledged, jobs = FEATURES["0.10.0"].acknowledged_and_claimed([done, running])

    assert acknowledged == {1}
    assert [(j.id, j.task) for j in jobs] == [(2, "t")]


def test_every_supported_extension_version_has_its_statements() -> None:
    assert set(FEATURES) == set(SUPPORTED_EXTENSION_VERSIONS)
    named = statements("pgjobq", "queries.sql")
    for features in FEATURES.values():
        assert {features.claim, features.claim_any, features.complete_and_claim} <= set(named)


# -- acknowledging and reporting ------------------------------------------------------------------------


def test_a_success_whose_lease_the_database_refused_is_counted_and_said_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = core()
    succeed(worker, job(1), job(2))

    drive(worker.complete_many(), Script(("complete_many", {1})))

    assert worker.processed == 2
    assert "job 2: lease 20 lost; result discarded" in caplog.text


def test_each_failure_is_reported_in_a_statement_of_its_own_and_leaves_the_hand() -> None:
    worker = core()
    fail(worker, job(1), RuntimeError("one"))
    fail(worker, job(2), RuntimeError("two"))
    script = Script(("fail", ("queued", NOW)), ("fail", ("failed", None)))

    drive(worker.report_failures(), script)

    assert [script.params(i)["error"] for i in (0, 1)] == ["RuntimeError: one", "RuntimeError: two"]
    assert not worker.hand.failed
    assert worker.processed == 2


def test_discard_fails_the_job_for_good() -> None:
    worker = core("0.10.0")
    fail(worker, job(1), Discard("bad input"))
    script = Script(("fail_for_good", ("failed", None)))

    drive(worker.report_failures(), script)

    assert script.params(0) == {"id": 1, "lease": 10, "error": "bad input"}


def test_discard_raised_from_an_error_records_the_reason_and_that_errors_first_line() -> None:
    worker = core("0.10.0")
    try:
        try:
            int("x")
        except ValueError as exc:
            raise Discard("not a number") from exc
    except Discard as discard:
        fail(worker, job(1), discard)
    script = Script(("fail_for_good", ("failed", None)))

    drive(worker.report_failures(), script)

    assert (
        script.params(0)["error"] == "not a number: ValueError: invalid literal for int() with base 10: 'x'"
    )


def test_an_unknown_task_is_handed_back_without_spending_its_attempt() -> None:
    outcomes = Outcomes()
    worker = core("0.10.0", observers=[outcomes])
    fail(worker, job(1, task="t"), UnknownTask("t", retry_in=30, grace=3600))
    script = Script(("hand_back", "queued"))

    drive(worker.report_failures(), script)

    params = script.params(0)
    assert (params["delay"], params["fail_after"]) == (timedelta(seconds=30), timedelta(seconds=3600))
    assert "unknown task 't'" in params["error"]
    assert outcomes.seen == [(1, "snoozed")]


def test_an_unknown_task_past_its_grace_ends_failed() -> None:
    outcomes = Outcomes()
    worker = core("0.10.0", observers=[outcomes])
    fail(worker, job(1, task="t"), UnknownTask("t", retry_in=30, grace=3600))

    drive(worker.report_failures(), Script(("hand_back", "failed")))

    assert outcomes.seen == [(1, "failed")]


def test_an_unknown_task_is_warned_about_once_a_minute_per_task_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pgjobq.worker")
    worker = core("0.10.0")
    for job_id, task in [(1, "t"), (2, "t"), (3, "u")]:
        fail(worker, job(job_id, task=task), UnknownTask(task, retry_in=30, grace=3600))

    drive(worker.report_failures(), Script(*[("hand_back", "queued")] * 3))

    warned = [r.job_id for r in caplog.records if r.levelno == logging.WARNING]  # type: ignore[attr-defined]
    assert warned == [1, 3]


def test_a_log_line_about_a_job_carries_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    worker = core()
    fail(worker, job(5, task="t", attempts=3, max_attempts=3), RuntimeError("boom"))

    drive(worker.report_failures(), Script(("fail", ("failed", None))))

    (record,) = [r for r in caplog.records if "failed for good" in r.getMessage()]
    fields = (record.job_id, record.task, record.queue, record.attempt)  # type: ignore[attr-defined]
    assert fields == (5, "t", "q", 3)


def test_the_backlog_is_handed_back_unstarted_and_a_refused_lease_counts_as_lost() -> None:
    outcomes = Outcomes()
    worker = core(observers=[outcomes])
    worker.hand.hold([job(1), job(2)])

    drive(worker.release_backlog(), Script(("release", None), ("release", LeaseLost("reaped"))))

    assert outcomes.seen == [(1, "released"), (2, "lost")]
    assert not worker.hand


# -- leases ---------------------------------------------------------------------------------------------


def test_a_heartbeat_extends_the_unfinished_jobs_and_sets_the_cancel_requests_it_brings() -> None:
    worker = core()
    worker.hand.hold([job(1), job(2)])
    script = Script(("heartbeat_status", [(1, False, False), (2, True, False)]))

    drive(worker.heartbeat(), script)

    assert script.params(0) == {"ids": [1, 2], "leases": [10, 20]}
    assert [j.cancel_requested.is_set() for j in worker.hand.backlog] == [False, True]


def test_a_job_the_heartbeat_no_longer_holds_is_asked_to_stop() -> None:
    worker = core()
    lost = job(1)
    worker.hand.start(lost)

    drive(worker.heartbeat(), Script(("heartbeat_status", [])))

    assert lost.cancel_requested.is_set()


def test_no_heartbeat_is_sent_before_it_is_due() -> None:
    worker = core()
    worker.hand.hold([job(1)])
    worker.leases.next_due = float("inf")

    drive(worker.heartbeat(), Script())


# -- waiting for work -----------------------------------------------------------------------------------


def listening(worker: Core) -> Core:
    worker.listening = True
    return worker


def test_a_registered_worker_claims_once_more_then_sleeps_until_woken_and_claims_at_once() -> None:
    worker = listening(core())
    script = Script(
        ("DropWakeUps", None),
        ("register_waiter", (True, None, None)),
        ("claim", []),
        ("Sleep", True),
        ("claim", [job(1)]),
    )

    drive(worker.wait_for_work(), script)

    assert script.done()
    assert [j.id for j in worker.hand.backlog] == [1]


def test_the_sleep_ends_at_the_next_jobs_run_at_when_it_comes_before_the_poll() -> None:
    worker = listening(core(poll_interval=30))
    script = Script(
        ("DropWakeUps", None),
        ("register_waiter", (True, NOW, timedelta(seconds=2))),
        ("claim", []),
        ("Sleep", False),
    )

    drive(worker.wait_for_work(), script)

    sleep = script.sent[-1]
    assert isinstance(sleep, Sleep)
    assert sleep.deadline - worker.upkeep.next_due < 3  # not 30 s away


def test_a_refused_registration_claims_again_after_a_few_milliseconds_if_woken() -> None:
    worker = listening(core())
    script = Script(
        ("DropWakeUps", None), ("register_waiter", (False, None, None)), ("Sleep", True), ("claim", [])
    )

    drive(worker.wait_for_work(), script)

    assert script.done()
    first_sleep = script.sent[2]
    assert isinstance(first_sleep, Sleep)
    assert first_sleep.deadline <= time.monotonic() + REGISTER_RETRY


def test_the_outcomes_collected_are_acknowledged_before_registering() -> None:
    worker = listening(core())
    succeed(worker, job(1))
    script = Script(
        ("complete_many", {1}),
        ("DropWakeUps", None),
        ("register_waiter", (True, None, None)),
        ("claim", [job(2)]),
    )

    drive(worker.wait_for_work(), script)

    assert script.done()


def test_a_role_refused_jobq_register_waiter_is_told_once_and_only_sleeps_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = listening(core())
    drive(
        worker.wait_for_work(),
        Script(
            ("DropWakeUps", None),
            ("register_waiter", PermissionDenied("permission denied for function wait")),
        ),
    )

    drive(worker.wait_for_work(), Script(("Sleep", False)))

    assert not worker.may_wait
    assert caplog.text.count("not registering as waiting") == 1


def test_a_worker_that_does_not_listen_only_sleeps() -> None:
    drive(core().wait_for_work(), Script(("Sleep", False)))


# -- reap and tick, and listening -----------------------------------------------------------------------


def test_a_role_refused_jobq_reap_stops_reaping_and_still_ticks() -> None:
    worker = core()
    drive(
        worker.reap_and_tick(),
        Script(("reap_spaced", PermissionDenied("no")), ("tick", 0), ("running_version", "0.10.0")),
    )

    drive(worker.reap_and_tick(), Script(("tick", 0), ("running_version", "0.10.0")))

    assert not worker.upkeep.may_reap


def test_an_extension_upgraded_while_the_worker_runs_gives_it_the_new_statements_at_the_next_reap() -> None:
    worker = listening(core(version="0.10.0"))

    drive(worker.reap_and_tick(), Script(("reap_spaced", []), ("tick", 0), ("running_version", "0.11.0")))

    assert worker.features.version == "0.11.0"
    script = Script(
        ("DropWakeUps", None), ("register_waiter", (True, None, None)), ("claim", []), ("Sleep", False)
    )
    drive(worker.wait_for_work(), script)
    assert script.done()


def test_an_unsupported_version_read_while_running_is_logged_once_and_the_worker_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = core(version="0.10.0")

    for _ in range(3):
        drive(worker.reap_and_tick(), Script(("reap_spaced", []), ("tick", 0), ("running_version", "9.9.9")))

    assert worker.features.version == "0.10.0"
    assert caplog.text.count("now 9.9.9, which pgjobq-py") == 1


def test_a_probe_that_arrives_has_the_worker_listen_on_every_queues_channel() -> None:
    worker = core(queue=["a", "b"])
    script = Script(
        ("channel", "jobq_a"),
        ("channel", "jobq_b"),
        ("Listen", None),
        ("probe_notify", None),
        ("Heard", True),
        ("Unlisten", None),
        ("Listen", None),
        ("Listen", None),
    )

    assert drive(worker.listen(), script) is True

    probe = script.sent[2]
    assert isinstance(probe, Listen) and isinstance(script.sent[4], Heard)
    assert isinstance(script.sent[5], Unlisten) and script.sent[5].channel == probe.channel
    assert [r.channel for r in script.sent[6:] if isinstance(r, Listen)] == ["jobq_a", "jobq_b"]
    assert worker.listening


def test_a_probe_that_does_not_arrive_leaves_the_worker_polling(caplog: pytest.LogCaptureFixture) -> None:
    worker = core()
    script = Script(
        ("channel", "jobq_q"), ("Listen", None), ("probe_notify", None), ("Heard", False), ("Unlisten", None)
    )

    assert drive(worker.listen(), script) is False

    assert not worker.listening
    assert "polling every" in caplog.text


# -- the driver -----------------------------------------------------------------------------------------


def test_an_error_the_step_does_not_handle_comes_out_of_drive() -> None:
    with pytest.raises(psycopg.OperationalError):
        drive(core().reap_and_tick(), Script(("reap_spaced", psycopg.OperationalError("gone"))))


def test_on_0_10_0_a_worker_reaps_at_most_once_per_reap_interval_across_the_fleet() -> None:
    worker = core(version="0.10.0", reap_interval=7.0)
    script = Script(("reap_spaced", []), ("tick", 0), ("running_version", "0.10.0"))

    drive(worker.reap_and_tick(), script)

    assert script.done()
    assert script.params(0) == {"every": timedelta(seconds=7)}
