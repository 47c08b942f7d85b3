"""The durable chaos run (short version) and the checks it relies on.

tests/chaos/chaos_durable.py: 400 durable jobs (three steps each, half of them sleeping durably, half
waiting for a signal that mostly comes), 4 real worker processes, SIGKILL every 2 s, a SIGSTOP past the
lease and a PostgreSQL restart -m immediate.  The slow tests share one run: one test, parametrized over the
keys the harness declares (chaos_durable.INVARIANTS), asserts each invariant (one effect per recorded
step, no checkpoint from a stale lease, sleeps woken neither early nor late, signals releasing their
waiters once, nothing lost), and another that the run judged exactly those.  The fast tests prove the
checks can fail: each builds, in a test database with the run's evidence tables, a history with the
extension's own functions as the run's workers, handlers and signaller would leave it, forges in it what a
broken fence, replay, claim, signal or worker would leave, expects it counted, and expects the run's
verdict (chaos_durable.judge) to fail that invariant; the sound history they start from holds every one.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from rich.console import Console

import pgjobq
from pgjobq import Job

from chaos.chaos import QUEUE, Invariant
from chaos.chaos_durable import (
    INVARIANTS,
    SCHEMA_DDL,
    SIGNAL_AND_RECORD,
    DurableConfig,
    DurableReport,
    DurableSeen,
    evidence,
    judge,
    render,
    run_durable,
)
from chaos.chaos_durable_handlers import SLEEP, signal_key
from helpers.fixtures import once_per_run
from helpers.sqlhelpers import Db

# a run of its own: under pytest-xdist it stays on one worker, apart from the other chaos runs'
pytestmark = pytest.mark.xdist_group("chaos_durable")

# The run's config, but a slack of a minute for the sleeps: no check of a history built here depends on
# how fast this machine runs it (the late wakes forged below are ten minutes late).
CONFIG = dataclasses.replace(DurableConfig.short(), slack=60.0)

# -- the checks, on histories built with the extension's functions ---------------------------------


@pytest.fixture
def durable_db(db: Db) -> Db:
    """A test database with the run's evidence tables and triggers."""
    db.execute(SCHEMA_DDL)
    return db


class History:
    """Jobs of the run's queue taken through the extension's functions as the run's worker (claim, reap,
    complete), its handler (the effects and the other evidence, checkpoint, sleep, await_signal) and its
    signaller (SIGNAL_AND_RECORD) would, one job at a time."""

    def __init__(self, db: Db) -> None:
        self.db = db

    def enqueue(
        self, *, sleep: float | None = None, signal: bool = False, timeout: float | None = None
    ) -> int:
        payload = {"n": 0, "ms": [0, 0], "fail": False, "sleep": sleep, "signal": signal, "timeout": timeout}
        job_id = pgjobq.enqueue(self.db, QUEUE, payload, max_attempts=100)
        self.db.execute("INSERT INTO chaos.acked (id) VALUES (%s)", (job_id,))
        return job_id

    def claim(self, job_id: int) -> Job:
        (job,) = pgjobq.claim(self.db, QUEUE, 1, "w1")
        assert job.id == job_id
        return job

    def effect(self, job: Job, step: str) -> dict[str, Any]:
        token = uuid.uuid4()
        self.db.execute(
            "INSERT INTO chaos.effects (token, job_id, step, lease, pid, worker)"
            " VALUES (%s, %s, %s, %s, 1, 'w1')",
            (token, job.id, step, job.lease),
        )
        return {"token": str(token), "lease": job.lease, "pid": 1}

    def checkpoint(self, job: Job, step: str, result: dict[str, Any]) -> str:
        row = self.db.execute(
            "SELECT jobq.checkpoint(%s, %s, %s, %s) AS r", (job.id, job.lease, step, Jsonb(result))
        ).fetchone()
        assert row is not None
        return str(row["r"]["token"])

    def step(self, job: Job, step: str) -> str:
        """Step's effect and checkpoint; the token recorded."""
        return self.checkpoint(job, step, self.effect(job, step))

    def sleep(self, job: Job, seconds: float) -> bool:
        """The handler's request, then jobq.sleep: whether the sleep is over."""
        self.db.execute(
            "INSERT INTO chaos.sleep_requests (token, job_id, lease, name, seconds, requested_until)"
            " VALUES (gen_random_uuid(), %s, %s, %s, %s, clock_timestamp() + make_interval(secs => %s))",
            (job.id, job.lease, SLEEP, seconds, seconds),
        )
        row = self.db.execute(
            "SELECT jobq.sleep(%s, %s, %s, clock_timestamp() + make_interval(secs => %s)) AS over",
            (job.id, job.lease, SLEEP, seconds),
        ).fetchone()
        assert row is not None
        return bool(row["over"])

    def await_signal(self, job: Job, timeout: float) -> tuple[bool, Any]:
        """jobq.await_signal: (parked, payload)."""
        row = self.db.execute(
            "SELECT p IS NULL AS parked, p AS payload"
            "  FROM jobq.await_signal(%s, %s, %s, make_interval(secs => %s)) AS p",
            (job.id, job.lease, signal_key(job.id), timeout),
        ).fetchone()
        assert row is not None
        return bool(row["parked"]), row["payload"]

    def resume(self, job: Job, kind: str, name: str, payload: Any = None) -> None:
        self.db.execute(
            "INSERT INTO chaos.resumes (token, job_id, lease, kind, name, payload)"
            " VALUES (gen_random_uuid(), %s, %s, %s, %s, %s)",
            (job.id, job.lease, kind, name, Jsonb(payload)),
        )

    def signal(self, job_id: int, payload: dict[str, Any]) -> int:
        row = self.db.execute(
            SIGNAL_AND_RECORD, {"key": signal_key(job_id), "payload": Jsonb(payload)}
        ).fetchone()
        assert row is not None
        return int(row["released"])

    def refused(self, job: Job, step: str) -> None:
        """A zombie's step: its effect, its checkpoint refused (JQ001), the refusal recorded."""
        with pytest.raises(psycopg.Error) as refused:
            self.step(job, step)
        assert refused.value.sqlstate == "JQ001"
        self.db.execute(
            "INSERT INTO chaos.refusals (token, job_id, lease) VALUES (gen_random_uuid(), %s, %s)",
            (job.id, job.lease),
        )

    def reap(self, job_id: int) -> None:
        """Reap job_id, as if its worker had died ten minutes ago, and make it runnable again at once."""
        self.db.execute(
            "UPDATE jobq.jobs SET locked_at = locked_at - interval '10 minutes',"
            " lease_expires_at = lease_expires_at - interval '10 minutes' WHERE id = %s",
            (job_id,),
        )
        self.db.execute("SELECT jobq.reap()")
        self.db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (job_id,))

    def complete(self, job: Job, **result: Any) -> None:
        pgjobq.complete(self.db, job.id, job.lease, result=result)

    def wait_for(self, job: Job, sent_before: dict[str, Any] | None) -> None:
        """Steps a and b, the wait for the signal (sent_before it: the payload at once, and sent again
        after; else parked, signalled, claimed again), then step c and done."""
        a, b = self.step(job, "a"), self.step(job, "b")
        payload = sent_before or {"key": signal_key(job.id), "nonce": 2}
        if sent_before is not None:
            assert self.signal(job.id, sent_before) == 0
            assert self.await_signal(job, 60) == (False, sent_before)
            assert self.signal(job.id, {**sent_before, "again": True}) == 0
        else:
            assert self.await_signal(job, 60) == (True, None)
            assert self.signal(job.id, payload) == 1
            job = self.claim(job.id)
            assert self.await_signal(job, 60) == (False, payload)
        self.resume(job, "signal", signal_key(job.id), payload)
        self.complete(job, a=a, b=b, signal=payload, c=self.step(job, "c"))

    def plain(self, job: Job, a: str | None = None) -> None:
        """The rest of a job with no sleep nor wait: steps a (unless given), b and c, then done."""
        a = a or self.step(job, "a")
        b = self.step(job, "b")
        self.complete(job, a=a, b=b, c=self.step(job, "c"))


def sound_history(h: History) -> dict[str, int]:
    """One job of each kind the run makes, each by the rules; their ids by kind."""
    ids: dict[str, int] = {}
    # a worker killed between step b's effect and its checkpoint: reaped, run again, b's effect again
    ids["killed"] = j = h.enqueue()
    first = h.claim(j)
    a = h.step(first, "a")
    h.effect(first, "b")
    h.reap(j)
    h.plain(h.claim(j), a=a)  # step a replayed: no effect
    # a worker stopped past its lease: reaped, run again; when it goes on, its step a is refused
    ids["zombie"] = j = h.enqueue()
    zombie = h.claim(j)
    h.reap(j)
    job = h.claim(j)
    h.refused(zombie, "a")
    h.plain(job)
    # a sleep: given back, claimed again once over
    ids["sleep"] = j = h.enqueue(sleep=0.2)
    job = h.claim(j)
    a = h.step(job, "a")
    assert not h.sleep(job, 0.2)
    time.sleep(0.3)
    job = h.claim(j)
    assert h.sleep(job, 0.2)
    h.resume(job, "sleep", SLEEP)
    h.plain(job, a=a)
    # a wait released by its signal
    ids["released"] = j = h.enqueue(signal=True, timeout=60)
    h.wait_for(h.claim(j), sent_before=None)
    # a signal sent before the wait (the payload at once), and again after it (changing nothing)
    ids["at_once"] = j = h.enqueue(signal=True, timeout=60)
    h.wait_for(h.claim(j), sent_before={"key": signal_key(j), "nonce": 1})
    # a wait that times out (jobq.tick), and its signal sent too late
    ids["timed_out"] = j = h.enqueue(signal=True, timeout=0.1)
    job = h.claim(j)
    a, b = h.step(job, "a"), h.step(job, "b")
    assert h.await_signal(job, 0.1)[0]
    time.sleep(0.2)
    h.db.execute("SELECT jobq.tick()")
    assert h.signal(j, {"key": signal_key(j), "nonce": 3}) == 0
    job = h.claim(j)
    with pytest.raises(psycopg.Error) as timed_out:
        h.await_signal(job, 0.1)
    assert timed_out.value.sqlstate == "JQ005"
    h.resume(job, "timeout", signal_key(j))
    h.complete(job, a=a, b=b, signal="timeout", c=h.step(job, "c"))
    # the outage, an hour before
    h.db.execute(
        "INSERT INTO chaos.outages (down_at, up_at) VALUES (now() - interval '1 hour',"
        " now() - interval '1 hour' + interval '3 seconds')"
    )
    return ids


def sound_seen(db: Db, **changes: Any) -> DurableSeen:
    """What a run of the history in db saw besides it, had it seen nothing wrong (but the changes): as many
    jobs as chaos.acked holds, every worker exiting 0 on SIGTERM, faults of every kind."""
    row = db.execute("SELECT count(*) AS n, now() AS at FROM chaos.acked").fetchone()
    assert row is not None
    at: datetime = row["at"]
    seen = DurableSeen(
        acked=int(row["n"]), exits={"w1": 0}, unexpected_exits=[], kills=1, kills_holding=1, stopped=True,
        outages=[(at - timedelta(hours=1), at - timedelta(hours=1) + timedelta(seconds=3))],
    )  # fmt: skip
    return dataclasses.replace(seen, **changes)


def verdict(db: Db, **changes: Any) -> dict[str, Invariant]:
    """The run's verdict (chaos_durable.judge), by key, on the history in db, judged as a sound run would
    be (sound_seen, but the changes)."""
    return {
        invariant.key: invariant
        for invariant in judge(evidence(db, CONFIG), CONFIG, sound_seen(db, **changes))
    }


def failing(judged: dict[str, Invariant]) -> list[str]:
    return [key for key, invariant in judged.items() if not invariant.ok]


def lease_of(db: Db, job_id: int) -> int:
    """The job's lease now (its last claim's)."""
    row = db.execute("SELECT lease FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row["lease"])


def forge_effect(db: Db, job_id: int, step: str, lease: int) -> None:
    """An effect of job_id's step under lease, as a handler would have written it."""
    db.execute(
        "INSERT INTO chaos.effects (token, job_id, step, lease, pid, worker)"
        " VALUES (gen_random_uuid(), %s, %s, %s, 1, 'w1')",
        (job_id, step, lease),
    )


@pytest.fixture
def history(durable_db: Db) -> tuple[History, dict[str, int]]:
    """The sound history in a test database: the History that made it, and its jobs' ids by kind."""
    h = History(durable_db)
    return h, sound_history(h)


def test_a_sound_history_holds_every_declared_invariant(history: tuple[History, dict[str, int]]) -> None:
    h, _ = history

    found = evidence(h.db, CONFIG)
    judged = judge(found, CONFIG, sound_seen(h.db))

    assert [invariant.key for invariant in judged] == list(INVARIANTS)
    assert failing({invariant.key: invariant for invariant in judged}) == []
    effects, stale, sleeps, signals = (found[k] for k in ("effects", "stale", "sleeps", "signals"))
    counted = ("pairs", "recorded", "effects", "extra", "extra_reaped", "unexplained")
    assert {k: effects[k] for k in counted} == {
        "pairs": 18, "recorded": 18, "effects": 20, "extra": 2, "extra_reaped": 2, "unexplained": 0,
    }  # fmt: skip
    assert {k: stale[k] for k in ("steps", "sleeps", "outcomes", "refused", "refused_live")} == {
        "steps": 18, "sleeps": 1, "outcomes": 3, "refused": 1, "refused_live": 0,
    }  # fmt: skip
    assert {k: sleeps[k] for k in ("sleeps", "early_claims", "late", "clear", "across_outage")} == {
        "sleeps": 1, "early_claims": 0, "late": 0, "clear": 1, "across_outage": 0,
    }  # fmt: skip
    counted = ("awaiting", "at_once", "released_waiting", "timed_out", "calls", "released")
    assert {k: signals[k] for k in counted} == {
        "awaiting": 3, "at_once": 1, "released_waiting": 1, "timed_out": 1, "calls": 4, "released": 1,
    }  # fmt: skip


def test_the_step_log_captures_the_jobs_row_as_each_step_was_recorded(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history

    rows = h.db.execute(
        "SELECT id, name, kind, job_status, job_lease, attempt, job_attempts FROM chaos.step_log ORDER BY seq"
    ).fetchall()

    by_kind = {(r["id"], r["name"]): r for r in rows}
    released = by_kind[(ids["released"], signal_key(ids["released"]))]
    timed_out = by_kind[(ids["timed_out"], signal_key(ids["timed_out"]))]
    at_once = by_kind[(ids["at_once"], signal_key(ids["at_once"]))]
    # released by jobq.signal, timed out by jobq.tick: queued by the same statement, for the next attempt
    assert (released["job_status"], released["attempt"]) == ("queued", released["job_attempts"] + 1)
    assert (timed_out["job_status"], timed_out["attempt"]) == ("queued", timed_out["job_attempts"] + 1)
    assert (at_once["job_status"], at_once["attempt"]) == ("running", at_once["job_attempts"])
    assert {r["job_status"] for r in rows if r["kind"] in ("step", "sleep")} == {"running"}


# -- (1) effects ----------------------------------------------------------------------------------


def test_a_recorded_step_run_again_by_a_later_lease_is_unexplained(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history
    # a broken replay: the run after the sleep ran step a again
    forge_effect(h.db, ids["sleep"], "a", lease_of(h.db, ids["sleep"]))

    effects = evidence(h.db, CONFIG)["effects"]

    assert (effects["unexplained"], effects["wrong"]) == (1, 1)
    assert failing(verdict(h.db)) == ["effects_once"]


def test_two_effects_under_the_recording_lease_are_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    # the run that recorded step c made its effect twice
    forge_effect(h.db, ids["killed"], "c", lease_of(h.db, ids["killed"]))

    effects = evidence(h.db, CONFIG)["effects"]

    assert (effects["recorder_not_once"], effects["wrong"]) == (1, 1)
    assert failing(verdict(h.db)) == ["effects_once"]


def test_an_effect_of_an_earlier_lease_that_was_not_killed_is_unexplained(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history
    # step b's effect made by the run that went to sleep (its lease ended by jobq.sleep, not by a reap or
    # an error): the sleep gave the job back in the middle of a step
    forge_effect(h.db, ids["sleep"], "b", lease_of(h.db, ids["sleep"]) - 1)

    effects = evidence(h.db, CONFIG)["effects"]

    assert (effects["extra"], effects["unexplained"]) == (3, 1)
    assert failing(verdict(h.db)) == ["effects_once"]


def test_an_effect_of_a_lease_handed_back_is_explained(history: tuple[History, dict[str, int]]) -> None:
    h, _ = history
    job = h.claim(j := h.enqueue())
    h.effect(job, "a")
    # the worker presumed the lease lost while the server was down; the handler raised; handed back
    h.db.execute("SELECT jobq.release(%s, %s)", (j, job.lease))
    h.plain(h.claim(j))

    effects = evidence(h.db, CONFIG)["effects"]

    assert (effects["extra"], effects["extra_reaped"], effects["unexplained"]) == (3, 2, 0)
    assert failing(verdict(h.db)) == []


def test_a_recorded_result_not_the_recording_leases_effect_is_counted(
    history: tuple[History, dict[str, int]],
) -> None:
    h, _ = history
    job = h.claim(h.enqueue())
    h.effect(job, "a")
    a = h.checkpoint(job, "a", {"token": str(uuid.uuid4()), "lease": job.lease, "pid": 1})  # not its effect's
    h.plain(job, a=a)

    effects = evidence(h.db, CONFIG)["effects"]

    assert (effects["result_not_effect"], effects["wrong"]) == (1, 1)
    assert failing(verdict(h.db)) == ["effects_once"]


def test_a_result_not_holding_the_recorded_tokens_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    # the run after the reap returned another token for step a than the one recorded
    h.db.execute(
        "UPDATE jobq.results SET result = jsonb_set(result, '{a}', '\"other\"') WHERE id = %s",
        (ids["killed"],),
    )

    assert evidence(h.db, CONFIG)["effects"]["results_wrong"] == 1
    assert failing(verdict(h.db)) == ["effects_once"]


# -- (2) stale leases ------------------------------------------------------------------------------


def test_a_checkpoint_accepted_from_a_stale_lease_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, _ = history
    zombie = h.claim(j := h.enqueue())
    h.reap(j)
    job = h.claim(j)
    # a fence that let the zombie through: its step recorded while the job runs under the new lease
    h.db.execute(
        "INSERT INTO jobq.job_steps (id, name, kind, result, attempt, recorded_at)"
        " VALUES (%s, 'a', 'step', %s, %s, now())",
        (j, Jsonb(h.effect(zombie, "a")), zombie.attempts),
    )
    h.plain(job, a=h.checkpoint(job, "a", h.effect(job, "a")))

    stale = evidence(h.db, CONFIG)["stale"]

    assert (stale["other_lease"], stale["not_running"]) == (1, 1)
    assert "no_stale_checkpoint" in failing(verdict(h.db))


def test_a_lease_lost_refused_to_a_live_lease_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    # a refusal the run met while the lease was still the job's: recorded before its run ended
    h.db.execute(
        "INSERT INTO chaos.refusals (token, job_id, lease, at)"
        " SELECT gen_random_uuid(), job_id, new_lease, at FROM chaos.transitions"
        "  WHERE job_id = %s AND new_lease = %s AND new_lease <> old_lease",
        (ids["sleep"], lease_of(h.db, ids["sleep"])),
    )

    assert evidence(h.db, CONFIG)["stale"]["refused_live"] == 1
    assert failing(verdict(h.db)) == ["no_stale_checkpoint"]


def test_a_run_that_met_no_stale_lease_proves_nothing_of_the_fence(
    history: tuple[History, dict[str, int]],
) -> None:
    h, _ = history
    h.db.execute("DELETE FROM chaos.refusals")

    assert failing(verdict(h.db)) == ["no_stale_checkpoint"]


# -- (3) sleeps ------------------------------------------------------------------------------------


def shift_sleep(db: Db, job_id: int, by: timedelta) -> None:
    """Move the recorded end of job_id's sleep (and the wake time its run asked for) by `by`: the log of a
    sleep that ended that much later (earlier) than the claim that followed it."""
    db.execute(
        "UPDATE chaos.step_log SET result = jsonb_build_object('until', (result->>'until')::timestamptz + %s)"
        " WHERE id = %s AND kind = 'sleep'",
        (by, job_id),
    )
    db.execute(
        "UPDATE chaos.sleep_requests SET requested_until = requested_until + %s WHERE job_id = %s",
        (by, job_id),
    )


def test_a_sleeping_job_claimed_before_its_end_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    shift_sleep(h.db, ids["sleep"], timedelta(hours=1))

    sleeps = evidence(h.db, CONFIG)["sleeps"]

    assert (sleeps["early_claims"], sleeps["early_resumes"]) == (1, 1)
    assert failing(verdict(h.db)) == ["sleep_wake"]


def test_a_sleeping_job_claimed_long_after_its_end_is_counted(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history
    shift_sleep(h.db, ids["sleep"], -timedelta(minutes=10))

    sleeps = evidence(h.db, CONFIG)["sleeps"]

    assert (sleeps["late"], sleeps["clear"]) == (1, 1)
    assert sleeps["worst"] > 600
    assert failing(verdict(h.db)) == ["sleep_wake"]


def test_a_sleep_that_ended_while_the_server_was_down_is_judged_from_its_return(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history
    shift_sleep(h.db, ids["sleep"], -timedelta(minutes=10))
    # down from before the sleep's end until just before the claim
    h.db.execute(
        "INSERT INTO chaos.outages (down_at, up_at)"
        " SELECT (l.result->>'until')::timestamptz - interval '1 second',"
        "        (SELECT min(t.at) FROM chaos.transitions AS t"
        "          WHERE t.job_id = l.id AND t.new_lease <> t.old_lease AND t.at > l.recorded_at)"
        "        - interval '0.1 second'"
        "   FROM chaos.step_log AS l WHERE l.id = %s AND l.kind = 'sleep'",
        (ids["sleep"],),
    )

    sleeps = evidence(h.db, CONFIG)["sleeps"]

    assert (sleeps["late"], sleeps["across_outage"], sleeps["late_after_outage"]) == (0, 1, 0)
    assert failing(verdict(h.db)) == []


def test_a_sleep_claimed_long_after_the_server_was_back_is_counted(
    history: tuple[History, dict[str, int]],
) -> None:
    h, ids = history
    shift_sleep(h.db, ids["sleep"], -timedelta(minutes=20))
    h.db.execute(
        "INSERT INTO chaos.outages (down_at, up_at)"
        " SELECT until - interval '1 second', until + interval '5 minutes'"
        "   FROM (SELECT (result->>'until')::timestamptz AS until FROM chaos.step_log"
        "          WHERE id = %s AND kind = 'sleep') AS s",
        (ids["sleep"],),
    )

    sleeps = evidence(h.db, CONFIG)["sleeps"]

    assert (sleeps["across_outage"], sleeps["late_after_outage"]) == (1, 1)
    assert failing(verdict(h.db)) == ["sleep_wake"]


# -- (4) signals -----------------------------------------------------------------------------------


def test_a_second_signal_that_released_a_job_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    # a second signal of the released job's key that says it released one (in a transaction that moved none)
    h.db.execute(
        "INSERT INTO chaos.signal_calls (key, payload, released) VALUES (%s, '{}', 1)",
        (signal_key(ids["released"]),),
    )

    signals = evidence(h.db, CONFIG)["signals"]

    assert (signals["second_signal_released"], signals["calls_miscounted"]) == (1, 1)
    assert failing(verdict(h.db)) == ["signals_once"]


def test_a_timed_out_wait_a_signal_counted_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    h.db.execute("UPDATE chaos.signal_calls SET released = 1 WHERE key = %s", (signal_key(ids["timed_out"]),))

    signals = evidence(h.db, CONFIG)["signals"]

    assert (signals["timeout_wrong"], signals["calls_miscounted"]) == (1, 1)
    assert failing(verdict(h.db)) == ["signals_once"]


def test_a_job_released_twice_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    # the log of a second release of the parked job (waiting -> queued again)
    h.db.execute(
        "INSERT INTO chaos.transitions (job_id, old_status, new_status, old_lease, new_lease, old_attempts,"
        " attempts, reaped, errored, run_at, at, xid)"
        " SELECT job_id, old_status, new_status, old_lease, new_lease, old_attempts, attempts, reaped,"
        "        errored, run_at, at, xid"
        "   FROM chaos.transitions WHERE job_id = %s AND old_status = 'waiting' AND new_status = 'queued'",
        (ids["released"],),
    )

    signals = evidence(h.db, CONFIG)["signals"]

    assert signals["not_released_once"] == 1
    assert failing(verdict(h.db)) == ["signals_once"]


def test_a_payload_not_the_first_signals_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    h.db.execute(
        "UPDATE chaos.signal_calls SET payload = '{\"other\": true}' WHERE key = %s",
        (signal_key(ids["released"]),),
    )

    assert evidence(h.db, CONFIG)["signals"]["payload_wrong"] == 1
    assert failing(verdict(h.db)) == ["signals_once"]


def test_a_run_that_saw_another_outcome_is_counted(history: tuple[History, dict[str, int]]) -> None:
    h, ids = history
    h.db.execute(
        "UPDATE chaos.resumes SET payload = '{\"other\": true}' WHERE job_id = %s AND kind = 'signal'",
        (ids["at_once"],),
    )

    assert evidence(h.db, CONFIG)["signals"]["resumes_wrong"] == 1
    assert failing(verdict(h.db)) == ["signals_once"]


# -- (5) nothing lost ------------------------------------------------------------------------------


def test_a_job_never_run_is_lost(history: tuple[History, dict[str, int]]) -> None:
    h, _ = history
    h.enqueue()  # acknowledged, and no worker ever takes it

    lost = evidence(h.db, CONFIG)["lost"]

    assert (lost["lost"], lost["left_over"]) == (1, 1)
    assert failing(verdict(h.db)) == ["nothing_lost"]


@pytest.mark.parametrize(
    ("error", "counted"),
    [
        pytest.param("OperationalError: consuming input failed: server closed the connection unexpectedly", 0,
                     id="the database going away"),
        pytest.param("InvalidArgument: result is not serialisable as JSON", 1, id="another error"),
    ],
)  # fmt: skip
def test_an_attempt_failed_by_anything_but_the_database_going_away_is_counted(
    history: tuple[History, dict[str, int]], error: str, counted: int
) -> None:
    h, _ = history
    job = h.claim(j := h.enqueue())
    # the handler's record of its run raising, and the worker's report of it
    h.db.execute(
        "INSERT INTO chaos.runs (token, job_id, lease, pid, worker, outcome)"
        " VALUES (gen_random_uuid(), %s, %s, 1, 'w1', 'error: ' || split_part(%s, ':', 1))",
        (j, job.lease, error),
    )
    pgjobq.fail(h.db, j, error, job.lease)
    h.db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 s' WHERE id = %s", (j,))
    h.plain(h.claim(j))

    lost = evidence(h.db, CONFIG)["lost"]

    assert (lost["failed_attempts"], lost["other_failures"]) == (1, counted)
    assert (lost["runs_raised"], lost["runs_other_errors"]) == (1, counted)
    assert failing(verdict(h.db)) == (["nothing_lost"] if counted else [])


def test_a_run_handed_back_after_raising_anything_but_a_connection_error_is_counted(
    history: tuple[History, dict[str, int]],
) -> None:
    h, _ = history
    job = h.claim(j := h.enqueue())
    h.db.execute(
        "INSERT INTO chaos.runs (token, job_id, lease, pid, worker, outcome)"
        " VALUES (gen_random_uuid(), %s, %s, 1, 'w1', 'error: KeyError')",
        (j, job.lease),
    )
    h.db.execute("SELECT jobq.release(%s, %s)", (j, job.lease))  # no failure recorded on the job
    h.plain(h.claim(j))

    lost = evidence(h.db, CONFIG)["lost"]

    assert (lost["failed_attempts"], lost["runs_other_errors"]) == (0, 1)
    assert failing(verdict(h.db)) == ["nothing_lost"]


# What a run sees besides the evidence tables, gone wrong, and the invariant it fails
SEEN_WRONG = [
    pytest.param("clean_exit", {"exits": {"w1": None}}, id="a worker still running after SIGTERM"),
    pytest.param("clean_exit", {"exits": {}}, id="no worker told to exit"),
    pytest.param("clean_exit", {"unexpected_exits": [("w2", 1)]}, id="a worker exiting on its own"),
    pytest.param("faults", {"kills_holding": 0}, id="no kill of a worker holding jobs"),
    pytest.param("faults", {"stopped": False}, id="no SIGSTOP"),
    pytest.param("faults", {"outages": []}, id="no restart"),
    pytest.param("nothing_lost", {"acked": 99}, id="ids acknowledged that the table of them lacks"),
]


@pytest.mark.parametrize(("key", "changes"), SEEN_WRONG)
def test_the_verdict_fails_a_run_that_saw(
    history: tuple[History, dict[str, int]], key: str, changes: dict[str, Any]
) -> None:
    h, _ = history

    assert failing(verdict(h.db, **changes)) == [key]


# -- the short durable chaos run -------------------------------------------------------------------


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DurableReport]:
    """One short durable chaos run for the tests below; its table is printed (pytest -s shows it).

    Session-scoped and kept on one pytest-xdist worker by its group, as test_chaos_limits.py's: a second
    worker of the same run that gets here fails them rather than running it again.
    """
    once_per_run("chaos-durable", "the durable chaos run")
    result = run_durable(DurableConfig.short(), tmp_path_factory.mktemp("chaos-durable"))
    render(result, Console(width=160))
    yield result


@pytest.mark.slow
def test_durable_chaos_run_judges_every_invariant_the_harness_declares_and_no_other(
    report: DurableReport,
) -> None:
    assert sorted(report.keys()) == sorted(INVARIANTS)


@pytest.mark.slow
@pytest.mark.parametrize("key", INVARIANTS)
def test_durable_chaos_run_holds_the_invariant(report: DurableReport, key: str) -> None:
    report.assert_holds(key)
